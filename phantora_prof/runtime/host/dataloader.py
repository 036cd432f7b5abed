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
- moving the batch between processes costs what the counted Python and CPU ops do not see
  (`hostcost.DATALOADER_IPC`, measured with tools/holdout/dataloader_probe.py): the worker puts
  each storage in a fresh shared-memory segment (part of its fetch); the receiving thread
  unpickles the batch, fetching each storage's file descriptor from the worker and mapping it:
  the training thread itself, or with `pin_memory=True` the pinning thread before its copy (the
  training thread then only takes the batch from a thread queue);
- when the loop takes batch i it waits, in simulated time, until it is ready, then pays its
  share of the receiving.

Approximate: worker start-up (process fork, imports) is not simulated; workers started with
the `spawn`/`forkserver` methods run outside the simulator and their batches cost nothing
(said once in a warning).
"""
from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from phantora_prof.runtime.host.pyhost import run_as_program

log = logging.getLogger(__name__)

_STATE: dict[str, Any] = {}


class CostedBatch:
    """A batch, the simulated ns its worker spent producing it, and what the receiving side pays
    for it (its storages and bytes); crosses the worker queue."""

    __slots__ = ("data", "cost_ns", "pin_ns", "storages", "nbytes")

    def __init__(self, data: Any, cost_ns: int, storages: int = 0, nbytes: int = 0):
        self.data = data
        self.cost_ns = cost_ns
        self.pin_ns = 0
        self.storages = storages
        self.nbytes = nbytes

    def pin_memory(self, device: Any = None) -> "CostedBatch":
        """Called by DataLoader's pinning thread: pin the batch, and account the copy.

        The pinning's own ops are not recorded (`_quiet_pin_loop`); its cost is `pin_ns`."""
        from torch.utils.data._utils.pin_memory import pin_memory

        self.data = pin_memory(self.data, device) if device is not None else pin_memory(self.data)
        self.pin_ns = _pin_ns(self.data)
        return self

    def __reduce__(self):
        return (_rebuild, (self.data, self.cost_ns, self.storages, self.nbytes))


def _rebuild(data: Any, cost_ns: int, storages: int = 0, nbytes: int = 0) -> CostedBatch:
    return CostedBatch(data, cost_ns, storages, nbytes)


def batch_tensors(data: Any) -> Iterator[Any]:
    """A batch's tensors, its containers walked as DataLoader's collate and pinning walk them:
    any Mapping (dicts, HF's BatchEncoding, a UserDict), lists, tuples and named tuples."""
    import torch

    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, Mapping):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)


def batch_storages(data: Any) -> tuple[int, int]:
    """The distinct CPU tensor storages of a batch and their bytes: what crosses the process
    boundary (one shared-memory segment and one file descriptor each); tensors that are views
    of one storage count once."""
    seen: dict[int, int] = {}
    for t in batch_tensors(data):
        if t.device.type == "cpu":
            st = t.untyped_storage()
            seen.setdefault(st.data_ptr(), st.nbytes())
    return len(seen), sum(seen.values())


def worker_ipc_ns(storages: int, nbytes: int) -> int:
    """A worker's cost of putting a batch's storages into fresh shared memory."""
    from phantora_prof import hostcost

    c = hostcost.DATALOADER_IPC
    return int(c["shm_base_ns"] + nbytes * c["shm_ns_per_byte"]) if storages else 0


def receive_ns(storages: int, nbytes: int) -> int:
    """The receiving thread's cost of unpickling a batch: fetching and mapping each storage."""
    from phantora_prof import hostcost

    c = hostcost.DATALOADER_IPC
    return int(c["recv_base_ns"] + storages * c["recv_per_storage_ns"] + nbytes * c["recv_ns_per_byte"])


def _pin_ns(data: Any) -> int:
    """Host time of copying a batch into pinned memory (bytes at the host's copy bandwidth)."""
    from phantora_prof import hostcost

    nbytes = _nbytes(data)
    return int(hostcost.PIN_BASE_NS + nbytes / hostcost.PIN_BYTES_PER_NS) if nbytes else 0


def _nbytes(data: Any) -> int:
    return sum(t.numel() * t.element_size() for t in batch_tensors(data))


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
            t0 = clock.now_ns
            data = run_as_program(_STATE.get("pyhost"), fetch, index)  # the dataset's and collate's Python
            storages, nbytes = batch_storages(data)
            clock.advance(worker_ipc_ns(storages, nbytes))
            return CostedBatch(data, clock.now_ns - t0, storages, nbytes)

        fetcher.fetch = costed_fetch
        return fetcher

    def try_put_index(self) -> None:
        before = self._send_idx
        orig_put(self)
        if self._send_idx != before:  # an index list went to a worker: remember when
            worker = self._task_info[self._send_idx - 1][0]
            _sent(self)[worker].append(clock.now_ns)

    def process_data(self, data, worker_idx):
        from phantora_prof import hostcost

        if isinstance(data, CostedBatch):
            sent = _sent(self)[worker_idx]
            sent_ns = sent.popleft() if sent else clock.now_ns
            free = _free(self)
            ready = max(sent_ns, free.get(worker_idx, 0)) + data.cost_ns
            free[worker_idx] = ready
            recv = receive_ns(data.storages, data.nbytes)
            if self._pin_memory:
                # the pinning thread unpickles the batch, then copies it; the loop takes it from a queue
                take = int(hostcost.DATALOADER_IPC["pinned_take_ns"])
                pin_free = max(ready, getattr(self, "_phantora_pin_free", 0)) + max(0, recv - take) + data.pin_ns
                self._phantora_pin_free = pin_free
                clock.advance_to(pin_free)
                clock.advance(take)
            else:
                clock.advance_to(ready)
                clock.advance(recv)
            data = data.data
        elif not _STATE.get("warned") and type(data).__name__ not in ("ExceptionWrapper",
                                                                        "_IterableDatasetStopIteration"):
            _STATE["warned"] = True
            log.warning("DataLoader workers run outside the simulator (a 'spawn' or 'forkserver' start method?): "
                        "their batches cost no simulated time")
        return orig_process(self, data, worker_idx)

    _quiet_pin_loop()
    # Taking a batch (`_next_data`: waiting for it, storing batches that arrive out of order,
    # sending the next indices) and shutting the workers down are not counted as the program's
    # Python: how often those loops run depends on when the OS ran the workers and the pinning
    # thread, so counting them made two runs differ. The wait's simulated length is modelled
    # in `process_data`; the loop's own Python (tens of us per batch on a GPU host) is left out
    # (approximate). `__next__` around it, and the workers' fetches, are counted.
    mp_iter._next_data = _uncounted(mp_iter._next_data)
    mp_iter._shutdown_workers = _uncounted(mp_iter._shutdown_workers)
    kind.create_fetcher = staticmethod(create_fetcher)
    mp_iter._try_put_index = try_put_index
    mp_iter._process_data = process_data


_taking = threading.local()


def taking_a_batch() -> bool:
    """Whether this thread is inside DataLoader's batch-taking loop (`_next_data`): the CPU ops
    it runs there (rebuilding the tensors of every batch that arrives, in whatever order the
    OS delivered them) cost no simulated time, or runs would differ with the arrival order
    (approximate: a few us per batch left out)."""
    return getattr(_taking, "depth", 0) > 0


def _uncounted(method: Any) -> Any:
    """`method` with the host-Python counter (runtime/host/pyhost.py) paused while it runs,
    and its CPU ops not charged (taking_a_batch)."""
    def call(self, *args, **kwargs):
        host = _STATE.get("pyhost")
        if host is None:
            return method(self, *args, **kwargs)
        # charge the program's Python so far now: left pending, it would be charged at the
        # first clock read inside, which comes before or after the modelled wait depending on
        # whether another batch happened to arrive first
        _STATE["clock"].charge_pending()
        host.native.pause()
        _taking.depth = getattr(_taking, "depth", 0) + 1
        try:
            return method(self, *args, **kwargs)
        finally:
            _taking.depth -= 1
            host.native.resume()

    return call


def _quiet_pin_loop() -> None:
    """Nothing DataLoader's pinning thread dispatches is recorded in the op tree.

    The thread runs at real-time pace beside the training loop: what it dispatches (the
    tensors it rebuilds from the workers' shared memory: aten::empty + aten::set_, then the
    pinning copies) would be stamped with whatever the simulated clock read when the OS ran
    it, on the row of the rank's other non-main thread (autograd's), overlapping its ops
    under load and making two runs' traces differ. Its cost is modelled (`CostedBatch.pin_ns`)."""
    import torch.utils.data._utils.pin_memory as pin_module

    loop = pin_module._pin_memory_loop
    if getattr(loop, "_phantora_quiet", False):
        return

    def quiet_loop(*args, **kwargs):
        from phantora_prof.runtime.dispatch import op_recorder

        rec = op_recorder.get()
        if rec is not None:
            rec.quiet(1)  # this thread only, for its whole life
        return loop(*args, **kwargs)

    quiet_loop._phantora_quiet = True
    pin_module._pin_memory_loop = quiet_loop


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
