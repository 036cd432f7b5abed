"""Host and GPU time of compiled calls with and without CUDA graphs (issue #16, item 2).

Runs the same on a GPU machine (`python tools/holdout/cudagraph_host.py`) and under the
simulator (`phantora-prof --gpu h200 python tools/holdout/cudagraph_host.py`). Every case is
compiled twice, with torch.compile's default mode and with mode="reduce-overhead" (Inductor's
CUDA graph trees), and measured the same way in both:

  host_us   median over `--calls` calls of time.perf_counter around one call, the GPU idle
            before each call (torch.cuda.synchronize outside the timed region): host time only
  thru_us   wall time per call of `--calls` calls back to back, one synchronize at the end
            (the GPU's time per call where it is the bottleneck)
  kernels   GPU kernels of one profiled call, their summed duration (`busy_us`) and the span
            from the first kernel's start to the last one's end (`span_us`): span - busy is the
            time between kernels (inside a CUDA graph, or between launches)

Cases (64 x 64 fp32 tensors, so the GPU work is a few microseconds per kernel):
  pw{K}       a chain of K softmaxes (K Triton kernels), no grad, one non-static input
  io{N}       N inputs, N outputs, one pointwise op each (no grad): what each input copy and
              each reconstructed output costs a CUDA graph replay
  mm{K}       a chain of K matmuls against captured weights (K cuBLAS calls), no grad
  lin{K}_fwd  an nn.Sequential of K Linear+ReLU layers (parameters: static inputs), training:
  lin{K}_bwd  the forward through AOTAutograd's Function, then `backward()` of its sum
Output: one `RESULT {json}` line: mode -> case -> figures. `--trace DIR` also writes the
chrome trace of lin8's profiled training step in each mode (the format of a replay).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from compiled_host import chain as softmax_chain, mm_chain  # the same cases as the default mode's fit

MODES = ("default", "reduce-overhead")


def io_fn(xs):
    return tuple(x.sin() for x in xs)


def sync() -> None:
    torch.cuda.synchronize()


def host_us(call, calls: int) -> float:
    ts = []
    for _ in range(calls):
        sync()
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    sync()
    return statistics.median(ts) * 1e6


def thru_us(call, calls: int) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    sync()
    return (time.perf_counter() - t0) / calls * 1e6


def kernels(call, trace: str | None = None) -> dict:
    from torch.profiler import ProfilerActivity, profile
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        call()
        sync()
    if trace:
        prof.export_chrome_trace(trace)
    ks = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("## ")
                and "Memcpy" not in e.name and "Memset" not in e.name)
    if not ks:
        return {"n": 0}
    busy = sum(e - s for s, e, _ in ks)
    return {"n": len(ks), "busy_us": round(busy, 2), "span_us": round(ks[-1][1] - ks[0][0], 2),
            "names": sorted({n[:60] for _, _, n in ks})[:6]}


def first_calls(call, n: int = 4) -> list[float]:
    """Host time of each of the first `n` calls (compiling, then with reduce-overhead: warm-up,
    record, first replay), the GPU idle before each."""
    ts = []
    for _ in range(n):
        sync()
        t0 = time.perf_counter()
        call()
        ts.append(round((time.perf_counter() - t0) * 1e6, 1))
    sync()
    return ts


def measure(call, calls: int, trace: str | None = None) -> dict:
    first = first_calls(call)
    return {"host_us": round(host_us(call, calls), 2), "thru_us": round(thru_us(call, calls), 2),
            "first_us": first, **kernels(call, trace)}


def run_mode(mode: str, calls: int, trace_dir: str | None) -> dict:
    kw = {} if mode == "default" else {"mode": mode}
    torch._dynamo.reset()
    dev = "cuda"
    out: dict[str, dict] = {}
    x = torch.randn(64, 64, device=dev)
    with torch.no_grad():
        for k in (1, 8, 32, 128):
            f = torch.compile(softmax_chain(k), **kw)
            out[f"pw{k}"] = measure(lambda: f(x), calls)
        for n in (1, 4, 16, 64):
            xs = [torch.randn(64, 64, device=dev) for _ in range(n)]
            f = torch.compile(io_fn, **kw)
            out[f"io{n}"] = measure(lambda: f(xs), calls)
        for k in (8, 32):
            ws = [torch.randn(64, 64, device=dev) / 8 for _ in range(k)]
            f = torch.compile(mm_chain(ws), **kw)
            out[f"mm{k}"] = measure(lambda: f(x), calls)
    for k in (8, 32):
        layers = []
        for _ in range(k):
            layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
        model = torch.compile(torch.nn.Sequential(*layers).to(dev), **kw)
        xi = torch.randn(64, 64, device=dev)
        fw, bw = [], []

        def step(timed: bool = False):
            model.zero_grad(set_to_none=True)
            sync()
            t0 = time.perf_counter()
            loss = model(xi).sum()
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            if timed:
                fw.append(t1 - t0)
                bw.append(t2 - t1)

        for _ in range(4):  # compile, then with reduce-overhead: warm-up, record, first replay
            step(True)
        first_fw, first_bw = [round(t * 1e6, 1) for t in fw], [round(t * 1e6, 1) for t in bw]
        fw.clear()
        bw.clear()
        for _ in range(calls):
            step(True)
        sync()
        name = mode.replace("-", "_")
        trace = f"{trace_dir}/lin{k}_{name}.json" if trace_dir and k == 8 else None
        ks = kernels(step, trace)
        out[f"lin{k}_fwd"] = {"host_us": round(statistics.median(fw) * 1e6, 2), "first_us": first_fw}
        out[f"lin{k}_bwd"] = {"host_us": round(statistics.median(bw) * 1e6, 2), "first_us": first_bw}
        out[f"lin{k}_step"] = ks
    with torch.no_grad():  # the host's speed, to scale between hosts (as compiled_host.py)
        e = softmax_chain(32)
        out["eager_pw32"] = {"host_us": round(host_us(lambda: e(x), calls), 2)}
    for name, r in out.items():
        print(mode, name, {k: v for k, v in r.items() if k != "names"}, flush=True)
    return out


def print_plans() -> None:
    """Under phantora-prof: one `PLAN` line per compiled graph, in compile order (each mode
    compiles the same graphs in the same order); nothing on a GPU."""
    try:
        from phantora_prof.runtime.compile import backend
    except ImportError:
        return
    for p in backend.PLANS:
        print("PLAN " + json.dumps({
            "inputs": len(p.inputs), "outputs": len(p.outputs), "static": len(p.static_inputs),
            "triton": p.triton_kernels, "extern": p.extern_kernels, "backward": p.is_backward,
            "inference": p.is_inference, "skip": p.cudagraph_skip}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--trace", default=None, help="folder for lin8's profiled step in each mode")
    a = ap.parse_args()
    res = {m: run_mode(m, a.calls, a.trace) for m in MODES}
    print("RESULT " + json.dumps(res), flush=True)
    print_plans()


if __name__ == "__main__":
    main()
