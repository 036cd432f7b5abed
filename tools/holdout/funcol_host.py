"""Host time of collective calls as torch.distributed's callers make them, one rank (issue #15).

Cases, each a loop of small (1 KiB) tensors so the host, not the GPU, sets the pace; printed as
``CASE name us_per_iter``:
- add:            `y = x + 1` (the baseline op)
- c10d_allreduce: `dist.all_reduce(x)` (c10d, in place, as DDP's buckets)
- funcol:         `funcol.all_reduce(x)` then `+ 1` on the result (DTensor's path: the clone,
                  the AsyncCollectiveTensor, its `wait_tensor` at first use)
- funcol_wait:    `funcol.all_reduce(x)` then `.wait()`... as `_functional_collectives.wait_tensor`
Run as a one-rank torchrun (NCCL with one rank: the c10d and NCCL host path, a one-rank kernel) or
under phantora-prof (`phantora-prof --nproc-per-node 1 torchrun --nproc-per-node 1 funcol_host.py`).
Plain PyTorch.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol


def timed(fn, iters: int) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / iters * 1e6


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    group = dist.group.WORLD
    x = torch.ones(256, device="cuda")
    cases = {
        "add": lambda: x + 1,
        "c10d_allreduce": lambda: dist.all_reduce(x),
        "funcol": lambda: funcol.all_reduce(x, "sum", group) + 1,
        "funcol_wait": lambda: funcol.wait_tensor(funcol.all_reduce(x, "sum", group)),
    }
    for r in range(args.rounds):
        for name, fn in cases.items():
            print(f"CASE {name} {timed(fn, args.iters):.2f} round {r}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
