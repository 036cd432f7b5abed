"""DataLoader worker processes in simulated time (issue #15).

With `num_workers=0` a DataLoader fetches batches on the training thread: its Python and CPU
ops are charged to the simulated host as they run (runtime/host/pyhost.py, the capture mode).
With workers, batches are produced by forked processes in parallel with the training loop,
and the loop waits only when the batch it asks for is not ready yet. This reproduces that
in simulated time, around torch's own multiprocessing DataLoader (which keeps running for
real, so batches, their order and the user's code are unchanged):

- in a worker, each batch's fetch (the dataset's `__getitem__`s and `collate_fn`) is timed on
  the worker's own simulated clock (a forked copy of the rank's: its Python calls and CPU ops
  are charged there) and sent with the batch;
- the training process records when it handed each batch's indices to a worker; the worker
  starts a batch when it has the indices and has finished its previous one, so batch i is
  ready at max(sent_i, ready of the worker's previous batch) + fetch_i, and then pinned
  (`pin_memory=True`: one pinning thread, bytes at the host's copy bandwidth);
- when the loop takes batch i it waits, in simulated time, until it is ready.

Approximate: worker start-up (process fork, imports) is not simulated; workers started with
the `spawn`/`forkserver` methods run outside the simulator and their batches cost nothing
(said once in a warning).
"""
from __future__ import annotations

import collections
import logging
from typing import Any

log = logging.getLogger(__name__)

_STATE: dict[str, Any] = {}


class CostedBatch:
    """A batch and the simulated ns its worker spent producing it (crosses the worker queue)."""

    __slots__ = ("data", "cost_ns", "pin_ns")

    def __init__(self, data: Any, cost_ns: int):
        self.data = data
        self.cost_ns = cost_ns
        self.pin_ns = 0

    def pin_memory(self, device: Any = None) -> "CostedBatch":
        """Called by DataLoader's pinning thread: pin the batch, and account the copy.

        The pinning's own ops are not recorded: the thread runs at real-time pace beside the
        training loop, so its records would land wherever the OS scheduled it (they shared the
        autograd thread's row and overlapped its ops under load); its cost is `pin_ns`."""
        from torch.utils.data._utils.pin_memory import pin_memory

        from phantora_prof.runtime.dispatch import op_recorder

        rec = op_recorder.get()
        was = rec.quiet(1) if rec is not None else None
        try:
            self.data = pin_memory(self.data, device) if device is not None else pin_memory(self.data)
        finally:
            if rec is not None:
                rec.quiet(was)
        self.pin_ns = _pin_ns(self.data)
        return self

    def __reduce__(self):
        return (_rebuild, (self.data, self.cost_ns))


def _rebuild(data: Any, cost_ns: int) -> CostedBatch:
    return CostedBatch(data, cost_ns)


def _pin_ns(data: Any) -> int:
    """Host time of copying a batch into pinned memory (bytes at the host's copy bandwidth)."""
    from phantora_prof import hostcost

    nbytes = _nbytes(data)
    return int(hostcost.PIN_BASE_NS + nbytes / hostcost.PIN_BYTES_PER_NS) if nbytes else 0


def _nbytes(data: Any) -> int:
    import torch

    if isinstance(data, torch.Tensor):
        return data.numel() * data.element_size()
    if isinstance(data, dict):
        return sum(_nbytes(v) for v in data.values())
    if isinstance(data, (list, tuple)):
        return sum(_nbytes(v) for v in data)
    return 0


def install(clock: Any, pyhost: Any = None) -> None:
    """Patch torch.utils.data so that worker batches carry their cost and the loop waits for them."""
    import torch.utils.data.dataloader as dl
    from torch.utils.data import get_worker_info

    if _STATE:
        return
    _STATE["clock"] = clock
    _STATE["pyhost"] = pyhost
    kind = dl._DatasetKind
    orig_create = kind.create_fetcher
    mp_iter = dl._MultiProcessingDataLoaderIter
    orig_put = mp_iter._try_put_index
    orig_process = mp_iter._process_data

    def create_fetcher(*args, **kwargs):
        fetcher = orig_create(*args, **kwargs)
        if get_worker_info() is None:
            return fetcher  # the training process itself (num_workers=0): charged as it runs
        fetch = fetcher.fetch

        def costed_fetch(index):
            host = _STATE.get("pyhost")
            t0 = clock.now_ns
            depth = host.native.user_begin() if host is not None else None
            try:  # the dataset's and collate's Python is the program's: counted
                data = fetch(index)
            finally:
                if depth is not None:
                    host.native.user_end(depth)
            return CostedBatch(data, clock.now_ns - t0)

        fetcher.fetch = costed_fetch
        return fetcher

    def try_put_index(self) -> None:
        before = self._send_idx
        orig_put(self)
        if self._send_idx != before:  # an index list went to a worker: remember when
            worker = self._task_info[self._send_idx - 1][0]
            _sent(self)[worker].append(clock.now_ns)

    def process_data(self, data, worker_idx):
        if isinstance(data, CostedBatch):
            sent = _sent(self)[worker_idx]
            sent_ns = sent.popleft() if sent else clock.now_ns
            free = _free(self)
            ready = max(sent_ns, free.get(worker_idx, 0)) + data.cost_ns
            free[worker_idx] = ready
            if data.pin_ns:
                pin_free = max(ready, getattr(self, "_phantora_pin_free", 0)) + data.pin_ns
                self._phantora_pin_free = pin_free
                ready = pin_free
            clock.advance_to(ready)
            data = data.data
        elif not _STATE.get("warned") and type(data).__name__ not in ("ExceptionWrapper",
                                                                        "_IterableDatasetStopIteration"):
            _STATE["warned"] = True
            log.warning("DataLoader workers run outside the simulator (a 'spawn' or 'forkserver' start method?): "
                        "their batches cost no simulated time")
        return orig_process(self, data, worker_idx)

    kind.create_fetcher = staticmethod(create_fetcher)
    mp_iter._try_put_index = try_put_index
    mp_iter._process_data = process_data


def _sent(it: Any) -> dict:
    d = getattr(it, "_phantora_sent", None)
    if d is None:
        d = it._phantora_sent = collections.defaultdict(collections.deque)
    return d


def _free(it: Any) -> dict:
    d = getattr(it, "_phantora_free", None)
    if d is None:
        d = it._phantora_free = {}
    return d
