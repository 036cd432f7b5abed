"""Host time of compiled code per call and per kernel launch, unprofiled (issue #16).

Runs the same on a GPU machine (`python tools/holdout/compiled_host.py`) and under the
simulator (`phantora-prof --gpu h200 python tools/holdout/compiled_host.py`): every figure is
the median over `--calls` timed calls of time.perf_counter around one call, with no
profiler. The GPU work is tiny (64 x 64 tensors), so the host never waits for the GPU
and the figures are host time.

Cases (each softmax of a chain is a reduction: its own Triton kernel):
  pw{K}        torch.compile'd chain of K softmaxes, no grad: K Triton launches per call
  pw{K}_fwd    the same with an input that requires grad: forward through AOTAutograd's
               autograd Function (saves for backward)
  pw{K}_bwd    `y.backward(g)` of that forward: the autograd engine and the compiled backward
  mm{K}        chain of K 64x64 matmuls, no grad: K extern cuBLAS calls from the wrapper
  par{N}_fwd   a compiled module of N parameters (x + sum of p_i * c_i): a training forward with
               N + 1 inputs, one output and nothing saved, as a model's parameters enter its
               graph (session 18: separates the cost per input from the cost per saved tensor)
  par{N}_bwd   its backward: N gradients out (each its own buffer), AccumulateGrad for each
  eager_add    an eager in-place add (the host's speed, to scale between hosts)
  eager_pw32   the pw32 chain run eagerly (32 eager ops)
Output: `RESULT {json}`: case -> median microseconds per call; `KERNELS {json}`: case -> GPU
kernels of one call (one profiled call after the timed ones); under the simulator also one
`PLAN {json}` per compiled graph (`phantora-prof calibrate compiled-host` reads them).
`--trace-dir DIR` also writes a torch.profiler trace of five training calls of each pw / par case
(after its timed calls): where in a call its host time goes, before or after the first launch.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

KS = (1, 8, 32, 128)
PARS = (1, 16, 64, 256)


class ParSum(torch.nn.Module):
    """N parameters added to the input, each scaled by its own constant: the forward is one
    fused kernel of N + 1 inputs that saves nothing; the backward writes N distinct gradients."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(64, 64) / 8) for _ in range(n)])

    def forward(self, x):
        for i, p in enumerate(self.ps):
            x = x + p * (1.0 + i / 256)
        return x


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


def drop_grads(params) -> None:
    """Drop the parameters' gradients, as `zero_grad(set_to_none=True)` does."""
    for p in params:
        p.grad = None


def training_case(f, x, g, calls: int, params=()) -> tuple[float, float]:
    """Median host time of a compiled training forward `f(x)` and of its `backward(g)` after
    three warm-up steps (gradients of `params` dropped between calls)."""
    for _ in range(3):
        f(x).backward(g)
        drop_grads(params)
    torch.cuda.synchronize()
    fw, bw = [], []
    for _ in range(calls):
        t0 = time.perf_counter()
        y = f(x)
        t1 = time.perf_counter()
        y.backward(g)
        t2 = time.perf_counter()
        fw.append(t1 - t0)
        bw.append(t2 - t1)
        drop_grads(params)
    torch.cuda.synchronize()
    return statistics.median(fw) * 1e6, statistics.median(bw) * 1e6


def write_trace(trace_dir, name: str, f, x, g, params=()) -> None:
    """Five profiled training calls of `f` into TRACE_DIR/NAME.json (nothing without a dir)."""
    if trace_dir is None:
        return
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            f(x).backward(g)
            drop_grads(params)
            torch.cuda.synchronize()
    prof.export_chrome_trace(f"{trace_dir}/{name}.json")


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
    ap.add_argument("--pars", default=",".join(map(str, PARS)), help="parameter counts of the par cases ('' for none)")
    ap.add_argument("--trace-dir", default=None, help="write profiled traces of the training cases here")
    a = ap.parse_args()
    ks = [int(k) for k in a.ks.split(",")]
    pars = [int(n) for n in a.pars.split(",") if n]
    if a.trace_dir:
        import os
        os.makedirs(a.trace_dir, exist_ok=True)
    dev = "cuda"
    out: dict[str, float] = {}
    kernels: dict[str, int] = {}
    x = torch.randn(64, 64, device=dev)
    for k in ks:
        f = torch.compile(chain(k))
        out[f"pw{k}"], kernels[f"pw{k}"] = no_grad_case(lambda: f(x), a.calls)
        xg = torch.randn(64, 64, device=dev, requires_grad=True)
        g = torch.ones(64, 64, device=dev)
        out[f"pw{k}_fwd"], out[f"pw{k}_bwd"] = training_case(f, xg, g, a.calls)
        write_trace(a.trace_dir, f"pw{k}", f, xg, g)
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
    for n in pars:
        m = ParSum(n).to(dev)
        f = torch.compile(m)
        xp = torch.randn(64, 64, device=dev)
        g = torch.ones(64, 64, device=dev)
        params = list(m.parameters())
        out[f"par{n}_fwd"], out[f"par{n}_bwd"] = training_case(f, xp, g, a.calls, params)
        write_trace(a.trace_dir, f"par{n}", f, xp, g, params)
        y = f(xp)
        kernels[f"par{n}_fwd"] = kernels_per_call(lambda: f(xp))
        kernels[f"par{n}_bwd"] = kernels_per_call(lambda: y.backward(g))
        drop_grads(params)
        torch.cuda.synchronize()
        print(f"par{n}: fwd {out[f'par{n}_fwd']:.1f} us, bwd {out[f'par{n}_bwd']:.1f}", flush=True)
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
