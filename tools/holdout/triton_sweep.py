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


# ---- set "inmodel" (session 17): the kernels compiled training steps run, forward and backward,
# over the sizes small and large batches give them: bias-gradient column sums over few rows,
# norms fused with residuals and dropout, channels-last batch norm, casts, permute copies,
# embedding gathers. Synthetic functions (no model of the held-out sets); the backward runs
# with a fixed output gradient so that it adds no kernel of its own.


def _bias_gelu(x, b):
    return F.gelu(x + b, approximate="tanh")


def _residual_ln(x, r, w, b):
    return F.layer_norm(x + F.dropout(r, 0.1, training=True), x.shape[-1:], w, b)


def _bn_relu(x, w, b):
    return torch.relu(F.batch_norm(x, None, None, w, b, training=True))


def _bn_add_relu(x, y, w, b):
    return torch.relu(F.batch_norm(x, None, None, w, b, training=True) + y)


def _head_permute(x):
    return x.permute(0, 2, 1, 3).contiguous() * 2.0


def _embed_ln(idx, table, w, b):
    return F.layer_norm(F.embedding(idx, table), table.shape[-1:], w, b)


def _cast_linear(x, w):
    return (x.to(torch.bfloat16) * w.to(torch.bfloat16)).float()


def inmodel_cases() -> list[tuple[str, object, list[tuple[tuple[int, ...], str, str]]]]:
    """(case id, function, [(shape, dtype, role)]) with role "grad" (an input that requires a
    gradient), "const", "index" (int64 below 1000) or "cl" (channels-last, requires grad)."""
    out = []
    for rows in (64, 128, 512, 2048, 8192):
        for cols in (768, 3072, 4096):
            out.append((f"colsum_bfloat16_{rows}x{cols}", _red_colsum, [((rows, cols), "bfloat16", "const")]))
    for rows in (128, 1024, 8192):
        for cols in (768, 3072):
            out.append((f"biasgelu_bfloat16_{rows}x{cols}", _bias_gelu,
                        [((rows, cols), "bfloat16", "grad"), ((cols,), "bfloat16", "grad")]))
    for rows in (64, 128, 1024, 8192, 32768):
        for cols in (384, 768, 1024):
            out.append((f"resln_bfloat16_{rows}x{cols}", _residual_ln,
                        [((rows, cols), "bfloat16", "grad"), ((rows, cols), "bfloat16", "grad"),
                         ((cols,), "bfloat16", "grad"), ((cols,), "bfloat16", "grad")]))
    for n, c, hw in ((8, 64, 56), (8, 256, 56), (8, 512, 28), (8, 1024, 14), (8, 2048, 7),
                     (32, 128, 56), (32, 512, 28), (32, 2048, 7), (128, 64, 112), (128, 256, 56)):
        x = ((n, c, hw, hw), "bfloat16", "cl")
        wb = [((c,), "float32", "grad"), ((c,), "float32", "grad")]
        out.append((f"bnrelu_cl_{n}x{c}x{hw}", _bn_relu, [x, *wb]))
        if c >= 256:
            out.append((f"bnaddrelu_cl_{n}x{c}x{hw}", _bn_add_relu, [x, ((n, c, hw, hw), "bfloat16", "cl"), *wb]))
    for b, s, h, d in ((1, 128, 12, 64), (8, 1024, 12, 64), (4, 2048, 32, 128), (8, 197, 12, 64)):
        out.append((f"permute_bfloat16_{b}x{s}x{h}x{d}", _head_permute, [((b, s, h, d), "bfloat16", "grad")]))
    for tokens in (128, 1024, 8192):
        out.append((f"embedln_{tokens}x50257x768", _embed_ln,
                    [((tokens,), "int64", "index"), ((50257, 768), "float32", "grad"),
                     ((768,), "float32", "grad"), ((768,), "float32", "grad")]))
    for n in (768 * 768, 768 * 3072, 4096 * 4096, 50257 * 768):
        out.append((f"castmul_{n}", _cast_linear, [((n,), "float32", "grad"), ((n,), "float32", "grad")]))
    return out


def _inputs(spec, dev):
    xs = []
    for shape, dt, *role in spec:
        role = role[0] if role else "const"
        dtype = getattr(torch, dt)
        if dtype == torch.int64:
            xs.append(torch.randint(0, 1000, shape, device=dev))
            continue
        x = torch.randn(shape, device=dev, dtype=dtype)
        if role == "cl":
            x = x.contiguous(memory_format=torch.channels_last)
        if role in ("grad", "cl"):
            x.requires_grad_(True)
        xs.append(x)
    return xs


def _call(cf, xs):
    """One call: the forward, and the backward when an input requires a gradient (with an output
    gradient made once, so the backward adds no kernel of its own)."""
    out = cf(*xs)
    if out.requires_grad:
        key = (tuple(out.shape), out.dtype)
        if key not in _GRADS:
            _GRADS[key] = torch.ones_like(out)
        out.backward(_GRADS[key])


_GRADS: dict = {}


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

    out: dict[str, dict] = {}
    ambiguous: set[str] = set()
    for plan in plans:
        for step in plan.steps:
            if isinstance(step, TritonStep):
                s = step.shape
                f = {"category": s.category, "numel": s.numel, "rnumel": s.rnumel,
                     "bytes_read": s.bytes_read, "bytes_written": s.bytes_written,
                     "n_buffers": s.n_buffers, "reduction_hint": s.reduction_hint, "welford": s.welford}
                if out.setdefault(step.kernel, f) != f:
                    ambiguous.add(step.kernel)  # forward and backward graphs reuse a name: no pair
    return {k: v for k, v in out.items() if k not in ambiguous}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--only", default=None, help="comma-separated case-id prefixes")
    p.add_argument("--set", default="base", choices=("base", "inmodel"),
                   help="base: forward-only kernels by size (session 12); inmodel: training kernels, "
                        "forward and backward (session 17)")
    a = p.parse_args()
    dev = torch.device("cuda")
    only = a.only.split(",") if a.only else None
    with open(a.out, "w") as f:
        for cid, fn, spec in (cases() if a.set == "base" else inmodel_cases()):
            if only and not any(cid.startswith(o) for o in only):
                continue
            torch._dynamo.reset()
            plans = _simulated_plans()
            mark = len(plans) if plans is not None else 0
            cf = torch.compile(fn, dynamic=False)
            xs = _inputs(spec, dev)
            try:
                for _ in range(3):
                    _call(cf, xs)
                torch.cuda.synchronize()
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(a.reps):
                        _call(cf, xs)
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
