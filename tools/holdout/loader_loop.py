"""The host-bound DataLoader's own work, alone: hostbound.py's per-sample text dataset (loader0's)
taken batch by batch with num_workers=0 and no model (issue #15). The Python of a user's dataset,
measured the way tools/holdout/python_rates.py measures framework code: the baseline its
per-file weights are relative to.

    python tools/holdout/loader_loop.py --batches 200            # prints LOADER {"ms_per_batch": ...}
    python tools/holdout/loader_loop.py --batches 2000 --spy F   # py-spy (native frames, 100 Hz) over them
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402,F401
from torch.utils.data import DataLoader  # noqa: E402

import hostbound  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--spy", metavar="FILE")
    a = p.parse_args()
    torch.set_num_threads(1)
    ds = hostbound.SyntheticText(32 * (a.batches + 10), a.seq + 1, 8192)
    it = iter(DataLoader(ds, batch_size=32, shuffle=False, num_workers=0, pin_memory=False))
    for _ in range(5):
        next(it)
    spy = None
    if a.spy:
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(os.getpid()), "--rate", "100", "--native",
                                "--format", "raw", "-o", a.spy])
        time.sleep(2.0)
    t0 = time.perf_counter()
    for _ in range(a.batches):
        next(it)
    ms = (time.perf_counter() - t0) / a.batches * 1e3
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    print("LOADER " + json.dumps({"ms_per_batch": round(ms, 4), "batches": a.batches}), flush=True)


if __name__ == "__main__":
    main()
