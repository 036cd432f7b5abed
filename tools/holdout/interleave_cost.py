"""What one DTensor linear costs after k other ops of one kind or of many kinds (issue #15).

    python tools/holdout/interleave_cost.py --device cpu        (no GPU: CPU tensors, a gloo mesh)
    torchrun --nproc-per-node 1 tools/holdout/interleave_cost.py (on a GPU)
    phantora-prof --nproc-per-node 1 python tools/holdout/interleave_cost.py

A DTensor `F.linear` (a one-device mesh, weight sharded by rows) is timed alone, repeated
(perf_counter_ns around each call, median of `--n` calls, 1,500 by default), and after k = 1..32 other ops between two
calls: plain ops of up to sixteen kinds, DTensor ops of up to sixteen kinds, or k DTensor ops of
one kind; or k = 200..4000 generated Python functions, distinct or the same one. The same
amount of work in between costs the linear more when the work is of more different kinds
(tools/holdout/real_h200/session42/README.md; the warm-set model fitted on it is on the
`warmset` branch, not enabled).
Prints `INTERLEAVE {json}`: microseconds per timed linear for each case.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cold_ops import one_device_mesh  # noqa: E402


def main() -> None:
    calls = int(sys.argv[sys.argv.index("--n") + 1]) if "--n" in sys.argv else 1500  # timed calls per case
    dev, sync, mesh = one_device_mesh()
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    w = distribute_tensor(torch.randn(192, 64, device=dev), mesh, [Shard(0)])
    b = distribute_tensor(torch.randn(192, device=dev), mesh, [Shard(0)])
    x = DTensor.from_local(torch.randn(2, 16, 64, device=dev), mesh, [Replicate()])
    dts = [distribute_tensor(torch.randn(32, 64, device=dev), mesh, [Shard(0)]) for _ in range(4)]
    plains = [torch.randn(32, 64, device=dev) for _ in range(4)]
    kinds = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b, lambda a, b: torch.maximum(a, b),
             lambda a, b: F.gelu(a), lambda a, b: torch.sigmoid(a), lambda a, b: torch.tanh(a),
             lambda a, b: torch.exp(a), lambda a, b: a.sum(dim=1), lambda a, b: torch.cat([a, b]),
             lambda a, b: a.t().contiguous(), lambda a, b: a.to(torch.bfloat16),
             lambda a, b: torch.where(a > 0, a, b), lambda a, b: F.softmax(a, dim=-1), lambda a, b: a.mean(),
             lambda a, b: torch.clamp(a, -1, 1)]

    # generated Python functions, each with its own code and dict: distinct Python work in between
    src = "def f{i}(d):\n" + "".join(f"    d['a{j}'] = d.get('a{j}', 0) + {j}\n" for j in range(12)) + "    return d\n"
    funcs = []
    for i in range(4000):
        scope: dict = {}
        exec(src.format(i=i), scope)
        funcs.append((scope[f"f{i}"], {}))

    def python(k: int, distinct: bool = True):
        def run(i: int) -> None:
            for j in range(k):
                f, d = funcs[j if distinct else 0]
                f(d)
        return run

    def timed(between) -> float:
        n = calls
        out = []
        for i in range(n):
            between(i)
            t0 = time.perf_counter_ns()
            F.linear(x, w, b)
            out.append(time.perf_counter_ns() - t0)
            if i % 64 == 63:
                sync()
        return round(statistics.median(out[n // 10:]) / 1e3, 2)

    def ops(k: int, tensors: list, distinct: bool = True):
        def run(i: int) -> None:
            for j in range(k):
                kinds[(j if distinct else 0) % len(kinds)](tensors[j % 4], tensors[(j + 1) % 4])
        return run

    res = {"none": timed(lambda i: None)}
    for k in (1, 4, 8, 16, 32):
        res[f"plain_distinct_{k}"] = timed(ops(k, plains))
    for k in (1, 4, 8, 16, 32):
        res[f"dtensor_distinct_{k}"] = timed(ops(k, dts))
    for k in (4, 16, 32):
        res[f"dtensor_same_{k}"] = timed(ops(k, dts, False))
    for k in (200, 1000, 4000):
        res[f"python_distinct_{k}"] = timed(python(k))
    res["python_same_4000"] = timed(python(4000, False))
    res["none_again"] = timed(lambda i: None)
    print("INTERLEAVE " + json.dumps(res), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
