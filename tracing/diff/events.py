"""Compact, columnar view of one Kineto trace: host ops, runtime calls, GPU activities.

`extract(doc, path)` walks `traceEvents` once and keeps only what the diff needs, as
parallel lists of ints (times in integer ns), so the parsed JSON document can be freed
right after: the peak memory of a diff is one parsed document plus these columns.

It then nests host events per thread (a stack sweep over events sorted by start, longer
first) to find, for every runtime call (cudaLaunchKernel, cudaMemcpyAsync, ...), the
innermost `cpu_op` / `user_annotation` that encloses it, and for every op whether it runs
inside an `Optimizer.step#...` annotation. Every GPU activity (kernel, gpu_memcpy,
gpu_memset) is tied to its launch by `args.correlation`, which gives its launch time on
the host (used to put it into a step) and its launching op (used for categories and op
matching). Activities whose launch is missing fall back to `args.External id` (the
launching op's id); those with neither are in no step (launch -1), unless the trace has no
host ops at all (then their own start time).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from tracing.kineto import TraceFormatError

__all__ = ["DiffError", "TraceEvents", "extract", "PROFILER_STEP_RE"]

PROFILER_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_HOST_OP_CATS = ("cpu_op", "user_annotation")
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


class DiffError(ValueError):
    """Inputs the diff cannot compare (mismatched ranks or steps, unusable traces).

    The message is one line and names the file(s) concerned.
    """


class TraceEvents:
    """Columns of one rank's trace. Op / runtime / GPU indices are positions in the lists."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rank: int | None = None
        self.world_size: int | None = None
        self.device: str | None = None  # deviceProperties[0].name: the GPU the trace ran on
        self.names: list[str] = []
        self._name_ids: dict[str, int] = {}
        # host ops (cpu_op and user_annotation)
        self.op_name: list[int] = []
        self.op_dims: list[str] = []
        self.op_thread: list[int] = []
        self.op_start: list[int] = []
        self.op_end: list[int] = []
        self.op_annot: list[bool] = []
        self.op_parent: list[int] = []
        self.op_in_opt: list[bool] = []
        self.op_ext: list[int] = []
        # runtime / driver calls
        self.rt_name: list[int] = []
        self.rt_thread: list[int] = []
        self.rt_start: list[int] = []
        self.rt_end: list[int] = []
        self.rt_corr: list[int] = []
        self.rt_op: list[int] = []  # innermost enclosing op, -1 if none
        # GPU activities
        self.g_cat: list[str] = []
        self.g_name: list[int] = []
        self.g_device: list[int] = []
        self.g_stream: list[int] = []
        self.g_start: list[int] = []
        self.g_end: list[int] = []
        self.g_corr: list[int] = []
        self.g_ext: list[int] = []
        # derived: launch time on the host and launching op per activity
        self.g_launch: list[int] = []
        self.g_op: list[int] = []
        self.threads: dict[Any, int] = {}  # (pid, tid) -> thread index
        self.has_shapes = False

    def intern(self, name: str) -> int:
        i = self._name_ids.get(name)
        if i is None:
            i = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return i

    def name_id(self, name: str) -> int | None:
        return self._name_ids.get(name)

    # ------------------------------------------------------------------ derived views
    def first_thread(self) -> int | None:
        """The host thread whose first op starts earliest (the script's main thread)."""
        best: dict[int, int] = {}
        for th, s in zip(self.op_thread, self.op_start):
            if th not in best or s < best[th]:
                best[th] = s
        if not best:
            return None
        return min(best, key=lambda t: (best[t], t))


def _dims_key(dims: Any) -> str:
    """`Input Dims` as compact JSON text without the `[]` of scalars and non-tensor
    arguments ('[[8,1024],[],[768]]' -> '[[8,1024],[768]]'); '' when absent.

    Dropping them makes the key the tensor shapes only, so a trace that records fewer
    non-tensor arguments (a dispatch-level capture leaves out defaults such as
    gelu's `approximate`) keys the same op the same way."""
    if dims is None:
        return ""
    if isinstance(dims, list):
        dims = [d for d in dims if d != []]
    try:
        return orjson.dumps(dims).decode()
    except TypeError:  # pragma: no cover - values loaded from JSON always serialize
        return str(dims)


def extract(doc: dict, path: str | Path) -> TraceEvents:
    """The columns of a loaded Kineto document (from `tracing.kineto.load_trace`)."""
    path = Path(path)
    tr = TraceEvents(path)
    info = doc.get("distributedInfo")
    if isinstance(info, dict):
        r = info.get("rank")
        if isinstance(r, int):
            tr.rank = r
        w = info.get("world_size")
        if isinstance(w, int):
            tr.world_size = w
    props = doc.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict) and isinstance(props[0].get("name"), str):
        tr.device = props[0]["name"]

    intern = tr.intern
    threads = tr.threads
    op_name, op_dims, op_thread = tr.op_name, tr.op_dims, tr.op_thread
    op_start, op_end, op_annot, op_ext = tr.op_start, tr.op_end, tr.op_annot, tr.op_ext
    rt_name, rt_thread, rt_start, rt_end, rt_corr = tr.rt_name, tr.rt_thread, tr.rt_start, tr.rt_end, tr.rt_corr
    g_cat, g_name, g_device, g_stream = tr.g_cat, tr.g_name, tr.g_device, tr.g_stream
    g_start, g_end, g_corr, g_ext = tr.g_start, tr.g_end, tr.g_corr, tr.g_ext
    has_shapes = False
    empty: dict = {}

    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            raise TraceFormatError(f"{path}: traceEvents[{i}] is a {type(e).__name__}, not an event object")
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat in _HOST_OP_CATS:
            kind = 0
        elif cat in GPU_CATS:
            kind = 2
        elif cat in _RUNTIME_CATS:
            kind = 1
        else:
            continue
        name = e.get("name")
        args = e.get("args") or empty
        try:
            ts = round(e["ts"] * 1000)
            dur = round(e.get("dur", 0) * 1000)
        except (KeyError, TypeError):
            raise TraceFormatError(
                f"{path}: traceEvents[{i}] ({cat} {name!r}) has no numeric 'ts'/'dur'") from None
        if not isinstance(name, str):
            name = str(name)
        if not isinstance(args, dict):
            args = empty
        if dur < 0:
            dur = 0
        if kind == 0:
            key = (e.get("pid"), e.get("tid"))
            th = threads.get(key)
            if th is None:
                th = threads[key] = len(threads)
            op_name.append(intern(name))
            dims = _dims_key(args.get("Input Dims"))
            if dims:
                has_shapes = True
            op_dims.append(dims)
            op_thread.append(th)
            op_start.append(ts)
            op_end.append(ts + dur)
            op_annot.append(cat == "user_annotation")
            ext = args.get("External id")
            op_ext.append(ext if isinstance(ext, int) else -1)
        elif kind == 1:
            key = (e.get("pid"), e.get("tid"))
            th = threads.get(key)
            if th is None:
                th = threads[key] = len(threads)
            rt_name.append(intern(name))
            rt_thread.append(th)
            rt_start.append(ts)
            rt_end.append(ts + dur)
            c = args.get("correlation")
            rt_corr.append(c if isinstance(c, int) else -1)
        else:
            g_cat.append(cat)
            g_name.append(intern(name))
            dev = args.get("device", e.get("pid"))
            g_device.append(dev if isinstance(dev, int) else 0)
            st = args.get("stream", e.get("tid"))
            g_stream.append(st if isinstance(st, int) else 0)
            g_start.append(ts)
            g_end.append(ts + dur)
            c = args.get("correlation")
            g_corr.append(c if isinstance(c, int) else -1)
            ext = args.get("External id")
            g_ext.append(ext if isinstance(ext, int) else -1)
    tr.has_shapes = has_shapes
    if not op_name and not g_name:
        raise TraceFormatError(
            f"{path}: no torch.profiler events (cpu_op, user_annotation, kernel, gpu_memcpy, gpu_memset) "
            "in traceEvents; not a Kineto trace")
    _nest(tr)
    _link_gpu(tr)
    return tr


def _nest(tr: TraceEvents) -> None:
    """Parent of every op, innermost op around every runtime call, Optimizer.step context."""
    n_ops = len(tr.op_name)
    tr.op_parent = [-1] * n_ops
    tr.op_in_opt = [False] * n_ops
    tr.rt_op = [-1] * len(tr.rt_name)
    opt_name = [n.startswith("Optimizer.step") for n in tr.names]
    per_thread: dict[int, list[tuple[int, int, int, int]]] = {}
    op_start, op_end, op_thread = tr.op_start, tr.op_end, tr.op_thread
    for i in range(n_ops):
        per_thread.setdefault(op_thread[i], []).append((op_start[i], -op_end[i], 0, i))
    for i, (th, s, e) in enumerate(zip(tr.rt_thread, tr.rt_start, tr.rt_end)):
        per_thread.setdefault(th, []).append((s, -e, 1, i))
    parent, in_opt, rt_op, op_name = tr.op_parent, tr.op_in_opt, tr.rt_op, tr.op_name
    for items in per_thread.values():
        items.sort()
        stack: list[int] = []
        for start, _neg_end, kind, idx in items:
            while stack and op_end[stack[-1]] <= start:
                stack.pop()
            if kind == 0:
                if stack:
                    p = stack[-1]
                    parent[idx] = p
                    in_opt[idx] = in_opt[p] or opt_name[op_name[idx]]
                else:
                    in_opt[idx] = opt_name[op_name[idx]]
                stack.append(idx)
            elif stack:
                rt_op[idx] = stack[-1]


def _link_gpu(tr: TraceEvents) -> None:
    """Launch time and launching op of every GPU activity."""
    by_corr: dict[int, int] = {}
    for i, c in enumerate(tr.rt_corr):
        if c >= 0:
            by_corr[c] = i
    by_ext: dict[int, int] | None = None
    n = len(tr.g_name)
    launch = [0] * n
    gop = [-1] * n
    rt_start, rt_op = tr.rt_start, tr.rt_op
    for i in range(n):
        r = by_corr.get(tr.g_corr[i], -1) if tr.g_corr[i] >= 0 else -1
        if r >= 0:
            launch[i] = rt_start[r]
            gop[i] = rt_op[r]
            continue
        # No launch in the trace: fall back to the External id (the launching op's id).
        if by_ext is None:
            by_ext = {}
            for j, x in enumerate(tr.op_ext):
                if x >= 0 and not tr.op_annot[j]:
                    by_ext.setdefault(x, j)
        j = by_ext.get(tr.g_ext[i], -1)
        gop[i] = j
        if j >= 0:
            launch[i] = tr.op_start[j]
        elif tr.op_start:
            # neither its launch nor its op is in the trace: work of a step the profiler did not
            # record on the host (the step after the last, still running when the trace closed).
            # Its start time says nothing of its step (the GPU runs behind): -1, no step's
            launch[i] = -1
        else:  # a trace without host ops: start times are all there is
            launch[i] = tr.g_start[i]
    tr.g_launch = launch
    tr.g_op = gop
