"""One way to time a GPU call for the lease probes: CUDA events around each call, the median.

    from cuda_timing import median_us   (the probes run from tools/holdout: python tools/holdout/X.py)
"""
from __future__ import annotations

import statistics

import torch


def median_us(fn, reps: int = 20, warmup: int = 3) -> float:
    """Microseconds of `fn()` on the current stream: the median of `reps` calls, each between two
    CUDA events and synchronized, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    return statistics.median(out)
