"""Build the family curves (cost/data/h200_families.json.gz) from a profiled family sweep.

    phantora-prof calibrate families SWEEP.pt.trace.json.gz [...] [--out FILE]

Input: traces written by measure/sweep_families.py on a real GPU, where every configuration's
profiled iterations sit inside a `sweep:{json}` range. Every dispatch-level op inside a range
(calibrate/trace_ops.py) becomes a point: op name, class key (cost/families.py), roofline
time on the H200 (`w`, the cost model's own roofline for the captured call rebuilt from the
trace's shapes, strides and scalars), measured time (`t`: the median over the iterations of
the summed GPU time of its kernels, memsets and copies) and its kernels. Calls with the same
signature inside one configuration are one point. Points whose roofline cannot be computed
(no meta outputs, a tensor list whose dtype the trace does not say) are skipped and counted.
An op whose kernels overlap on several streams keeps its busy time (`busy_fraction`).

The output is deterministic for the same input (sorted keys, rounded numbers).
"""
from __future__ import annotations

import gzip
import json
import logging
import statistics
from collections import defaultdict
from pathlib import Path

from phantora_prof.calibrate.interning import Interner
from phantora_prof.calibrate.trace_ops import DispatchOp, dispatch_ops, input_tensors, load_events, meta_outputs, \
    parse_scalar
from phantora_prof.cost import families as F
from phantora_prof.protocol import OpCall, OpKind, TensorArg

log = logging.getLogger(__name__)

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _sweep_ranges(events: list[dict]) -> list[tuple[float, float, dict]]:
    out = []
    for e in events:
        if e.get("cat") == "user_annotation" and e.get("name", "").startswith("sweep:"):
            out.append((e["ts"], e["ts"] + e["dur"], json.loads(e["name"][len("sweep:"):])))
    out.sort(key=lambda r: r[0])
    return out


def to_opcall(op: DispatchOp, list_dtype: str) -> OpCall | None:
    """The captured call the runtime would have made for this trace op (outputs from meta tensors)."""
    args = []
    for a in input_tensors(op):
        if a[0] == "t":
            _, shape, dt, st = a
            args.append(TensorArg(tuple(shape), tuple(st), dt, 0))
        elif a[0] == "l":
            if a[1] is None:
                return None
            args.append(tuple(TensorArg(tuple(s), tuple(st), list_dtype, 0) for _, s, _, st in a[1]))
        elif a[0] == "n":
            args.append(None)
        else:
            args.append(parse_scalar(a[1]))
    has_list = any(isinstance(a, tuple) and a and isinstance(a[0], TensorArg) for a in args)
    outs = None
    if not has_list:
        metas = meta_outputs(op)
        if metas is None:
            return None
        outs = tuple(TensorArg(tuple(s), tuple(st), d, 0) for s, d, st in metas)
    else:  # foreach ops and cat: outputs like the (first) list, which is what the roofline needs
        first = next(a for a in args if isinstance(a, tuple) and a and isinstance(a[0], TensorArg))
        outs = first if not op.name.endswith("_") else ()
    return OpCall(0, 0, op.name, tuple(args), {}, outs, 0, 0, 0, 7, 0, OpKind.COMPUTE)


def busy_fraction(acts: list) -> float:
    """The GPU time an op's work spans (the union of its activities' intervals) over the sum of
    their durations: 1 when they run one after another, less when a library runs them side by
    side on streams of its own (cuDNN's grouped convolutions with wide kernels run one kernel
    set per group on up to 16 internal streams: ~12 ms of wall time for ~31 ms of kernels, as
    CUDA events around the call measured, tools/holdout/conv_profiler_probe.py). The simulator
    lays an op's kernels on one stream, so a point keeps the busy time, its kernels' durations
    scaled to it."""
    total = sum(a.dur_ns for a in acts)
    if total <= 0 or len({a.stream for a in acts}) < 2:
        return 1.0
    busy, end = 0, None
    for a in sorted(acts, key=lambda a: a.start_ns):
        start, stop = a.start_ns, a.start_ns + a.dur_ns
        if end is None or start >= end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    return min(1.0, busy / total)


def collect(paths: list[Path], gpu_key: str = F.GPU_KEY) -> tuple[list[dict], dict]:
    """Points of every sweep trace in `paths` (see the module docstring), measured on `gpu_key`
    (each point's roofline time is that GPU's), and counts of what was skipped."""
    from phantora_prof import cost

    gpu = cost.get_gpu(gpu_key)
    groups: dict[tuple, list] = defaultdict(list)  # (config index, op name, signature) -> [(op, acts)]
    configs: list[dict] = []
    for path in paths:
        events = load_events(path)
        ranges = _sweep_ranges(events)
        base_index = len(configs)
        configs.extend(r[2] for r in ranges)
        starts = [r[0] for r in ranges]
        import bisect

        for op in dispatch_ops(events):
            if not op.acts:
                continue
            i = bisect.bisect_right(starts, op.ts) - 1
            if i < 0 or op.ts > ranges[i][1]:
                continue
            sig = json.dumps([op.name, op.dims, op.types, op.strides, op.concrete])
            groups[(base_index + i, op.name, sig)].append(op)
    points, skipped = [], defaultdict(int)
    for (ci, name, _sig), ops in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        params = configs[ci]
        call = to_opcall(ops[0], _DTYPES.get(params.get("dtype", "fp32"), "float32"))
        if call is None:
            skipped["no call"] += 1
            continue
        base = name.split("::", 1)[1]
        try:
            w = sum(k.duration_ns for k in cost.estimate(call, gpu, use_table=False, use_measured=False))
        except Exception:  # noqa: BLE001 - a call the roofline cannot read: skipped, counted
            skipped["no roofline"] += 1
            continue
        if w <= 0:
            skipped["no GPU work in the model"] += 1
            continue
        n = len(ops[0].acts)
        usable = [o for o in ops if len(o.acts) == n and [a.name for a in o.acts] == [a.name for a in ops[0].acts]]
        overlap = statistics.median(busy_fraction(o.acts) for o in usable)
        kernels = []
        for j, a in enumerate(ops[0].acts):
            dur = statistics.median(o.acts[j].dur_ns for o in usable) * overlap
            kernels.append((a.kind, a.name, list(a.grid), list(a.block), a.regs, a.smem, a.nbytes, a.api, int(dur)))
        t = sum(k[-1] for k in kernels)
        points.append({"op": base, "key": F.class_key(call, base), "w": round(w, 1), "t": t, "kernels": kernels,
                       "shape": list(F.shape_features(call, base)), "family": params.get("fam", "?"),
                       **({"cold": True} if params.get("cold") else {})})
    return points, dict(skipped)


def build(points: list[dict], sources: list[str], gpu_key: str = F.GPU_KEY, ops_kept: list[str] | None = None) -> dict:
    """The table document; `ops_kept`: the op names a `--ops` filter kept (recorded, so the table
    can be rebuilt from its sources)."""
    nid, aid = Interner(), Interner()  # kernel names, launch APIs
    names, apis = nid.values, aid.values

    ops: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        ks = [[k[0], nid(k[1]), *k[2], *k[3], k[4], k[5], k[6], aid(k[7]), k[8]] for k in p["kernels"]]
        ops[p["op"]][p["key"]].append({"w": p["w"], "t": p["t"], "s": p["shape"], "k": ks,
                                       **({"cold": 1} if p.get("cold") else {})})
    for classes in ops.values():
        for pts in classes.values():
            pts.sort(key=lambda p: (p["w"], p["t"]))
    return {"schema": F.SCHEMA, "gpu": gpu_key, "sources": sources, **({"ops_kept": ops_kept} if ops_kept else {}),
            "kernel_fields": ["kind", "name", "gx", "gy", "gz", "bx", "by", "bz", "regs", "smem", "bytes", "api",
                              "dur_ns"],
            "names": names, "apis": apis,
            "ops": {op: dict(sorted(classes.items())) for op, classes in sorted(ops.items())}}


def load_points(doc: dict) -> list[dict]:
    """The points of a built document, as `collect` returns them (names and APIs resolved),
    so a new sweep's points can be added to those of sweeps whose traces are not kept."""
    fields = doc["kernel_fields"]
    name_i, api_i, dur_i = fields.index("name"), fields.index("api"), fields.index("dur_ns")
    points = []
    for op, classes in doc["ops"].items():
        for key, pts in classes.items():
            for p in pts:
                points.append({"op": op, "key": key, "w": p["w"], "t": p["t"], "shape": p["s"],
                               "kernels": [(k[0], doc["names"][k[name_i]], k[2:5], k[5:8], k[8], k[9], k[10],
                                            doc["apis"][k[api_i]], k[dur_i]) for k in p["k"]],
                               **({"cold": True} if p.get("cold") else {})})
    return points


def superseded(old: list[dict], new: list[dict]) -> tuple[list[dict], int]:
    """The old points no new point re-measures (same op, class key and shape), and how many
    were dropped: a sweep run again replaces its earlier points rather than averaging with them
    (the 2026-12-01 rnn sweep's points, whose trace is not kept, summed the kernels cuDNN runs
    side by side on its own streams; busy_fraction came later)."""
    def ident(p: dict) -> tuple:
        return p["op"], p["key"], tuple(p["shape"])
    again = {ident(p) for p in new}
    kept = [p for p in old if ident(p) not in again]
    return kept, len(old) - len(kept)


def read(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def write(doc: dict, out: Path) -> None:
    blob = json.dumps(doc, separators=(",", ":"), sort_keys=False).encode()
    tmp = out.with_suffix(".tmp")
    with gzip.GzipFile(tmp, "wb", mtime=0) as f:  # mtime 0: the same input gives the same bytes
        f.write(blob)
    tmp.replace(out)
