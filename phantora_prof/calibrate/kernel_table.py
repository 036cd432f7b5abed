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

Run:  phantora-prof calibrate kernels [--reference DIR] [--check]
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

from phantora_prof.calibrate.interning import Interner
from phantora_prof.calibrate.reference import require_reference
from phantora_prof.calibrate.trace_ops import _is_tensor_type, dispatch_ops, input_dtypes, key_inputs, meta_outputs
from phantora_prof.calibrate.trace_ops import load_events as _load_trace

WORKLOADS = ("gpt_small", "gpt_b32", "gpt_ddp1", "gpt_small_memory", "streams")
OUT = Path(__file__).resolve().parents[1] / "cost" / "data" / "h200_kernels.json"


def load_events(workload_or_path, reference: Path | None = None) -> list:
    """Events of a reference workload's trace (by name: gpt_small, ... in REFERENCE/h200/, the
    default reference folder when None) or of a trace file."""
    p = Path(workload_or_path)
    if not p.exists():
        p = require_reference(reference) / "h200" / str(workload_or_path) / "trace.pt.trace.json.gz"
    return _load_trace(p)


def missing_traces(reference: Path, workloads=WORKLOADS) -> list[Path]:
    """The workloads' traces that are not in REFERENCE/h200 (build_table leaves them out)."""
    paths = [Path(reference) / "h200" / w / "trace.pt.trace.json.gz" for w in workloads]
    return [p for p in paths if not p.exists()]


# ---- the table ----

def _kernel_sig(acts):
    return tuple((a.kind, a.name) for a in acts)


def build_table(workloads=WORKLOADS, reference: Path | None = None):
    nid, aid = Interner(), Interner()  # kernel names, launch APIs
    names, apis = nid.values, aid.values

    # (name, key) -> sig -> list of (acts, scalars)
    exact = defaultdict(lambda: defaultdict(list))
    fb = defaultdict(lambda: defaultdict(list))
    meta_cache = {}
    for w in workloads:
        try:
            events = load_events(w, reference)
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


def render(table: dict) -> bytes:
    """The file's bytes: compact JSON and a newline."""
    return json.dumps(table, separators=(",", ":"), sort_keys=False).encode() + b"\n"


def summary(table: dict) -> str:
    n_exact = sum(len(v) for v in table["exact"].values())
    n_fb = sum(len(v) for v in table["fallback"].values())
    return (f"{len(table['exact'])} ops, {n_exact} exact shapes, {n_fb} fallbacks, "
            f"{len(table['names'])} kernel names, {len(render(table)) - 1} bytes JSON")


def write(blob: bytes, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(blob)
    tmp.replace(out)
