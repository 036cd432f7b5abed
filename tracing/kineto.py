"""Kineto (torch.profiler) Chrome-trace JSON: writer and reader.

`write_kineto` turns a `RankTrace` into the file torch.profiler's `export_chrome_trace` /
`tensorboard_trace_handler` writes, laid out as kineto's `output_json.cpp` (torch 2.11 era)
lays it out:

- top level, in this order: `schemaVersion`, `deviceProperties`, `trace_id`,
  [`profile_memory`], [`record_shapes`], [`distributedInfo`], `cuda_driver_version`,
  `cuda_runtime_version`, `cupti_version`, `displayTimeUnit` ("ms"), `baseTimeNanoseconds`,
  `traceEvents`, `traceName`;
- event fields in kineto's order: X = ph, cat, name, pid, tid, ts, dur, args;
  flows = ph, id, pid, tid, ts, cat, name[, bp]; M = name, ph, ts, pid, tid, args;
- `ts`/`dur` in microseconds with exactly three decimals, printed from integer ns
  (kineto's `"{}.{:03}"`), never through a float. `ts` is relative to
  `baseTimeNanoseconds`, exactly as in the reference traces:
  absolute epoch ns = baseTimeNanoseconds + ts * 1000 (kineto's `transToRelativeTime`,
  clamped at 0). By default `baseTimeNanoseconds` = `RankTrace.base_time_ns` (the wall
  clock of simulated time 0), so `ts` is the simulated ns since start / 1000; set
  `RankTrace.trace_base_ns` to anchor elsewhere;
- events, then metadata (process_name / process_labels / process_sort_index for the host
  pid and for GPU pids 0..15 — kineto always lists 16 — and more if used; thread_name /
  thread_sort_index for every GPU stream ("stream 7 ") and host thread), then the
  "PyTorch Profiler (0)" `Trace` span on pid "Spans", its sort index, the
  "Iteration Start: PyTorch Profiler" and "Record Window End" instants;
- `gpu_user_annotation` spans are written 1 ns earlier and 2 ns longer, as kineto does.

Events are sorted by (ts, X before flows before instants, longer span first, input order),
so the same `RankTrace` always gives the same bytes; `.gz` paths are gzipped
deterministically (mtime 0, no file name in the header). Files are written to a temporary
file in the target directory and renamed into place.

`load_trace` reads .json / .json.gz (detected by content) and raises `TraceFormatError`
naming the file and the problem.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import json
import logging
import zlib
from pathlib import Path
from typing import Any, Callable

import orjson

from tracing.atomic import atomic_file
from tracing.model import RankTrace

log = logging.getLogger(__name__)

__all__ = ["TraceFormatError", "write_kineto", "render_kineto", "load_trace", "format_us"]

KINETO_GPU_PIDS = 16  # kineto writes process metadata for GPUs 0..15 whatever is used
GPU_SORT_INDEX_BASE = 5000000
SPANS_SORT_INDEX = 0x20000000
PROFILER_SPAN_NAME = "PyTorch Profiler"
# gzip level of .json.gz traces: on a GPT-2 trace level 3 compresses 2.6x faster than level 6
# for 31% more bytes (10x smaller than the JSON, against 13x)
_GZIP_LEVEL = 3

_ORJSON_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


class TraceFormatError(ValueError):
    """A trace file that cannot be read as a Kineto trace; the message names the file."""


def format_us(ns: int) -> str:
    """Integer ns -> kineto's microsecond text with three decimals ('12.345')."""
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    for conv in (int, float):
        try:
            return conv(obj)
        except (TypeError, ValueError):
            pass
    return str(obj)


# JSON bytes of a value as the trace writers print it (a C callable: the native Perfetto encoder
# calls it for its annotation cache's keys)
_dumps_bytes = functools.partial(orjson.dumps, default=_json_default, option=_ORJSON_OPTS)


def _dumps(value: Any) -> str:
    return _dumps_bytes(value).decode()


def _args_field(args: dict[str, Any]) -> str:
    if not args:
        return ""
    body = _dumps(args)
    return ',\n    "args": {\n      ' + body[1:-1] + "\n    }"


def _block(d: dict[str, Any]) -> str:
    """A dict as kineto writes a deviceProperties entry."""
    return "\n    {\n      " + ", ".join(f"{_dumps(k)}: {_dumps(v)}" for k, v in d.items()) + "\n    }"


def _meta(name: str, ts: str, pid: Any, tid: Any, key: str, value: Any) -> str:
    return (f'\n  {{\n    "name": "{name}", "ph": "M", "ts": {ts}, "pid": {pid}, "tid": {tid},'
            f'\n    "args": {{\n      "{key}": {_dumps(value)}\n    }}\n  }},')


def _default_trace_id(trace: RankTrace, trace_name: str) -> str:
    key = f"{trace.rank}:{trace.host_pid}:{trace.base_time_ns}:{trace_name}"
    return hashlib.md5(key.encode()).hexdigest().upper()


def render_kineto(trace: RankTrace, trace_name: str | None = None) -> bytes:
    """The Kineto JSON text of `trace` (what `write_kineto` writes before compression)."""
    if trace_name is None:
        trace_name = trace.trace_name
    base = trace.base_time_ns if trace.trace_base_ns is None else trace.trace_base_ns
    shift = trace.base_time_ns - base  # simulated ns -> ns relative to baseTimeNanoseconds
    host_pid = trace.host_pid
    spans, flows, instants = trace.spans, trace.flows, trace.instants
    events: str | bytes | None = None
    if _native_render is not None:
        try:
            events, used_streams, used_threads, min_ns, max_ns = _native_render(
                spans if type(spans) is list else list(spans), flows if type(flows) is list else list(flows),
                instants if type(instants) is list else list(instants), host_pid, shift, {}, _dumps_bytes)
        except Exception:  # noqa: BLE001 - anything unusual: the Python renderer (and its own error)
            log.debug("native Kineto renderer declined the trace; rendering in Python", exc_info=True)
            events = None
    if events is None:
        events, used_streams, used_threads, min_ns, max_ns = _render_events_py(
            spans, flows, instants, host_pid, shift)

    def rel(ns: int) -> int:
        t = ns + shift
        return t if t > 0 else 0

    # Profiler window: explicit, else the extent of the events.
    start_ns = trace.profiler_start_ns
    end_ns = trace.profiler_end_ns
    if start_ns == 0 and end_ns == 0:
        start_ns = min_ns if min_ns is not None else 0
        end_ns = max_ns if max_ns is not None else start_ns
    if end_ns < start_ns:
        end_ns = start_ns
    t_start = format_us(rel(start_ns))

    out: list[str] = []
    w = out.append
    # ---- header ----
    w('\n  {\n    "schemaVersion": 1,')
    w('\n    "deviceProperties": [' + ",".join(_block(d) for d in trace.device_properties) + "\n    ],")
    trace_id = trace.trace_id or _default_trace_id(trace, trace_name)
    w(f'\n      "trace_id": {_dumps(trace_id)},')
    if trace.profile_memory:
        w('\n      "profile_memory": 1,')
    if trace.record_shapes:
        w('\n      "record_shapes": 1,')
    if trace.distributed_info is not None:
        # as torch writes it (Python's json.dumps: `"rank": 0`, with the spaces HTA's rank regex needs)
        w(f'\n      "distributedInfo": {json.dumps(trace.distributed_info, default=_json_default)},')
    w(f'\n      "cuda_driver_version": {int(trace.cuda_driver_version)},')
    w(f'\n      "cuda_runtime_version": {int(trace.cuda_runtime_version)},')
    w(f'\n      "cupti_version": {int(trace.cupti_version)},')
    w(f'\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {int(base)},\n  "traceEvents": [')
    # ---- events ----
    head = len(out)
    out.append("")  # the events' place (bytes from the native renderer: joined below)
    # ---- metadata ----
    pname = trace.process_name
    w(_meta("process_name", t_start, host_pid, 0, "name", pname))
    w(_meta("process_labels", t_start, host_pid, 0, "labels", "CPU"))
    w(_meta("process_sort_index", t_start, host_pid, 0, "sort_index", host_pid))
    devices = set(trace.gpu_streams) | {d for d, _ in used_streams}
    n_dev = max(KINETO_GPU_PIDS, max(devices) + 1 if devices else 0)
    for d in range(n_dev):
        w(_meta("process_name", t_start, d, 0, "name", pname))
        w(_meta("process_labels", t_start, d, 0, "labels", f"GPU {d}"))
        w(_meta("process_sort_index", t_start, d, 0, "sort_index", GPU_SORT_INDEX_BASE + d))
    streams = {(d, s) for d, ss in trace.gpu_streams.items() for s in ss} | used_streams
    for d, s in sorted(streams):
        w(_meta("thread_name", t_start, d, s, "name", f"stream {s} "))
        w(_meta("thread_sort_index", t_start, d, s, "sort_index", s))
    threads = dict(trace.host_threads)
    for tid in sorted(used_threads - set(threads)):
        threads[tid] = f"thread {tid} ({pname})"
    for tid in sorted(threads):
        w(_meta("thread_name", t_start, host_pid, tid, "name", threads[tid]))
        w(_meta("thread_sort_index", t_start, host_pid, tid, "sort_index", tid))
    # ---- profiler span and window markers ----
    w(f'\n  {{\n    "ph": "X", "cat": "Trace", "ts": {t_start}, "dur": {format_us(end_ns - start_ns)},'
      f'\n    "pid": "Spans", "tid": "{PROFILER_SPAN_NAME}",\n    "name": "{PROFILER_SPAN_NAME} (0)",'
      f'\n    "args": {{\n      "Op count": 0\n    }}\n  }},')
    w(f'\n  {{\n    "name": "process_sort_index", "ph": "M", "ts": {t_start},\n    "pid": "Spans", "tid": 0,'
      f'\n    "args": {{\n      "sort_index": {SPANS_SORT_INDEX}\n    }}\n  }},')
    w(f'\n  {{\n    "name": "Iteration Start: {PROFILER_SPAN_NAME}", "ph": "i", "s": "g",'
      f'\n    "pid": "Traces", "tid": "Trace {PROFILER_SPAN_NAME}", "ts": {t_start}\n  }},')
    w(f'\n  {{\n    "name": "Record Window End", "ph": "i", "s": "g",'
      f'\n    "pid": "", "tid": "", "ts": {format_us(rel(end_ns))}\n  }}\n  ],')
    w(f'\n  "traceName": {_dumps(trace_name)}\n}}')
    if isinstance(events, str):
        out[head] = events
        return "".join(out).encode()
    return b"".join(("".join(out[:head]).encode(), events, "".join(out[head + 1:]).encode()))


_native_render: Callable[..., tuple] | None = None


def use_native_renderer(module: Any | None) -> None:
    """Render a trace's events with `module.render_events` (the compiled
    native/kineto/kineto_events.c, the same text as `_render_events_py`, ~3x faster over a whole
    file), or in Python when None. The caller builds the module: this library compiles nothing."""
    global _native_render
    _native_render = getattr(module, "render_events", None) if module is not None else None


def _render_events_py(spans: list, flows: list, instants: list, host_pid: int,
                      shift: int) -> tuple[str, set[tuple[int, int]], set[int], int | None, int | None]:
    """The X, flow and instant events of a trace, sorted as kineto writes them: (their text,
    the GPU streams and host threads they use, the spans' first start and last end). The
    reference for the native renderer (native/kineto/kineto_events.c), which gives the same
    text as UTF-8 bytes."""
    names: dict[str, str] = {}

    def qname(n: str) -> str:
        q = names.get(n)
        if q is None:
            q = names[n] = _dumps(n)
        return q

    def rel(ns: int) -> int:
        t = ns + shift
        return t if t > 0 else 0

    entries: list[tuple] = []
    append = entries.append
    used_streams: set[tuple[int, int]] = set()
    used_threads: set[int] = set()
    min_ns: int | None = None
    max_ns: int | None = None

    for seq, s in enumerate(spans):
        ts = s.ts_ns
        dur = s.dur_ns if s.dur_ns > 0 else 0
        if s.on_gpu:
            pid = s.device
            used_streams.add((s.device, s.tid))
            if s.cat == "gpu_user_annotation":  # kineto: 1 ns earlier, 2 ns longer
                ts -= 1
                dur += 2
        else:
            pid = host_pid
            used_threads.add(s.tid)
        if min_ns is None or ts < min_ns:
            min_ns = ts
        end = ts + dur
        if max_ns is None or end > max_ns:
            max_ns = end
        q, r = divmod(rel(ts), 1000)
        dq, dr = divmod(dur, 1000)
        text = (f'\n  {{\n    "ph": "X", "cat": "{s.cat}", "name": {qname(s.name)}, "pid": {pid}, '
                f'"tid": {s.tid},\n    "ts": {q}.{r:03d}, "dur": {dq}.{dr:03d}'
                f'{_args_field(s.args)}\n  }},')
        append((ts, 0, -dur, seq, text))

    for seq, f in enumerate(flows):
        for ph, end_pt in (("s", f.start), ("f", f.end)):
            if end_pt is None:  # another end of a flow started by an earlier Flow (CUDA graph nodes)
                continue
            if end_pt.on_gpu:
                pid = end_pt.device
                used_streams.add((end_pt.device, end_pt.tid))
            else:
                pid = host_pid
                used_threads.add(end_pt.tid)
            bp = ', "bp": "e"' if ph == "f" else ""
            q, r = divmod(rel(end_pt.ts_ns), 1000)
            text = (f'\n  {{\n    "ph": "{ph}", "id": {f.id}, "pid": {pid}, "tid": {end_pt.tid}, '
                    f'"ts": {q}.{r:03d},\n    "cat": "{f.cat}", "name": "{f.cat}"{bp}\n  }},')
            append((end_pt.ts_ns, 1, 0 if ph == "s" else 1, seq, text))

    for seq, i in enumerate(instants):
        used_threads.add(i.tid)
        q, r = divmod(rel(i.ts_ns), 1000)
        cat = f'"cat": "{i.cat}", ' if i.cat else ""
        text = (f'\n  {{\n    "ph": "i", {cat}"s": "{i.scope}", "name": {qname(i.name)},'
                f'\n    "pid": {host_pid}, "tid": {i.tid},\n    "ts": {q}.{r:03d}'
                f'{_args_field(i.args)}\n  }},')
        append((i.ts_ns, 2, 0, seq, text))

    entries.sort()  # (ts, kind, order, seq) is unique, so the text is never compared
    return "".join(e[4] for e in entries), used_streams, used_threads, min_ns, max_ns




def write_kineto(trace: RankTrace, path: str | Path) -> Path:
    """Write `trace` as torch.profiler's Kineto JSON to `path` (gzipped if it ends in .gz).

    Atomic: the data goes to a temporary file in the same directory, then `os.replace`.
    The same `RankTrace` (and path) always gives the same bytes. Returns the path.
    """
    path = Path(path)
    name = trace.trace_name or str(path)
    data = render_kineto(trace, name)
    if path.name.endswith(".gz"):
        # Deterministic: mtime 0 and no file name in the header (gzip.compress does both).
        data = gzip.compress(data, compresslevel=_GZIP_LEVEL, mtime=0)
    with atomic_file(path) as f:
        f.write(data)
    return path


# ---------------------------------------------------------------------------- reader

def load_trace(path: str | Path) -> dict:
    """Read a Kineto trace (.json or .json.gz; gzip is detected by its magic bytes).

    Raises `TraceFormatError` (a ValueError) naming the file for: a truncated or corrupt
    gzip stream, bytes that are not UTF-8 JSON, JSON whose top level is not an object, and
    an object without a `traceEvents` list. A missing file raises FileNotFoundError.
    """
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except EOFError as e:
            raise TraceFormatError(f"{path}: truncated gzip stream ({e})") from None
        except (gzip.BadGzipFile, zlib.error, OSError) as e:
            raise TraceFormatError(f"{path}: corrupt gzip data ({e})") from None
    elif path.name.endswith(".gz") and raw:
        raise TraceFormatError(f"{path}: name ends in .gz but the file is not gzip data")
    if not raw.strip():
        raise TraceFormatError(f"{path}: empty file, not a JSON trace")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        try:  # the stdlib also accepts NaN / Infinity, which some writers emit
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise TraceFormatError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise TraceFormatError(
            f"{path}: JSON top level is a {type(doc).__name__}, expected an object with 'traceEvents'")
    if "traceEvents" not in doc:
        raise TraceFormatError(f"{path}: JSON object has no 'traceEvents' key (not a Kineto/Chrome trace)")
    if not isinstance(doc["traceEvents"], list):
        raise TraceFormatError(
            f"{path}: 'traceEvents' is a {type(doc['traceEvents']).__name__}, expected a list")
    return doc

