"""Build phantora_prof/cost/data/split_k_observed.json: cuBLAS's split-K choices seen in real
training profiles, per GPU (issue #14).

cost/split_k.py answers "does cuBLAS split this 16-bit GEMM's K?" from a sweep on a grid of
quarter octaves (m, n in 128 .. 8192: 128, 152, 181, 215, 256, ...). Models use round sizes
(768, 3,072, 12,608 = 64 x 197 tokens) that the grid never holds, and cuBLAS's heuristics are
not smooth: the nearest grid point gets 98% of the GEMM shapes in the kept H200 training
profiles right, and every shape it gets wrong there is a ViT-style weight gradient (A^T B,
m x n = 768 x 3,072 or 3,072 x 768, K = 12,544 / 12,608) that cuBLAS splits and the grid says
does not (timm ViT-B/16, torchvision's ViT, MLP-Mixer: 24 split-K reductions a step missing).

What a profile shows is a measurement of the exact shape, so it is kept as one: for every
`aten::mm` / `aten::addmm` over two 2-D 16-bit operands with a GEMM kernel, whether a
`cublasLt::splitKreduce_kernel` ran under the same op call. A shape seen both ways (cuBLAS's
choice can depend on the workspace left) takes the majority, ties split. split_k.splits asks
this table first, for the same GPU only (the H100 chooses differently from the H200 on shapes
the two share in our profiles), then the sweep.

    phantora-prof calibrate split-k-observed TRACE.pt.trace.json.gz ... [--gpu h200] [--out FILE]

The profiles are the training profiles kept in tools/holdout/real_h200/ and the reference
traces; the closing notes of issue #14 say which cases' profiles were read, so which held-out
cases stop being held out. Each profile goes to the table of the GPU its own
`deviceProperties` names (`trace_gpu`): leases of the "H200" machine often gave H100s, and
until session 49 a list of session folders decided, which put five H100 sessions' GEMM
choices into the H200 table.
"""
from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

from phantora_prof.calibrate.kernel_table import load_events
from phantora_prof.errors import TraceFormatError

GEMM_OPS = ("aten::mm", "aten::addmm")
_DTYPES = {"c10::BFloat16": "bf16", "c10::Half": "fp16"}
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def _is_transposed(dims: list[int], strides: list[int]) -> bool:
    """A 2-D operand stored column-major (a transposed view): cuBLAS's T layout."""
    return len(strides) == 2 and strides[0] == 1 and dims[1] > 1


def _operands(op: dict) -> tuple[str, int, int, int, str] | None:
    """(dtype, m, k, n, layout) of a 2-D 16-bit mm / addmm call with shapes recorded, else None.
    Layout as the sweep names it: TN (A transposed), NT (B transposed), NN; both transposed is
    left out (the sweep does not cover it)."""
    a = op.get("args", {})
    dims, strides, types = a.get("Input Dims"), a.get("Input Strides"), a.get("Input type")
    if not dims or not strides or not types:
        return None
    first = 0 if op["name"] == "aten::mm" else 1
    if len(dims) < first + 2 or len(strides) < first + 2 or len(types) < first + 2:
        return None
    x, w = dims[first], dims[first + 1]
    xs, ws = strides[first], strides[first + 1]
    dtype = _DTYPES.get(types[first])
    if dtype is None or types[first + 1] != types[first] or len(x) != 2 or len(w) != 2 or x[1] != w[0]:
        return None
    at, bt = _is_transposed(x, xs), _is_transposed(w, ws)
    if at and bt:
        return None
    return dtype, x[0], x[1], w[1], "TN" if at else "NT" if bt else "NN"


def observe(events: list[dict]) -> Counter:
    """{(dtype, layout, m, n, k, split): calls} of one trace's GEMM calls (a call counts when a
    GEMM kernel ran under it). A kernel belongs to the innermost GEMM call enclosing its launch,
    not to trace_ops.dispatch_ops' outermost one: under autocast an fp32 `aten::addmm` (HF GPT-2's
    Conv1D) encloses the bf16 one that cuBLAS ran, and the choice is the bf16 call's."""
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in _LAUNCH_CATS and "correlation" in e.get("args", {})}
    calls: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("name") in GEMM_OPS:
            calls[e["tid"]].append(e)
    for lst in calls.values():
        lst.sort(key=lambda e: e["ts"])
    starts = {tid: [e["ts"] for e in lst] for tid, lst in calls.items()}
    kinds: dict[int, set[str]] = defaultdict(set)
    by_id: dict[int, dict] = {}
    for k in events:
        if k.get("cat") != "kernel":
            continue
        launch = launches.get(k.get("args", {}).get("correlation"))
        if launch is None or launch["tid"] not in calls:
            continue
        lst = calls[launch["tid"]]
        i = bisect.bisect_right(starts[launch["tid"]], launch["ts"]) - 1
        # the innermost GEMM call enclosing the launch (mm calls do not nest in one another)
        if i < 0 or launch["ts"] > lst[i]["ts"] + lst[i]["dur"]:
            continue
        op = lst[i]
        by_id[id(op)] = op
        kinds[id(op)].add("reduce" if "splitKreduce" in k["name"] else "gemm")
    out: Counter = Counter()
    for key, seen in kinds.items():
        shape = _operands(by_id[key])
        if shape is None or "gemm" not in seen:
            continue
        dtype, m, k, n, layout = shape
        out[(dtype, layout, m, n, k, "reduce" in seen)] += 1
    return out


_DEVICE_NAME = re.compile(r'"deviceProperties"\s*:\s*\[\s*\{[^}]*?"name"\s*:\s*"([^"]+)"')


def trace_gpu(path: Path) -> str | None:
    """The GPU key (h200, h100, ...) of the device a torch.profiler trace ran on, from its first
    `deviceProperties` entry (kineto writes them at the top of the file), or None when the trace
    names no known GPU. Only the file's head is read: the traces are up to ~100 MB unpacked."""
    from phantora_prof.measure.gpu_names import gpu_key_for

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        head = f.read(64 * 1024)
    found = _DEVICE_NAME.search(head)
    return gpu_key_for(found.group(1)) if found else None


def by_gpu(traces: list[Path]) -> dict[str, list[Path]]:
    """{gpu key: traces that ran on it}; a trace that names no known GPU is an error (which
    table it belongs to cannot be guessed)."""
    groups: dict[str, list[Path]] = defaultdict(list)
    unknown = []
    for path in traces:
        gpu = trace_gpu(path)
        if gpu is None:
            unknown.append(str(path))
        else:
            groups[gpu].append(path)
    if unknown:
        raise TraceFormatError("no known GPU in the deviceProperties of: " + ", ".join(unknown)
                               + " (split-K choices are kept per GPU; profile on an H100 / H200 / A100)")
    return dict(sorted(groups.items()))


def _source_name(path: Path) -> str:
    """A trace's case name: its file name's stem, or its folder's for the reference traces
    (REFERENCE/h200/<workload>/trace.pt.trace.json.gz)."""
    stem = path.name.split(".pt.trace")[0]
    return path.parent.name if stem == "trace" else stem


def dumps(doc: dict) -> str:
    """The file's text: one GEMM shape per line (a diff of a rebuild reads shape by shape)."""
    lines = ["{"]
    for i, (gpu, table) in enumerate(doc.items()):
        lines.append(f' "{gpu}": {{"traces": {json.dumps(table["traces"])}, "entries": [')
        entries = table["entries"]
        lines += [f"  {json.dumps(e)}" + ("," if j < len(entries) - 1 else "") for j, e in enumerate(entries)]
        lines.append(" ]}" + ("," if i < len(doc) - 1 else ""))
    return "\n".join(lines) + "\n}\n"


def build(traces: list[Path], gpu_key: str) -> dict:
    """The table of `traces` (all from one GPU): one entry per shape, the majority choice."""
    seen: Counter = Counter()
    sources: dict[tuple, set[str]] = defaultdict(set)
    for path in traces:
        counted = observe(load_events(path))
        seen.update(counted)
        for key in counted:
            sources[key[:5]].add(_source_name(Path(path)))
    shapes: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for (*shape, split), n in seen.items():
        shapes[tuple(shape)][int(split)] += n
    entries = [{"dtype": d, "layout": lay, "m": m, "n": n, "k": k, "split": yes >= no,
                "calls": no + yes, "sources": sorted(sources[(d, lay, m, n, k)])}
               for (d, lay, m, n, k), (no, yes) in sorted(shapes.items())]
    return {"gpu": gpu_key, "traces": sorted(_source_name(Path(t)) for t in traces), "entries": entries}


def merge(path: Path, table: dict) -> dict:
    """`table` put into the file's per-GPU document (other GPUs' tables kept)."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc = {k: v for k, v in doc.items() if k != table["gpu"]}
    doc[table["gpu"]] = {"traces": table["traces"], "entries": table["entries"]}
    return dict(sorted(doc.items()))
