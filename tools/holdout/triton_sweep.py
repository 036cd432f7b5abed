"""Issue #16: time of the Triton kernels torch.compile generates, by kind and size.

Each case compiles one small function (Inductor, default mode, static shapes), runs it a few
times, then profiles REPS calls and prints one JSON line per kernel it launched:
`{"case", "kernel", "us", "calls"}` (mean duration over the profiled calls, launches per call).
The same script runs under phantora-prof, where each line also carries the kernel's category,
elements and bytes from the simulator's own Inductor plan, so real times and simulated
features pair by case and kernel name (`phantora-prof calibrate triton`).

    python tools/holdout/triton_sweep.py --out sweep.jsonl            # on the H200
    phantora-prof --gpu h200 --no-trace python tools/holdout/triton_sweep.py --out sim.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F


def _pw_fma(x, y, z):
    return x * y + z


def _pw_gelu(x):
    return F.gelu(x, approximate="tanh")


def _pw_cast(x):
    return (x.float() * 2.0).to(torch.bfloat16) if x.dtype != torch.bfloat16 else (x.float() * 2.0)


def _pw_residual_dropout(x, y):
    return x + F.dropout(y, 0.1, training=True)


def _red_layernorm(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b)


def _red_rmsnorm(x, w):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w


def _red_softmax(x):
    return torch.softmax(x.float(), dim=-1)


def _red_colsum(x):
    return x.float().sum(0)


def _red_total(x):
    return x.float().pow(2).sum()


def _red_cross_entropy(x, t):
    return F.cross_entropy(x.float(), t)


def cases() -> list[tuple[str, object, list[tuple[tuple[int, ...], str]]]]:
    """(case id, function, [(shape, dtype name)]): pointwise over 2^12..2^28 elements, row
    reductions over the widths transformers and CNN heads use, column and total reductions."""
    out = []
    for dt in ("float32", "bfloat16"):
        for p in range(12, 29, 2):
            n = 1 << p
            out.append((f"fma_{dt}_{n}", _pw_fma, [((n,), dt)] * 3))
            out.append((f"gelu_{dt}_{n}", _pw_gelu, [((n,), dt)]))
            if p % 4 == 0:
                out.append((f"cast_{dt}_{n}", _pw_cast, [((n,), dt)]))
                out.append((f"dropadd_{dt}_{n}", _pw_residual_dropout, [((n,), dt)] * 2))
        for cols in (256, 768, 1024, 4096, 16384):
            for total in (1 << 18, 1 << 22, 1 << 26):
                rows = max(1, total // cols)
                out.append((f"ln_{dt}_{rows}x{cols}", _red_layernorm, [((rows, cols), dt), ((cols,), dt), ((cols,), dt)]))
                if total != 1 << 18:
                    out.append((f"rms_{dt}_{rows}x{cols}", _red_rmsnorm, [((rows, cols), dt), ((cols,), dt)]))
                    out.append((f"softmax_{dt}_{rows}x{cols}", _red_softmax, [((rows, cols), dt)]))
        for rows, cols in ((8192, 768), (65536, 1024), (4096, 4096), (1 << 20, 64)):
            out.append((f"colsum_{dt}_{rows}x{cols}", _red_colsum, [((rows, cols), dt)]))
        for n in (1 << 16, 1 << 22, 1 << 26):
            out.append((f"total_{dt}_{n}", _red_total, [((n,), dt)]))
    for rows in (2048, 8192, 32768):
        out.append((f"xent_bfloat16_{rows}x50304", _red_cross_entropy, [((rows, 50304), "bfloat16"), ((rows,), "int64")]))
    return out


def _inputs(spec, dev):
    xs = []
    for shape, dt in spec:
        dtype = getattr(torch, dt)
        if dtype == torch.int64:
            xs.append(torch.randint(0, 1000, shape, device=dev))
        else:
            xs.append(torch.randn(shape, device=dev, dtype=dtype))
    return xs


def _kernel_times(prof, reps: int) -> dict[str, tuple[float, float]]:
    """Mean duration (us) and launches per call of each GPU kernel in the profile."""
    acc: dict[str, list[float]] = {}
    for e in prof.events():
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA and e.name.startswith("triton"):
            acc.setdefault(e.name, []).append(e.time_range.elapsed_us())
    return {k: (sum(v) / len(v), len(v) / reps) for k, v in acc.items()}


def _simulated_plans():
    """Under phantora-prof: the list of compiled-graph plans (runtime/compile/backend.py), else None."""
    try:
        from phantora_prof.runtime.compile import backend
    except ImportError:
        return None
    return backend.PLANS if backend._capture_mode is not None else None


def _features(plans) -> dict[str, dict]:
    from phantora_prof.runtime.compile.plan import TritonStep

    out = {}
    for plan in plans:
        for step in plan.steps:
            if isinstance(step, TritonStep):
                s = step.shape
                out[step.kernel] = {"category": s.category, "numel": s.numel, "rnumel": s.rnumel,
                                    "bytes_read": s.bytes_read, "bytes_written": s.bytes_written}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--only", default=None, help="comma-separated case-id prefixes")
    a = p.parse_args()
    dev = torch.device("cuda")
    only = a.only.split(",") if a.only else None
    with open(a.out, "w") as f:
        for cid, fn, spec in cases():
            if only and not any(cid.startswith(o) for o in only):
                continue
            torch._dynamo.reset()
            plans = _simulated_plans()
            mark = len(plans) if plans is not None else 0
            cf = torch.compile(fn, dynamic=False)
            xs = _inputs(spec, dev)
            try:
                for _ in range(3):
                    cf(*xs)
                torch.cuda.synchronize()
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(a.reps):
                        cf(*xs)
                    torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - one failing case must not end the sweep
                print(f"case {cid} failed: {exc}", file=sys.stderr, flush=True)
                continue
            feats = _features(plans[mark:]) if plans is not None else {}
            for name, (us, calls) in sorted(_kernel_times(prof, a.reps).items()):
                f.write(json.dumps({"case": cid, "kernel": name, "us": round(us, 3), "calls": calls,
                                    **feats.get(name, {})}) + "\n")
            f.flush()
            print(cid, flush=True)


if __name__ == "__main__":
    main()
