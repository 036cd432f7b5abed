"""Host time of compiled code per call and per kernel launch, unprofiled (issue #16).

Runs the same on a GPU machine (`python tools/holdout/compiled_host.py`) and under the
simulator (`phantora-prof --gpu h200 python tools/holdout/compiled_host.py`): every figure is
the median over `--calls` timed calls of time.perf_counter around one call, with no
profiler. The GPU work is tiny (64 x 64 tensors), so the host never waits for the GPU
and the figures are host time.

Cases (Inductor's `realize_opcount_threshold = 1` and `max_fusion_size = 1` keep each op its own
Triton kernel):
  pw{K}        torch.compile'd chain of K pointwise ops, no grad: K Triton launches per call
  pw{K}_fwd    the same with an input that requires grad: forward through AOTAutograd's
               autograd Function (saves for backward)
  pw{K}_bwd    `y.backward(g)` of that forward: the autograd engine and the compiled backward
  mm{K}        chain of K 64x64 matmuls, no grad: K extern cuBLAS calls from the wrapper
  eager_add    an eager in-place add (the host's speed, to scale between hosts)
  eager_pw32   the pw32 chain run eagerly (32 eager ops)
Output: `RESULT {json}`: case -> median microseconds per call; `KERNELS {json}`: case -> GPU
kernels of one call (one profiled call after the timed ones); under the simulator also one
`PLAN {json}` per compiled graph (`phantora-prof calibrate compiled-host` reads them).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

KS = (1, 8, 32, 128)


def chain(k: int):
    def f(x):
        for i in range(k):
            x = torch.softmax(x, i % 2)
        return x
    return f


def mm_chain(ws):
    def f(x):
        for w in ws:
            x = x @ w
        return x
    return f


def timed(fn, calls: int) -> float:
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def kernels_per_call(fn) -> int:
    """GPU kernels one call launches (one profiled call after the timed ones)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("## "))


def no_grad_case(fn, calls: int) -> tuple[float, int]:
    """Median host time of `fn` under no_grad after three warm-up calls, and its kernels."""
    with torch.no_grad():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        us = timed(fn, calls)
        n = kernels_per_call(fn)
    torch.cuda.synchronize()
    return us, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--ks", default=",".join(map(str, KS)))
    a = ap.parse_args()
    ks = [int(k) for k in a.ks.split(",")]
    dev = "cuda"
    out: dict[str, float] = {}
    kernels: dict[str, int] = {}
    x = torch.randn(64, 64, device=dev)
    for k in ks:
        f = torch.compile(chain(k))
        out[f"pw{k}"], kernels[f"pw{k}"] = no_grad_case(lambda: f(x), a.calls)
        xg = torch.randn(64, 64, device=dev, requires_grad=True)
        g = torch.ones(64, 64, device=dev)
        for _ in range(3):
            f(xg).backward(g)
        torch.cuda.synchronize()
        fw, bw = [], []
        for _ in range(a.calls):
            t0 = time.perf_counter()
            y = f(xg)
            t1 = time.perf_counter()
            y.backward(g)
            t2 = time.perf_counter()
            fw.append(t1 - t0)
            bw.append(t2 - t1)
        out[f"pw{k}_fwd"] = statistics.median(fw) * 1e6
        out[f"pw{k}_bwd"] = statistics.median(bw) * 1e6
        y = f(xg)
        kernels[f"pw{k}_bwd"] = kernels_per_call(lambda: y.backward(g))
        torch.cuda.synchronize()
        print(f"pw{k}: {out[f'pw{k}']:.1f} us, fwd {out[f'pw{k}_fwd']:.1f}, bwd {out[f'pw{k}_bwd']:.1f}", flush=True)
    for k in ks:
        ws = [torch.randn(64, 64, device=dev) / 8 for _ in range(k)]
        f = torch.compile(mm_chain(ws))
        xm = torch.randn(64, 64, device=dev)
        out[f"mm{k}"], kernels[f"mm{k}"] = no_grad_case(lambda: f(xm), a.calls)
        print(f"mm{k}: {out[f'mm{k}']:.1f} us", flush=True)
    with torch.no_grad():
        out["eager_add"] = timed(lambda: x.add_(1.0), a.calls)
        e = chain(32)
        out["eager_pw32"] = timed(lambda: e(x), a.calls)
    torch.cuda.synchronize()
    print("RESULT " + json.dumps({k: round(v, 2) for k, v in out.items()}), flush=True)
    print("KERNELS " + json.dumps(kernels), flush=True)
    print_plans()


def print_plans() -> None:
    """Under phantora-prof: one `PLAN` line per compiled graph, in compile order (what
    `phantora-prof calibrate compiled-host` pairs with the cases); nothing on a GPU."""
    try:
        from phantora_prof.runtime.compile import backend
    except ImportError:
        return
    for p in backend.PLANS:
        print("PLAN " + json.dumps({
            "inputs": len(p.inputs), "outputs": len(p.outputs), "triton": p.triton_kernels,
            "extern": p.extern_kernels, "allocs": sum(len(s.allocs) for s in p.steps)}), flush=True)


if __name__ == "__main__":
    main()
