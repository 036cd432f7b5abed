"""Host cost of DTensor dispatch per kind of op, with the Python it executes (issue #15).

    python tools/holdout/dtensor_ops.py --out dt.json                 # real GPU (or --device cpu)
    phantora-prof python tools/holdout/dtensor_ops.py --no-count      # simulated

One process, a one-device mesh. Per case (an op on DTensors of small shapes, so the host
decides) it prints the time per iteration with DTensor arguments and with plain tensors
(synchronized loops), and, in a separate untimed pass, per iteration: how many ops DTensor
dispatched (a TorchDispatchMode sees each one with its DTensor arguments) and how many Python
bytecode instructions ran (sys.settrace with opcode events; __eq__/__ne__/__hash__ and what
they call are left out, as the simulator's counter does). The counts say whether two torch
versions run the same Python for the same op; the times what the C++ side costs beyond it.
DTENSOR_OPS_COUNT_HASHING=1 counts __eq__/__ne__/__hash__ too (to see how much they hide).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode


def timed(fn, iters: int, sync) -> float:
    for _ in range(3):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters * 1e6


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


_SKIP = frozenset(() if os.environ.get("DTENSOR_OPS_COUNT_HASHING") else ("__eq__", "__ne__", "__hash__"))


def count_opcodes(fn, iters: int) -> float:
    n = [0]
    skip_depth = [0]

    def tracer(frame, event, arg):
        if event == "call":
            if skip_depth[0] or frame.f_code.co_name in _SKIP:
                skip_depth[0] += 1
                frame.f_trace_opcodes = False
                return tracer
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
            return tracer
        if event == "opcode":
            if not skip_depth[0]:
                n[0] += 1
        elif event == "return" and skip_depth[0]:
            skip_depth[0] -= 1
        return tracer

    fn()
    sys.settrace(tracer)
    try:
        for _ in range(iters):
            fn()
    finally:
        sys.settrace(None)
    return n[0] / iters


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--no-count", action="store_true", help="times only (under the simulator)")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29543")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    dev = a.device
    if dev == "cuda":
        torch.cuda.set_device(0)
        sync = torch.cuda.synchronize
    else:
        def sync():
            return None
    dist.init_process_group("nccl" if dev == "cuda" else "gloo")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(dev, (1,))
    dt = torch.bfloat16

    def pair(*shape, placement=None):
        t = torch.randn(*shape, device=dev, dtype=dt)
        return t, distribute_tensor(t.clone(), mesh, [placement or Replicate()])

    x, X = pair(64, 64)
    y, Y = pair(64, 64)
    w, W = pair(64, 64)
    b, B = pair(64)
    s, S = pair(64, 64, placement=Shard(0))
    params = [pair(64, 64) for _ in range(8)]
    plist, Plist = [q for q, _ in params], [q for _, q in params]
    scalars = (1.0 + i * 1e-7 for i in range(10 ** 9))
    # for-loop AdamW over 8 parameters with gradients (torchtitan-style TP keeps foreach off
    # when DTensor and plain parameters mix; examples/tp/train.py does too)
    opt_params = [torch.nn.Parameter(q.clone()) for q in plist]
    opt_dparams = [torch.nn.Parameter(distribute_tensor(q.clone(), mesh, [Replicate()])) for q in plist]
    for p_, d_ in zip(opt_params, opt_dparams):
        p_.grad = torch.randn_like(p_)
        d_.grad = distribute_tensor(torch.randn_like(p_), mesh, [Replicate()])
    opt_plain = torch.optim.AdamW(opt_params, lr=1e-4, foreach=False)
    opt_dt = torch.optim.AdamW(opt_dparams, lr=1e-4, foreach=False)

    cases = {
        "add_inplace": (lambda: x.add_(1.0), lambda: X.add_(1.0)),
        "add": (lambda: x + y, lambda: X + Y),
        "mul_scalar": (lambda: x * 2.0, lambda: X * 2.0),
        "t_view": (lambda: x.t(), lambda: X.t()),
        "view": (lambda: x.view(-1), lambda: X.view(-1)),
        "mm": (lambda: torch.mm(x, y), lambda: torch.mm(X, Y)),
        "linear": (lambda: F.linear(x, w, b), lambda: F.linear(X, W, B)),
        "sum": (lambda: x.sum(), lambda: X.sum()),
        "gelu": (lambda: F.gelu(x), lambda: F.gelu(X)),
        "add_sharded": (lambda: s + s, lambda: S + S),
        "foreach_add_8": (lambda: torch._foreach_add_(plist, 1.0), lambda: torch._foreach_add_(Plist, 1.0)),
        # a Python scalar that is the same every call, and one that changes every call (as
        # AdamW's bias-corrected step size does): DTensor's sharding cache keys on the scalar
        "addcdiv_const": (lambda: x.addcdiv_(y, w, value=-1e-3), lambda: X.addcdiv_(Y, W, value=-1e-3)),
        "addcdiv_vary": (lambda: x.addcdiv_(y, w, value=-next(scalars)), lambda: X.addcdiv_(Y, W, value=-next(scalars))),
        "mul_vary": (lambda: x.mul_(next(scalars)), lambda: X.mul_(next(scalars))),
        "adamw_forloop_8": (opt_plain.step, opt_dt.step),
    }
    out = {"torch": torch.__version__, "device": dev, "cases": {}}
    for name, (plain, dtens) in cases.items():
        row = {"plain_us": round(timed(plain, a.iters, sync), 2), "dtensor_us": round(timed(dtens, a.iters, sync), 2)}
        if not a.no_count:
            with _CountOps() as m:
                dtens()
            row["dtensor_ops"] = m.n
            row["plain_opcodes"] = round(count_opcodes(plain, 20), 1)
            row["dtensor_opcodes"] = round(count_opcodes(dtens, 20), 1)
        out["cases"][name] = row
        print(name, json.dumps(row), flush=True)
    print("RESULT " + json.dumps(out))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
