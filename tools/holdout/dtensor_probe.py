"""Host cost of tensor-subclass dispatch (DTensor), on one GPU: the overhead that makes TP / FSDP2
steps host-bound (issue #15).

    torchrun --nproc-per-node 1 tools/holdout/dtensor_probe.py        # real, one GPU
    phantora-prof python tools/holdout/dtensor_probe.py               # simulated

Prints, per case, the host time per iteration with DTensor parameters and with plain ones
(synchronized, so the GPU's share is included; the tensors are small, so the host decides):
elementwise in-place ops, an AdamW(foreach=False) step over 52 parameters, and linear layers.
"""
from __future__ import annotations

import json
import os
import time

import torch
import torch.distributed as dist


def timed(fn, iters: int) -> float:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cuda", (1,))
    res = {}
    x, y = torch.randn(256, 256, device="cuda"), torch.randn(256, 256, device="cuda")
    dx, dy = distribute_tensor(x.clone(), mesh, [Shard(0)]), distribute_tensor(y.clone(), mesh, [Shard(0)])

    def ew(a, b):
        a.add_(b)
        a.mul_(0.5)
        a.addcmul_(b, b, value=0.1)
        a.lerp_(b, 0.1)

    res["elementwise_us_per_op"] = {"plain": timed(lambda: ew(x, y), 200) / 4,
                                    "dtensor": timed(lambda: ew(dx, dy), 200) / 4}
    shapes = [(1024, 1024)] * 16 + [(4096, 1024)] * 8 + [(1024, 4096)] * 8 + [(1024,)] * 20
    for kind in ("plain", "dtensor"):
        params = []
        for s in shapes:
            t = torch.randn(*s, device="cuda")
            p = torch.nn.Parameter(distribute_tensor(t, mesh, [Shard(0)]) if kind == "dtensor" else t)
            p.grad = (distribute_tensor(torch.randn(*s, device="cuda"), mesh, [Shard(0)]) if kind == "dtensor"
                      else torch.randn(*s, device="cuda"))
            params.append(p)
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=False)
        res.setdefault("adamw_forloop_step_us", {})[kind] = timed(opt.step, 20)
    lin = torch.nn.Linear(1024, 1024, device="cuda")
    inp = torch.randn(8, 1024, device="cuda")
    res.setdefault("linear_us", {})["plain"] = timed(lambda: lin(inp), 200)
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    tp = parallelize_module(torch.nn.Sequential(torch.nn.Linear(1024, 1024, device="cuda")), mesh, {"0": ColwiseParallel()})
    res["linear_us"]["dtensor"] = timed(lambda: tp(inp), 200)
    print("RESULT " + json.dumps({k: {kk: round(vv, 2) for kk, vv in v.items()} for k, v in res.items()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
