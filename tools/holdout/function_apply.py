"""Host cost of a custom autograd Function, forward and backward (issue #15). One GPU.

    python tools/holdout/function_apply.py            (real, on a GPU)
    phantora-prof python tools/holdout/function_apply.py

torch.autograd.Function.apply does C++ work no aten op stands for: it builds the backward
node (a PyNode), runs the Python forward with grad mode off, and wraps the outputs (grad_fn,
version counters, view checks); in the backward the engine calls back into Python through the
PyNode (the GIL, wrapping each gradient). DTensor's from_local / to_local / redistribute,
FSDP2's hooks, activation checkpointing and Megatron's mappings are such Functions. Here an
identity Function (its forward one view_as) is timed against the same view_as without it,
forward alone and in chains of 16 with their backward. Prints `APPLY {json}`: microseconds.
"""
from __future__ import annotations

import json
import statistics
import time

import torch


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g


def per_call(fn, n: int, reps: int = 7) -> float:
    """Median over reps of the mean microseconds per call of n calls (synchronized around)."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter_ns() - t0) / n / 1e3)
    return round(statistics.median(out), 3)


def main() -> None:
    x = torch.randn(1024, device="cuda", requires_grad=True)
    chain = 16

    def fwd_plain():
        x.view_as(x)

    def fwd_apply():
        Identity.apply(x)

    def chain_plain():
        y = x
        for _ in range(chain):
            y = y.view_as(y)
        y.sum().backward()

    def chain_apply():
        y = x
        for _ in range(chain):
            y = Identity.apply(y)
        y.sum().backward()

    for f in (fwd_plain, fwd_apply, chain_plain, chain_apply):  # warm-up
        per_call(f, 50, 1)
    res = {"fwd_plain": per_call(fwd_plain, 2000), "fwd_apply": per_call(fwd_apply, 2000),
           "chain_plain": per_call(chain_plain, 200), "chain_apply": per_call(chain_apply, 200)}
    res["apply_fwd_extra"] = round(res["fwd_apply"] - res["fwd_plain"], 3)
    res["apply_fwd_bwd_extra"] = round((res["chain_apply"] - res["chain_plain"]) / chain, 3)
    print("APPLY " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
