"""DTensor op cost in context against the same op repeated on its own (issue #15). CPU, one rank.

    python tools/holdout/dtensor_context.py

(a) `addcdiv_` on one DTensor, repeated; (b) a for-loop AdamW step (torch's _single_tensor_adam
shape: mul_, lerp_, mul_, addcmul_, sqrt, div, add_, addcdiv_ per parameter, bias corrections
that change every step) over 32 DTensor parameters of a 4-block TP GPT's shapes and
placements (sizes capped at 64 so the kernels cost little). Prints microseconds per op, and
Python bytecode instructions, Python calls and C calls per op: in context a DTensor op runs
~4x the Python of the repeated one (sharding propagation misses its cache when the scalars
change) and that Python costs several times what framework-style Python costs per instruction.
"""
import os
import statistics
import time

import torch
import torch.distributed as dist
from dtensor_ops import count_opcodes  # this folder's DTensor probe: instructions per call, as pyhost counts them

from phantora_prof.measure.host_probe import count_calls


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29577")
    dist.init_process_group("gloo", rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (1,))
    torch.set_grad_enabled(False)
    shapes = [(3072, 1024), (3072,), (1024, 1024), (1024,), (4096, 1024), (4096,), (1024, 4096), (1024,)] * 4
    params = []
    for i, s in enumerate(shapes):  # column-wise (Shard(0)) qkv / fc, row-wise (Shard(1)) proj / out
        placement = [Shard(0)] if i % 8 in (0, 1, 4, 5) else ([Shard(1)] if len(s) == 2 else [Replicate()])
        small = [min(d, 64) for d in s]
        p = distribute_tensor(torch.randn(*small), mesh, placement)
        p.grad = distribute_tensor(torch.randn(*small), mesh, placement)
        params.append(p)
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    x, g = params[2], params[2].grad
    step = [0]

    def single():
        for _ in range(100):
            x.addcdiv_(g, g, value=-0.1)

    def adam():
        step[0] += 1
        bc1, bc2 = 1 - 0.9 ** step[0], 1 - 0.999 ** step[0]
        for p, (m, v) in zip(params, state):
            gr = p.grad
            p.mul_(1 - 1e-5)
            m.lerp_(gr, 0.1)
            v.mul_(0.999).addcmul_(gr, gr, value=0.001)
            denom = (v.sqrt() / bc2 ** 0.5).add_(1e-8)
            p.addcdiv_(m, denom, value=-1e-3 / bc1)

    cases = {"repeated addcdiv_": (single, 100), "for-loop AdamW": (adam, 8 * len(params))}
    for fn, _ in cases.values():
        fn()
        fn()
    for name, (fn, ops) in cases.items():
        ts = []
        for _ in range(7):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) / ops * 1e6)
        calls = count_calls(fn)
        print(f"{name:18s} {statistics.median(ts):6.1f} us/op  {count_opcodes(fn, 1) / ops:5.0f} instructions/op  "
              f"{calls['py_calls'] / ops:4.0f} Python calls/op  {calls['c_calls'] / ops:4.0f} C calls/op", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
