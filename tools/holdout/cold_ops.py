"""Does a plain CUDA op cost more when other work ran just before it (issue #15)? One GPU.

    torchrun --nproc-per-node 1 tools/holdout/cold_ops.py [--counters] [--device cpu]

In the TP example a plain op (layer_norm, SDPA, the residual add) costs several times its cost in
the plain model (py-spy, session 41), though it is the same call on the same shapes. The
hypothesis: what runs between two ops (DTensor's dispatch Python) evicts the dispatcher's code
and data from the CPU caches, so each op starts cold. Here one small plain op is timed on its own
(perf_counter_ns around the call, median of many) after: nothing; k DTensor ops on a one-GPU
mesh; k plain ops of up to 16 other kinds; a pure-Python pass over a list of S distinct objects (a working set of about S x 100 B).
Prints `COLD {json}`: microseconds per timed op for each case.
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


def one_device_mesh():
    """(device, synchronize, mesh): a one-device mesh on this rank's GPU, or with `--device cpu`
    on CPU tensors and gloo (no GPU needed: the effects measured here are the host's). Without
    torchrun's environment it starts a one-process group of its own. Also interleave_cost.py's."""
    dev = "cpu" if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1] == "cpu" else "cuda"
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29536"), ("RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(k, v)
    if dev == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if dev == "cuda" else "gloo")
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    from torch.distributed.device_mesh import init_device_mesh
    return dev, sync, init_device_mesh(dev, (1,))


def main() -> None:
    # --counters: CPU hardware counters per case (hwcounters.py), each case run twice, with and
    # without the timed op, so the difference is the op's own cycles / instructions / misses there
    counting = "--counters" in sys.argv
    counters = None
    if counting:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from hwcounters import ThreadCounters
    per_op: dict[str, dict[str, float]] = {}
    dev, sync, mesh = one_device_mesh()
    from torch.distributed.tensor import Shard, distribute_tensor
    x = torch.randn(8, 1024, device=dev)
    w = torch.ones(1024, device=dev)
    b = torch.zeros(1024, device=dev)
    d = distribute_tensor(torch.randn(8, 1024, device=dev), mesh, [Shard(0)])
    pools = {s: [{"v": i} for i in range(s)] for s in (1_000, 10_000, 100_000, 1_000_000)}

    def loop(between, n, op=True):
        out = []
        for i in range(n):
            between(i)
            t0 = time.perf_counter_ns()
            if op:
                F.layer_norm(x, (1024,), w, b)
            out.append(time.perf_counter_ns() - t0)
            if i % 64 == 63:
                sync()
        return out

    def counted(between, n, op):
        loop(between, 50, op)
        counters.enable()
        loop(between, n, op)
        counters.disable()
        return counters.read()

    def timed(between, n=400, name="") -> float:
        out = loop(between, n)
        if counters is not None and name:
            with_op, without = counted(between, n, True), counted(between, n, False)
            per_op[name] = {k: round((with_op[k] - without[k]) / n) for k in with_op}
        return round(statistics.median(out[50:]) / 1e3, 2)

    def dtensor_ops(k):
        def run(i):
            y = d
            for _ in range(k):
                y = y + 1.0
        return run

    others = [torch.randn(8, 1024, device=dev) for _ in range(4)]
    kinds = [torch.add, torch.mul, torch.sub, torch.maximum, lambda a, b: F.gelu(a), lambda a, b: torch.sigmoid(a),
             lambda a, b: torch.tanh(a), lambda a, b: torch.exp(a), lambda a, b: a.sum(dim=1),
             lambda a, b: torch.cat([a, b]), lambda a, b: a.t().contiguous(), lambda a, b: a.to(torch.bfloat16),
             lambda a, b: torch.where(a > 0, a, b), lambda a, b: F.softmax(a, dim=-1), lambda a, b: a.mean(),
             lambda a, b: torch.clamp(a, -1, 1)]

    def plain_ops(k):  # k plain ops of up to 16 kinds between two timed calls: the reuse distance in ops
        def run(i):
            for j in range(k):
                kinds[j % len(kinds)](others[j % 4], others[(j + 1) % 4])
        return run

    def touch(s, reads=4000):
        pool = pools[s]
        step = max(1, s // reads)

        def run(i):
            acc = 0
            for j in range((i * 7919) % step, s, step):
                acc += pool[j]["v"]
        return run

    if counting:
        counters = ThreadCounters.open()
        if counters is None:
            print("COUNTERS unavailable: " + ThreadCounters.why_not, flush=True)
    res = {"none": timed(lambda i: None, name="none")}
    for k in (1, 4, 16, 64):
        res[f"dtensor_{k}"] = timed(dtensor_ops(k), name=f"dtensor_{k}")
    for k in (1, 4, 16, 64):
        res[f"plain_{k}"] = timed(plain_ops(k), name=f"plain_{k}")
    for s in pools:
        res[f"touch_{s}"] = timed(touch(s), name=f"touch_{s}")
    res["none_again"] = timed(lambda i: None, name="none_again")
    print("COLD " + json.dumps(res), flush=True)
    if per_op:
        print("COLD_COUNTERS " + json.dumps(per_op), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
