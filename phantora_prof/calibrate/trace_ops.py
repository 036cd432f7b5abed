"""Dispatch-level ops of a torch.profiler trace, with their GPU activities and arguments.

torch.profiler records every dispatcher call as a nested `cpu_op`, from composite ops
(aten::linear, aten::to, aten::layer_norm, aten::cross_entropy_loss, aten::matmul, ...)
down to the op whose CUDA kernel launches (often aten::copy_ inside aten::_to_copy, or
aten::nll_loss_forward inside aten::nll_loss). The simulator's capture mode sees neither end
of that chain: CompositeImplicitAutograd ops have already decomposed above it, and whatever
the op it sees calls internally runs below it. So the op the runtime captures is, on every
nesting chain, the OUTERMOST aten op that a CUDA build does not decompose: not
CompositeImplicitAutograd, or CompositeImplicitAutograd with a CUDA kernel of its own in a
CUDA build (`_fused_rms_norm`, runtime/dispatch/cuda_dispatch.py). Non-aten ranges (autograd nodes such
as "AddmmBackward0", "autograd::engine::evaluate_function: ...", user annotations) are
transparent. Every launch belongs to the dispatch-level op that encloses the cpu_op named by
the launch's "External id"; the GPU activity is joined to its launch by "correlation".

Used by the calibration steps (calibrate/kernel_table.py, host_costs.py, cost_report.py, families.py). Needs
torch only for `meta_outputs` (output shapes from meta tensors).
"""
from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from phantora_prof.cost.kernels import parse_scalar  # the one parser of Concrete Inputs (callers import it from here)

# profiler "Input type" -> protocol dtype name
TYPE_MAP = {
    "float": "float32", "double": "float64", "c10::Half": "float16",
    "c10::BFloat16": "bfloat16", "long int": "int64", "int": "int32", "short": "int16",
    "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128",
}
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
KIND_OF_CAT = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}

_composite_cache: dict[str, bool] = {}


def is_composite(name: str) -> bool:
    """True for names the dispatch level never sees (non-aten ranges, CompositeImplicit ops)."""
    if not name.startswith("aten::"):
        return True
    r = _composite_cache.get(name)
    if r is not None:
        return r
    import torch

    from phantora_prof.runtime.dispatch.cuda_dispatch import cuda_build_has_kernel

    r = False
    base = name[6:]
    try:
        packet = getattr(torch.ops.aten, base)
    except AttributeError:
        packet = None
    if packet is not None:
        vals = []
        for ov in packet.overloads():
            if ov.endswith("out"):
                continue
            full = name if ov == "default" else f"{name}.{ov}"
            try:
                vals.append(torch._C._dispatch_has_kernel_for_dispatch_key(full, "CompositeImplicitAutograd"))
            except RuntimeError:
                pass
        r = bool(vals) and all(vals) and not any(
            cuda_build_has_kernel(base if ov == "default" else f"{base}.{ov}")
            for ov in packet.overloads() if not ov.endswith("out"))
    _composite_cache[name] = r
    return r


@dataclass
class GpuAct:
    kind: str  # kernel | memcpy | memset
    name: str
    api: str
    dur_ns: int
    grid: tuple = (0, 0, 0)
    block: tuple = (0, 0, 0)
    regs: int = 0
    smem: int = 0
    nbytes: int = 0
    stream: int = 0
    start_ns: int = 0


@dataclass
class DispatchOp:
    name: str
    ext: int
    ts: float
    dims: list
    types: list
    strides: list
    concrete: list
    acts: list = field(default_factory=list)


def load_events(path) -> list:
    """A trace's events. Ranges named by `record_function` with JSON in their name (the family
    sweep's "sweep:{...}") come out of torch's writer with unescaped quotes; they are repaired."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt") as f:
        text = f.read()
    try:
        return json.loads(text)["traceEvents"]
    except json.JSONDecodeError:
        text = re.sub(r'"(\w+:)\{([^}]*)\}"', lambda m: '"' + m.group(1) + "{" + m.group(2).replace('"', '\\"') + '}"',
                      text)
        return json.loads(text)["traceEvents"]


def count_steps(events) -> int:
    n = sum(1 for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    return max(n, 1)


def nesting(events, thread=lambda e: (e["pid"], e["tid"])) -> dict[int, dict | None]:
    """id(event) -> the innermost event on its thread whose time range encloses it (None at
    the top), from the ranges alone (torch.profiler writes no parent links)."""
    parent: dict[int, dict | None] = {}
    by_thread = defaultdict(list)
    for e in events:
        by_thread[thread(e)].append(e)
    for lst in by_thread.values():
        lst.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list = []
        for e in lst:
            while stack and not (e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"] + 1e-3):
                stack.pop()
            parent[id(e)] = stack[-1] if stack else None
            stack.append(e)
    return parent


def autocast_wrappers(events, parent: dict[int, dict | None]) -> set[int]:
    """ids of the cpu_ops that directly enclose an op of their own name on tensors of other dtypes
    or shapes: autocast's entry for an op it casts (`aten::addmm` with fp32 inputs around the casts
    and the bf16 `aten::addmm` that launched the kernel: HF GPT-2's Conv1D calls `torch.addmm`
    under autocast; `aten::pow` on bf16 around the fp32 one), and a tensor subclass's op around the
    local op it runs (DTensor's `aten::mm` on the global shapes around a `PythonSubclass` range and
    the shard's `aten::mm`). The simulator
    captures the inner calls (and autocast's casts), so those are the dispatch ops. A same-named
    child on the same tensors (`mul.Scalar` wrapping its scalar for `mul.Tensor`) is the op's own
    redispatch, which the simulator captures as the outer call."""
    out: set[int] = set()
    same_named_parent: dict[int, dict] = {}
    for e in events:
        if e.get("cat") != "cpu_op" or not e["name"].startswith("aten::"):
            continue
        p = parent.get(id(e))
        while p is not None and not p["name"].startswith("aten::"):  # DTensor's `PythonSubclass` range
            p = parent.get(id(p))
        if p is None or p.get("cat") != "cpu_op" or p["name"] != e["name"]:
            continue
        same_named_parent[id(e)] = p
        pa, ea = p.get("args", {}), e.get("args", {})
        outer, inner = pa.get("Input type", []), ea.get("Input type", [])
        pairs = list(zip(outer, inner, pa.get("Input Dims", []), ea.get("Input Dims", [])))
        if any(_is_tensor_type(a) and _is_tensor_type(b) and (a != b or da != db) for a, b, da, db in pairs):
            out.add(id(p))
    # an overload around a wrapper of its own name (F.interpolate's `upsample_bilinear2d.vec`
    # around autocast's `upsample_bilinear2d`, around the fp32 call) wraps it too
    for child in list(out):
        while child in same_named_parent:
            child = id(same_named_parent[child])
            out.add(child)
    return out


def dispatch_level(e, parent: dict[int, dict | None], wrappers: set[int] = frozenset()) -> dict | None:
    """The outermost non-composite cpu_op among `e` and its enclosing events, autocast's wrappers
    (`autocast_wrappers`) passed over: the op the dispatcher handed to a kernel, which the
    simulator captures as one."""
    chain = []
    while e is not None:
        chain.append(e)
        e = parent[id(e)]
    for o in reversed(chain):
        if (o.get("cat") == "cpu_op" and not is_composite(o["name"]) and id(o) not in wrappers
                and not _runs_as_parts(o)):
            return o
    return None


def _runs_as_parts(e: dict) -> bool:
    """An op whose CUDA kernel is a loop over other ops, which the simulator captures as those
    parts (runtime/dispatch/capture.py's `_as_parts`), so they are the dispatch level here too:
    `_grouped_mm` outside its one-kernel fast path (bf16 operands on sm 9.x, grouped_mm.py), i.e.
    ATen's fallback of one `mm` per group (hf_mixtral's fp32 experts: priced as one roofline
    call, the report had their GEMMs +18%)."""
    if e["name"] != "aten::_grouped_mm":
        return False
    types = e.get("args", {}).get("Input type", [])
    return not (len(types) >= 2 and types[0] == types[1] == "c10::BFloat16")


def dispatch_ops(events) -> list[DispatchOp]:
    """All dispatch-level ops of a trace (in host order), each with its GPU activities."""
    ranges = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation") and e.get("ph") == "X"]
    by_ext = {}
    for e in ranges:
        x = e.get("args", {}).get("External id")
        if x is not None and e.get("cat") == "cpu_op":
            by_ext[x] = e
    parent = nesting(ranges)
    wrappers = autocast_wrappers(ranges, parent)

    def dispatch_of(e):
        return dispatch_level(e, parent, wrappers)

    ops: dict[int, DispatchOp] = {}

    def get_op(o):
        d = ops.get(id(o))
        if d is None:
            a = o.get("args", {})
            d = DispatchOp(o["name"], a.get("External id", -1), o["ts"], a.get("Input Dims", []),
                           a.get("Input type", []), a.get("Input Strides", []),
                           a.get("Concrete Inputs", []))
            ops[id(o)] = d
        return d

    for e in ranges:
        if e.get("cat") == "cpu_op" and not is_composite(e["name"]):
            if dispatch_of(e) is e:
                get_op(e)

    gpu = {e["args"]["correlation"]: e for e in events if e.get("cat") in GPU_CATS}
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and e.get("args", {}).get("correlation") in gpu]
    launches.sort(key=lambda e: e["ts"])
    for l in launches:
        x = l["args"].get("External id")
        o = by_ext.get(x)
        if o is None:
            continue
        d = dispatch_of(o)
        if d is None:
            continue
        g = gpu[l["args"]["correlation"]]
        a = g.get("args", {})
        act = GpuAct(
            kind=KIND_OF_CAT[g["cat"]], name=g["name"], api=l["name"],
            dur_ns=int(round(g["dur"] * 1000)),
            grid=tuple(a.get("grid", (0, 0, 0))), block=tuple(a.get("block", (0, 0, 0))),
            regs=int(a.get("registers per thread", 0)), smem=int(a.get("shared memory", 0)),
            nbytes=int(a.get("bytes", 0)), stream=int(a.get("stream", 0)), start_ns=int(round(g["ts"] * 1000)),
        )
        get_op(d).acts.append(act)
    return sorted(ops.values(), key=lambda d: d.ts)


# ---- turning a trace op into tensor descriptions, scalars, meta outputs ----

def _is_tensor_type(t) -> bool:
    return t in TYPE_MAP


def _contig(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(st))


def input_tensors(op: DispatchOp):
    """Per argument position: ("t", shape, dtype, stride) | ("l", [tensors] | None) | ("s", str)."""
    out = []
    n = len(op.types)
    for i in range(n):
        t = op.types[i]
        dims = op.dims[i] if i < len(op.dims) else []
        strides = op.strides[i] if i < len(op.strides) else []
        conc = op.concrete[i] if i < len(op.concrete) else ""
        if _is_tensor_type(t):
            shape = tuple(int(x) for x in dims)
            st = tuple(int(x) for x in strides) if strides else _contig(shape)
            out.append(("t", shape, TYPE_MAP[t], st))
        elif t == "TensorList":
            if dims:
                lst = []
                for j, dd in enumerate(dims):
                    shape = tuple(int(x) for x in dd)
                    ss = strides[j] if j < len(strides) and strides[j] else _contig(shape)
                    lst.append(("t", shape, None, tuple(int(x) for x in ss)))
                out.append(("l", lst))
            else:
                out.append(("l", None))
        elif t == "":
            out.append(("n", None))
        else:
            out.append(("s", conc))
    return out



_TORCH_DTYPE = None


def _torch_dtype(name):
    global _TORCH_DTYPE
    import torch

    if _TORCH_DTYPE is None:
        _TORCH_DTYPE = {v: getattr(torch, v) for v in set(TYPE_MAP.values())}
    return _TORCH_DTYPE[name]


def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def _pick_overload(name, nargs_present):
    import torch

    packet = getattr(torch.ops.aten, name[6:])
    best = None
    for ov in packet.overloads():
        if ov.endswith("out"):
            continue
        o = getattr(packet, ov)
        sch = o._schema
        if len(sch.arguments) == nargs_present:
            return o
        if best is None:
            best = o
    return best


def meta_outputs(op: DispatchOp, list_dtypes=None):
    """Output (shape, dtype) of the op, by running it on meta tensors; None if it fails. CUDA-only
    ops that torch ships no Meta kernel for (SyncBatchNorm's, the fused RNN cells) use the
    simulator's (runtime/device/cuda_fakes.py)."""
    import torch

    from phantora_prof.runtime.device import cuda_fakes

    cuda_fakes.install()

    try:
        packet = getattr(torch.ops.aten, op.name[6:])
    except AttributeError:
        return None
    args = []
    ins = input_tensors(op)
    for i, a in enumerate(ins):
        if a[0] == "t":
            _, shape, dt, st = a
            args.append(torch.empty_strided(shape, st, dtype=_torch_dtype(dt), device="meta"))
        elif a[0] == "l":
            if a[1] is None:
                return None
            ldt = (list_dtypes or {}).get(i, "bfloat16")
            args.append([torch.empty_strided(s, st, dtype=_torch_dtype(ldt), device="meta")
                         for _, s, _, st in a[1]])
        elif a[0] == "n":
            args.append(None)
        else:
            args.append(parse_scalar(a[1]))
    cands, outs = [], []
    for ov in packet.overloads():
        o = getattr(packet, ov)
        if len(o._schema.arguments) == len(args):
            (outs if ov.endswith("out") else cands).append(o)
    cands += outs
    for o in cands:
        sch = o._schema
        pos, kw = [], {}
        for arg, v in zip(sch.arguments, args):
            if arg.kwarg_only:
                if v is not None:
                    kw[arg.name] = v
            else:
                pos.append(v)
        # ScalarType ints -> torch dtypes
        for k in ("dtype",):
            if isinstance(kw.get(k), int):
                kw[k] = _int_to_dtype(kw[k])
        try:
            r = o(*pos, **kw)
        except Exception:  # noqa: BLE001 - try the next overload
            continue
        res = []
        for t in (r if isinstance(r, (tuple, list)) else (r,)):
            if isinstance(t, torch.Tensor):
                res.append((tuple(t.shape), _dtype_name(t.dtype), tuple(t.stride())))
        return res
    return None


def _int_to_dtype(i):
    import torch

    table = {0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64,
             5: torch.float16, 6: torch.float32, 7: torch.float64, 11: torch.bool,
             15: torch.bfloat16}
    return table.get(i, torch.float32)


def key_inputs(op: DispatchOp):
    """The tensor part of the exact key (None if a tensor list was not recorded)."""
    parts = []
    for a in input_tensors(op):
        if a[0] == "t":
            parts.append((a[1], a[2], a[3]))
        elif a[0] == "l":
            if a[1] is None:
                return None
            parts.append(tuple((s, None, st) for _, s, _, st in a[1]))
    return parts


def input_dtypes(op: DispatchOp) -> tuple:
    r = []
    for t in op.types:
        if t in TYPE_MAP:
            r.append(TYPE_MAP[t])
        elif t == "TensorList":
            r.append("list")
    return tuple(r)
