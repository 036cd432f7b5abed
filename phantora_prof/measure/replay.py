"""Replay one captured op signature on the real GPU and time its kernels with the profiler.

Runs in the measuring worker (a plain torch process with a real CUDA device, never inside
a simulated rank). For a signature (kernel_db.signature) it builds fresh inputs: tensors
of the recorded shapes, strides and dtypes with random values, integer tensors that index
something (embedding ids, loss targets, gather/scatter/index positions) drawn within the
indexed dimension so the op is valid (any other integer tensor is zeros, valid as an index
everywhere), and the op's scalar arguments as captured. It finds the overload whose schema
takes those arguments, runs `warmup` calls, then `repeats` calls with L2 evicted before each
(a 256 MiB write, as triton's do_bench) and `repeats` calls right after another call (L2
warm), under torch.profiler with CUDA activities (timing.py, the harness the kernel sweep
uses too). The kernels of each call are matched by position; each kernel's time is the
geometric mean of its cold and warm medians, the same L2 compromise as the shipped sweep
(the GPU profile's l2_warm_weight: weights and gradients arrive cold in training,
activations warm).

Approximations: data-dependent kernels (sorts, index_put with duplicates, nonzero) see
random data, not the script's; ops that read their inputs' values to size outputs are
timed on what the random inputs give.
"""
from __future__ import annotations

import math
import statistics
from typing import Any

import torch

from phantora_prof.measure import timing

# op base name -> which positional argument is the integer index tensor and how to bound it:
# (index position, tensor position whose dimension bounds it, that dimension or a callable)
_INDEX_RULES: dict[str, tuple[int, Any]] = {
    "embedding": (1, lambda a: a[0].shape[0]),
    "embedding_dense_backward": (1, lambda a: a[2]),
    "nll_loss_forward": (1, lambda a: a[0].shape[-1] if a[0].dim() == 1 else a[0].shape[1]),
    "nll_loss_backward": (2, lambda a: a[1].shape[-1] if a[1].dim() == 1 else a[1].shape[1]),
    "nll_loss2d_forward": (1, lambda a: a[0].shape[1]),
    "nll_loss2d_backward": (2, lambda a: a[1].shape[1]),
    "index_select": (2, lambda a: a[0].shape[a[1]]),
    "gather": (2, lambda a: a[0].shape[a[1]]),
    "scatter": (2, lambda a: a[0].shape[a[1]]),
    "scatter_": (2, lambda a: a[0].shape[a[1]]),
    "scatter_add": (2, lambda a: a[0].shape[a[1]]),
    "scatter_add_": (2, lambda a: a[0].shape[a[1]]),
    "scatter_reduce": (2, lambda a: a[0].shape[a[1]]),
    "index_add": (2, lambda a: a[0].shape[a[1]]),
    "index_add_": (2, lambda a: a[0].shape[a[1]]),
    "index_copy": (2, lambda a: a[0].shape[a[1]]),
    "index_copy_": (2, lambda a: a[0].shape[a[1]]),
    "index_fill_": (2, lambda a: a[0].shape[a[1]]),
    "take_along_dim": (1, lambda a: min(a[0].shape) if a[0].dim() else 1),
}
_LIST_INDEX_OPS = ("index", "index_put", "index_put_", "_index_put_impl_")  # (self, [indices], ...)

_DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)}
for _n in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _n):
        _DTYPES[_n] = getattr(torch, _n)


class ReplayError(RuntimeError):
    """The signature could not be turned into a call that runs on this GPU."""


def _dtype(name: str) -> torch.dtype:
    d = _DTYPES.get(name) or getattr(torch, name, None)
    if not isinstance(d, torch.dtype):
        raise ReplayError(f"unknown dtype {name!r}")
    return d


def _rng(seed: int, device: str = "cuda") -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def _make_tensor(spec: dict, gen: torch.Generator, gpu: str = "cuda") -> torch.Tensor:
    if "T" in spec:
        shape, stride, dtype = spec["T"]
        device, pinned = gpu, False
    else:
        shape, stride, dtype, pinned = spec["C"]
        device = "cpu"
    dt = _dtype(dtype)
    if not stride and shape:  # a non-strided layout was recorded without strides
        stride = list(torch.empty(shape, device="meta").stride())
    t = torch.empty_strided(tuple(shape), tuple(stride), dtype=dt, device=device,
                            pin_memory=bool(pinned) and torch.cuda.is_available())
    if t.numel() == 0:
        return t
    flat = t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
    if dt.is_floating_point or dt.is_complex:
        if device == gen.device.type and dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            flat.normal_(generator=gen)
        else:
            flat.copy_(torch.randn(flat.shape, dtype=torch.float32).to(dt))
    elif dt == torch.bool:
        flat.copy_(torch.rand(flat.shape, device=device) < 0.5)
    else:
        flat.zero_()
    return t


def _decode(v: Any, gen: torch.Generator, gpu: str = "cuda") -> Any:
    if isinstance(v, dict):
        if "T" in v or "C" in v:
            return _make_tensor(v, gen, gpu)
        if "f" in v:
            return float(v["f"])
        return {k: _decode(x, gen, gpu) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x, gen, gpu) for x in v]
    return v


def _convert(value: Any, type_str: str, gpu: str = "cuda") -> Any:
    """A captured argument (dtypes, devices, layouts arrive as strings) as the schema wants it."""
    if value is None:
        return None
    t = type_str.rstrip("?")
    if t.startswith("Optional[") and t.endswith("]"):
        t = t[9:-1]
    if t == "ScalarType" and isinstance(value, str):
        return _dtype(value)
    if t == "Device" and isinstance(value, str):
        return torch.device(gpu) if value.startswith("cuda") else torch.device(value)
    if t == "Layout" and isinstance(value, str):
        return getattr(torch, value.split(".")[-1])
    if t == "MemoryFormat" and isinstance(value, str):
        return getattr(torch, value.split(".")[-1])
    if t.endswith("[]") and isinstance(value, list) and t.startswith("int"):
        return [int(x) for x in value]
    return value


def _bound_indices(base: str, args: list, gen: torch.Generator) -> None:
    """Random valid positions in integer index arguments (zeros would be valid but unrepresentative)."""
    rule = _INDEX_RULES.get(base)
    if rule is not None:
        pos, bound = rule
        if pos < len(args) and isinstance(args[pos], torch.Tensor) and not args[pos].is_floating_point():
            try:
                hi = int(bound(args))
            except Exception:  # noqa: BLE001 - a different overload layout: keep zeros
                return
            if hi > 0:
                _fill_int(args[pos], hi, gen)
        return
    if base in _LIST_INDEX_OPS and len(args) > 1 and isinstance(args[1], list):
        for d, idx in enumerate(args[1]):
            if isinstance(idx, torch.Tensor) and idx.dtype in (torch.int64, torch.int32) and d < args[0].dim():
                _fill_int(idx, args[0].shape[d], gen)


def _fill_int(t: torch.Tensor, hi: int, gen: torch.Generator) -> None:
    if t.numel() == 0:
        return
    vals = torch.randint(0, hi, (t.numel(),), device=t.device, generator=gen if t.is_cuda else None)
    t.copy_(vals.view(t.shape).to(t.dtype)) if t.is_contiguous() else t.copy_(vals.reshape(t.shape).to(t.dtype))


def _type_of(arg: Any) -> str:
    """The schema's declared type (ScalarType, Layout, ... rather than the JIT's int)."""
    return str(getattr(arg, "real_type", arg.type))


def _sync(gpu: str) -> None:
    if gpu == "cuda":
        torch.cuda.synchronize()


def resolve(op_name: str, args: list, kwargs: dict, gpu: str = "cuda") -> tuple[Any, list, dict]:
    """The overload of `op_name` that runs with these arguments, with arguments converted."""
    ns, _, rest = op_name.partition("::")
    base = rest.split(".", 1)[0]
    try:
        packet = getattr(getattr(torch.ops, ns), base)
    except AttributeError:
        raise ReplayError(f"no op {op_name} in this torch") from None
    names = packet.overloads()
    names = sorted(names, key=lambda n: (n != "default", n))
    problems = []
    for ov in names:
        op = getattr(packet, ov)
        schema = op._schema
        params = [a for a in schema.arguments if not a.kwarg_only]
        if len(args) > len(params):
            continue
        try:
            cargs = [_convert(v, _type_of(p), gpu) for v, p in zip(args, params)]
            by_name = {a.name: a for a in schema.arguments}
            ckw = {}
            for k, v in kwargs.items():
                if k not in by_name:
                    raise ReplayError(f"no argument {k}")
                ckw[k] = _convert(v, _type_of(by_name[k]), gpu)
        except ReplayError as e:
            problems.append(f"{ov}: {e}")
            continue
        try:
            op(*cargs, **ckw)
            _sync(gpu)
        except (TypeError, RuntimeError, ValueError, IndexError) as e:
            msg = str(e).splitlines()[0][:200]
            if "CUDA error" in msg or "device-side assert" in msg:
                raise ReplayError(f"{ov}: {msg}") from None
            problems.append(f"{ov}: {msg}")
            continue
        return op, cargs, ckw
    raise ReplayError(f"no overload of {op_name} accepts the recorded arguments ({'; '.join(problems[:3])})")


def build_call(sig: dict, gpu: str = "cuda", seed: int = 0) -> tuple[Any, list, dict]:
    """(overload, args, kwargs) that replay the signature with fresh inputs on `gpu`."""
    gen = _rng(seed, gpu)
    args = _decode(sig.get("args", []), gen, gpu)
    kwargs = _decode(sig.get("kwargs", {}), gen, gpu)
    base = sig["op"].partition("::")[2].split(".", 1)[0]
    _bound_indices(base, args, gen)
    return resolve(sig["op"], args, kwargs, gpu)


def measure_cpu(sig: dict, repeats: int = 5, warmup: int = 2, seed: int = 0) -> dict:
    """Test mode (PHANTORA_MEASURE_DEVICE=cpu): the call's CPU time as one pseudo-kernel.

    Exercises the whole measuring path (signature -> inputs -> overload -> timing ->
    database) on machines without a GPU; the times are the CPU's, never a GPU's.
    """
    import time

    op, cargs, ckw = build_call(sig, "cpu", seed)
    for _ in range(warmup):
        op(*cargs, **ckw)
    times: list[int] = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        op(*cargs, **ckw)
        times.append(time.perf_counter_ns() - t0)
    ns = int(statistics.median(times))
    return {"kernels": [["kernel", f"cpu::{sig['op']}", ns, [1, 1, 1], [1, 1, 1], 0, 0, 0, "cudaLaunchKernel"]],
            "reps": repeats}


def measure(sig: dict, repeats: int = 5, warmup: int = 2, seed: int = 0) -> dict:
    """{"kernels": [[kind, name, ns, grid, block, regs, smem, bytes, api], ...], "reps": n}."""
    from torch.profiler import record_function

    op, cargs, ckw = build_call(sig, "cuda", seed)

    def call():
        op(*cargs, **ckw)

    _warm_up(call, warmup)
    flush = timing.flush_buffer()

    def body():
        for _ in range(repeats):
            flush.zero_()
            with record_function("cold"):
                call()
            with record_function("warm"):
                call()
        torch.cuda.synchronize()

    return _kernels_from_trace(timing.profiled(body), repeats)


WARMUP_MIN_S = 0.05


def _warm_up(call, warmup: int) -> None:
    """At least `warmup` calls and WARMUP_MIN_S of GPU work (at most 1000 calls).

    An idle H200 sits at a few hundred MHz; a short op timed right after idling runs before
    the clocks have ramped up and comes out slow. Training keeps the GPU busy, so the
    replay keeps it busy first.
    """
    import time

    t0 = time.perf_counter()
    n = 0
    while n < 1000:
        for _ in range(max(warmup, 1)):
            call()
        n += max(warmup, 1)
        torch.cuda.synchronize()
        if time.perf_counter() - t0 >= WARMUP_MIN_S:
            break


def _kernels_from_trace(trace: Any, repeats: int) -> dict:
    evs = trace["traceEvents"] if isinstance(trace, dict) else trace
    seqs = [c for c in timing.calls(evs, lambda name: name in ("cold", "warm")) if c.acts]
    if not seqs:
        return {"kernels": [], "reps": 0}
    n, _ = timing.typical([c.acts for c in seqs])
    cold = [c.acts for c in seqs if len(c.acts) == n and c.name == "cold"]
    warm = [c.acts for c in seqs if len(c.acts) == n and c.name == "warm"]
    ref = (cold or warm)[0]
    cold_us = timing.position_medians(cold, n) if cold else [None] * n
    warm_us = timing.position_medians(warm, n) if warm else [None] * n
    out = []
    for pos in range(n):
        e0, api = ref[pos]
        a = e0.get("args") or {}
        c, w = cold_us[pos], warm_us[pos]
        us = math.sqrt(c * w) if c and w else (c or w or 0.0)
        cat = e0.get("cat")
        kind = "kernel" if cat == "kernel" else ("memset" if cat == "gpu_memset" else "memcpy")
        out.append([kind, e0.get("name", ""), int(round(us * 1000.0)), list(a.get("grid", [0, 0, 0])),
                    list(a.get("block", [0, 0, 0])), int(a.get("registers per thread", 0) or 0),
                    int(a.get("shared memory", 0) or 0), int(a.get("bytes", 0) or 0), api])
    return {"kernels": out, "reps": min(len(cold), len(warm)) if cold and warm else len(cold or warm)}


def device_info() -> dict:
    p = torch.cuda.get_device_properties(0)
    return {"name": p.name, "torch": torch.__version__, "cuda": torch.version.cuda,
            "capability": [p.major, p.minor], "memory": int(p.total_memory), "sms": int(p.multi_processor_count)}
