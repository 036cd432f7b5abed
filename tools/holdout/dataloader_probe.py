"""What moving a batch from a DataLoader worker to the training loop costs the host (issue #15).

    python tools/holdout/dataloader_probe.py [--pin] [--out FILE.json]

Plain PyTorch, nothing simulator-specific: run it on the host whose costs you want (the
device tool's H200 machine for the reference host). A worker's batch is collated into shared
memory, pickled by the worker queue's feeder thread (each storage's file descriptor registered
with the worker's resource sharer), and unpickled in the training process (or, with
`pin_memory=True`, in its pinning thread, which then copies it into pinned memory): the
unpickling fetches each storage's descriptor over a socket from the worker and maps it. None
of that is the dataset's code. Cases vary the tensors per batch and the bytes per batch; the
dataset hands out precomputed tensors, so a batch costs only this machinery and collate.

Per case it prints, in microseconds:
- `take_us`: the training thread's `next(it)` when the batch has long been ready (the loop
  sleeps between batches), median over batches: the receiving side's cost on that thread;
- `collate_us`: collate in the worker (stacking into shared memory), median, reported by
  the worker itself;
- `fetch_us`: the worker's whole fetch (the dataset's `__getitem__`s and collate);
- `pipe_us`: per batch with one worker and a loop that takes batches as fast as it can (the
  pipeline's throughput: the worker's fetch plus sending, or the receiving side, whichever is
  slower).
"""
import argparse
import json
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.collate import default_collate


class Precomputed(Dataset):
    """Samples are dicts of `tensors` 1-D float tensors of `elems` elements, made once."""

    def __init__(self, n: int, tensors: int, elems: int):
        self.n = n
        self.sample = {f"t{k}": torch.randn(elems) for k in range(tensors)}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return self.sample


def timed_collate(samples):
    t0 = time.perf_counter()
    out = default_collate(samples)
    out["_collate_us"] = (time.perf_counter() - t0) * 1e6
    return out


class TimedFetch(Dataset):
    """Wraps a dataset so the worker's whole fetch of a batch is timed (batched sampler)."""

    def __init__(self, inner: Dataset, batch: int):
        self.inner, self.batch = inner, batch

    def __len__(self) -> int:
        return len(self.inner) // self.batch

    def __getitem__(self, b: int):
        t0 = time.perf_counter()
        out = timed_collate([self.inner[b * self.batch + j] for j in range(self.batch)])
        out["_fetch_us"] = (time.perf_counter() - t0) * 1e6
        return out


def run_case(tensors: int, batch_bytes: int, batch: int, pin: bool, batches: int = 40) -> dict:
    elems = max(1, batch_bytes // (4 * tensors * batch))
    ds = TimedFetch(Precomputed(batch * (batches + 8), tensors, elems), batch)
    res = {"tensors": tensors, "batch_bytes": tensors * batch * elems * 4, "batch": batch, "pin": pin}
    # (1) the receiving side: batches long ready when taken
    dl = DataLoader(ds, batch_size=None, num_workers=2, pin_memory=pin, prefetch_factor=2, persistent_workers=False)
    take, coll, fetch = [], [], []
    it = iter(dl)
    time.sleep(0.5)
    for i in range(batches):
        t0 = time.perf_counter()
        out = next(it)
        take.append((time.perf_counter() - t0) * 1e6)
        coll.append(out["_collate_us"])
        fetch.append(out["_fetch_us"])
        time.sleep(0.02)
    del it
    # (2) the pipeline with one worker, taken as fast as possible
    dl1 = DataLoader(ds, batch_size=None, num_workers=1, pin_memory=pin, prefetch_factor=2, persistent_workers=False)
    it = iter(dl1)
    for _ in range(4):
        next(it)
    t0 = time.perf_counter()
    n = 0
    for _ in range(batches - 8):
        next(it)
        n += 1
    pipe = (time.perf_counter() - t0) * 1e6 / n
    del it
    res.update(take_us=statistics.median(take[4:]), take_min_us=min(take[4:]), collate_us=statistics.median(coll),
               fetch_us=statistics.median(fetch), pipe_us=pipe)
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pin", action="store_true", help="pin_memory=True (needs CUDA)")
    p.add_argument("--out", default=None)
    p.add_argument("--batch", type=int, default=16)
    a = p.parse_args()
    rows = []
    for tensors in (1, 2, 8, 32):
        for kib in (64, 1024, 8192):
            for pin in ((False, True) if a.pin else (False,)):
                r = run_case(tensors, kib * 1024, a.batch, pin)
                rows.append(r)
                print(json.dumps(r), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"rows": rows, "torch": torch.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
