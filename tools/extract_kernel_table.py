#!/usr/bin/env python
"""Build phantora_prof/cost/data/h200_kernels.json from the reference H200 traces.

For every op the runtime would capture (the __torch_dispatch__ level), record the GPU
activities (kernels, memsets, memcpys) it launched on the real GPU: name, grid, block,
registers per thread, shared memory, bytes, launch API and the measured duration.

Mapping trace ops to dispatch-level ops
---------------------------------------
torch.profiler records every dispatcher call as a nested `cpu_op`, from composite ops
(aten::linear, aten::to, aten::layer_norm, aten::cross_entropy_loss, aten::matmul, ...)
down to the op whose CUDA kernel launches (often aten::copy_ inside aten::_to_copy, or
aten::nll_loss_forward inside aten::nll_loss). A TorchDispatchMode sees neither end of
that chain: CompositeImplicitAutograd ops have already decomposed above it, and whatever
the op it sees calls internally runs below it. So the op the runtime captures is, on every
nesting chain, the OUTERMOST aten op that is not CompositeImplicitAutograd (asked of the
installed torch: `torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeImplicit
Autograd")` for all its non-out overloads). Non-aten ranges (autograd nodes such as
"AddmmBackward0", "autograd::engine::evaluate_function: ...", user annotations) are
transparent. Every launch belongs to the dispatch-level op that encloses the cpu_op
named by the launch's "External id"; the GPU activity is joined to its launch by
"correlation". Examples: aten::linear > aten::to > aten::_to_copy > aten::copy_ (kernel)
gives aten::_to_copy; aten::linear > aten::addmm (kernel) gives aten::addmm;
aten::nll_loss_nd > aten::nll_loss > aten::nll_loss_forward (kernel) gives
aten::nll_loss_forward; aten::embedding_backward > aten::embedding_dense_backward (sort,
scan, memsets...) gives aten::embedding_dense_backward.

Table keys
----------
exact: (op name, every tensor argument in order: dims, dtype, strides (lists of tensors as
lists), output dims and dtypes (computed by running the op on meta tensors)), plus, when
the same key launched different kernels in different calls (pow(x, 1) is a DtoD memcpy,
pow(x, 2) a kernel), variants told apart by the op's scalar arguments (concrete inputs).
fallback: (op name, input dtypes): the most frequent kernel sequence, for names and
launch configs of shapes the references never ran.

Run:  python tools/extract_kernel_table.py [--check]
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REF = Path("/work/shared/reference/h200")
WORKLOADS = ("gpt_small", "gpt_b32", "gpt_ddp1", "gpt_small_memory", "streams")
OUT = ROOT / "phantora_prof" / "cost" / "data" / "h200_kernels.json"

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
        r = bool(vals) and all(vals)
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


def load_events(workload_or_path) -> list:
    p = Path(workload_or_path)
    if not p.exists():
        p = REF / str(workload_or_path) / "trace.pt.trace.json.gz"
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt") as f:
        return json.load(f)["traceEvents"]


def count_steps(events) -> int:
    n = sum(1 for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    return max(n, 1)


def dispatch_ops(events) -> list[DispatchOp]:
    """All dispatch-level ops of a trace (in host order), each with its GPU activities."""
    ranges = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation") and e.get("ph") == "X"]
    by_ext = {}
    for e in ranges:
        x = e.get("args", {}).get("External id")
        if x is not None and e.get("cat") == "cpu_op":
            by_ext[x] = e
    parent: dict[int, dict | None] = {}
    by_tid = defaultdict(list)
    for e in ranges:
        by_tid[(e["pid"], e["tid"])].append(e)
    for lst in by_tid.values():
        lst.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list = []
        for e in lst:
            while stack and not (e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"] + 1e-3):
                stack.pop()
            parent[id(e)] = stack[-1] if stack else None
            stack.append(e)

    def dispatch_of(e):
        chain = []
        while e is not None:
            chain.append(e)
            e = parent[id(e)]
        for o in reversed(chain):
            if o.get("cat") == "cpu_op" and not is_composite(o["name"]):
                return o
        return None

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
            nbytes=int(a.get("bytes", 0)), stream=int(a.get("stream", 0)),
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


def parse_scalar(s: str):
    if s is None or s == "":
        return None
    if s in ("True", "False"):
        return s == "True"
    if s.startswith("[") and s.endswith("]"):
        inner = s[1:-1].strip()
        if not inner:
            return ()
        return tuple(parse_scalar(x.strip()) for x in inner.split(","))
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return s


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
    """Output (shape, dtype) of the op, by running it on meta tensors; None if it fails."""
    import torch

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


# ---- the table ----

def _kernel_sig(acts):
    return tuple((a.kind, a.name) for a in acts)


def build_table(workloads=WORKLOADS):
    names: list[str] = []
    name_idx: dict[str, int] = {}
    apis: list[str] = []
    api_idx: dict[str, int] = {}

    def nid(n):
        if n not in name_idx:
            name_idx[n] = len(names)
            names.append(n)
        return name_idx[n]

    def aid(n):
        if n not in api_idx:
            api_idx[n] = len(apis)
            apis.append(n)
        return api_idx[n]

    # (name, key) -> sig -> list of (acts, scalars)
    exact = defaultdict(lambda: defaultdict(list))
    fb = defaultdict(lambda: defaultdict(list))
    meta_cache = {}
    for w in workloads:
        try:
            events = load_events(w)
        except FileNotFoundError:
            continue
        for op in dispatch_ops(events):
            if not op.acts or any("nccl" in a.name.lower() for a in op.acts):
                continue
            if all(a.kind == "memcpy" and ("HtoD" in a.name or "DtoH" in a.name) for a in op.acts):
                continue  # host<->device copies come from the bandwidth model
            sig = _kernel_sig(op.acts)
            scal = tuple(c if not _is_tensor_type(t) and t not in ("TensorList", "") else ""
                         for t, c in zip(op.types, op.concrete))
            ki = key_inputs(op)
            fb[(op.name, input_dtypes(op))][sig].append((op.acts, ki))
            if ki is None:
                continue
            mk = (op.name, json.dumps(op.dims), json.dumps(op.types), json.dumps(op.strides), json.dumps(op.concrete))
            if mk not in meta_cache:
                has_list = any(t == "TensorList" for t in op.types)
                meta_cache[mk] = None if has_list else meta_outputs(op)
                if meta_cache[mk] is None and not has_list:
                    print(f"note: no meta outputs for {op.name} {op.dims}", file=sys.stderr)
            outs = meta_cache[mk]
            ko = None if outs is None else tuple((s, d) for s, d, _ in outs)
            exact[(op.name, _freeze(ki), ko)][sig].append((op.acts, scal))

    def kernels_of(instances):
        acts0 = instances[0][0]
        ks = []
        for j, a in enumerate(acts0):
            durs = [inst[0][j].dur_ns for inst in instances]
            med = statistics.median(durs)
            # mean without outliers (> 2x the median): the expected time, robust to hiccups
            kept = [d for d in durs if d <= 2 * med] or durs
            ks.append([a.kind[0], nid(a.name), *a.grid, *a.block, a.regs, a.smem, a.nbytes,
                       aid(a.api), int(round(statistics.fmean(kept)))])
        return ks

    out_exact = defaultdict(list)
    for (name, ki, ko), sigs in exact.items():
        variants = []
        for sig, inst in sorted(sigs.items(), key=lambda kv: -len(kv[1])):
            scal_counts = Counter(s for _, s in inst)
            variants.append({"n": len(inst), "scalars": list(scal_counts.most_common(1)[0][0]),
                             "kernels": kernels_of(inst)})
        out_exact[name].append({"in": _thaw(ki), "out": None if ko is None else _thaw(ko),
                                "variants": variants})
    out_fb = defaultdict(dict)
    for (name, types), sigs in fb.items():
        seqs = []
        for sig, inst in sorted(sigs.items(), key=lambda kv: (-len(kv[1]), len(kv[0]))):
            ks = kernels_of([(a, None) for a, _ in inst])
            in_bytes = statistics.median(_in_bytes(ki) for _, ki in inst) if inst[0][1] is not None else 0
            seqs.append({"n": len(inst), "in_bytes": int(in_bytes), "kernels": ks})
        out_fb[name]["|".join(types)] = seqs
    return {
        "version": 1,
        "gpu": "h200",
        "arch": "sm90",
        "torch": "2.11.0+cu130",
        "sources": [w for w in workloads],
        "kernel_fields": ["kind", "name", "gx", "gy", "gz", "bx", "by", "bz", "regs", "smem",
                          "bytes", "api", "dur_ns"],
        "names": names,
        "apis": apis,
        "exact": dict(sorted(out_exact.items())),
        "fallback": dict(sorted(out_fb.items())),
    }


_ITEM = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
         "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def _in_bytes(ki) -> int:
    """Total bytes of the tensor inputs of a key (list elements counted as 4-byte)."""
    n = 0
    for p in ki:
        if p and isinstance(p[0], (list, tuple)) and p and len(p) == 3 and isinstance(p[1], (str, type(None))) \
                and not (p[0] and isinstance(p[0][0], (list, tuple))):
            shape, dt, _ = p
            c = 1
            for x in shape:
                c *= x
            n += c * _ITEM.get(dt, 4)
        else:
            for shape, dt, _ in p:
                c = 1
                for x in shape:
                    c *= x
                n += c * _ITEM.get(dt, 4)
    return n


def _freeze(x):
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    return x


def _thaw(x):
    if isinstance(x, tuple):
        return [_thaw(v) for v in x]
    return x


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="print a summary, write nothing")
    args = ap.parse_args(argv)
    table = build_table()
    blob = json.dumps(table, separators=(",", ":"), sort_keys=False).encode()
    n_exact = sum(len(v) for v in table["exact"].values())
    n_fb = sum(len(v) for v in table["fallback"].values())
    print(f"{len(table['exact'])} ops, {n_exact} exact shapes, {n_fb} fallbacks, "
          f"{len(table['names'])} kernel names, {len(blob)} bytes JSON")
    if args.check:
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_bytes(blob + b"\n")
    tmp.replace(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
