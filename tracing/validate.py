"""Check that a trace has the shape torch.profiler (Kineto) traces have.

`validate_trace(doc, reference=None)` returns human-readable problems ([] = valid);
`validate_file(path, reference_path=None)` loads the file(s) first. Each problem starts with
its rule tag in brackets and names the event (index in traceEvents, ph, cat, name, pid, tid,
ts). At most `max_per_rule` problems are listed per rule, then a count of the rest.

The rules, derived from the H200 reference traces (shared/reference/h200/*, torch 2.11):

Top level
  [top-keys]    keys schemaVersion (=1), deviceProperties (list), trace_id, cuda_driver_version,
                cuda_runtime_version, cupti_version, displayTimeUnit ("ms"/"ns"),
                baseTimeNanoseconds (int), traceEvents (list), traceName; schemaVersion and
                deviceProperties come first, displayTimeUnit, baseTimeNanoseconds, traceEvents,
                traceName last, in that order. record_shapes / profile_memory are 0/1 when
                present; distributedInfo, when present, has backend, rank, world_size, pg_count,
                pg_config (pg_count entries of pg_name, pg_desc, backend_config, pg_size,
                ranks), nccl_version.
  [device-props] every deviceProperties entry has id, name, totalGlobalMem, computeMajor,
                computeMinor, maxThreadsPerBlock, maxThreadsPerMultiprocessor, regsPerBlock,
                warpSize, sharedMemPerBlock, numSms, regsPerMultiprocessor,
                sharedMemPerBlockOptin, sharedMemPerMultiprocessor; ids are unique.
Events
  [event]       every event is an object with ph in X, i, s, f, M; X has a known cat
                (cpu_op, user_annotation, cuda_runtime, cuda_driver, python_function, kernel,
                gpu_memcpy, gpu_memset, gpu_user_annotation, Trace), numeric ts and dur >= 0.
  [field-order] fields in kineto's order: X = ph cat name pid tid ts dur [args]
                (the Trace span: ph cat ts dur pid tid name args); s/f = ph id pid tid ts cat
                name [bp]; M = name ph ts pid tid args; i = ph [cat] s name pid tid ts [args]
                (the two global markers: name ph s pid tid ts).
  [args]        required args per category: cpu_op and user_annotation: External id,
                Record function id, Ev Idx; the record_shapes keys Input Dims, Input type,
                Input Strides, Concrete Inputs come all together or not at all, as lists of one
                length, and when the trace says record_shapes=1 every cpu_op has them except
                `autograd::engine::evaluate_function: *` (kineto records no inputs for those);
                cuda_runtime / cuda_driver: cbid, correlation; kernel: queued, device, context,
                stream, correlation, registers per thread, shared memory, blocks per SM, warps
                per SM, grid, block (3 ints each), est. achieved occupancy %; gpu_memcpy /
                gpu_memset: device, context, stream, correlation, bytes, memory bandwidth (GB/s);
                kernel/memcpy/memset also External id unless their launch has none (kineto
                writes none for work launched outside any op); gpu_user_annotation: External
                id; Trace: Op count; cpu_instant_event [memory]: Total Reserved, Total
                Allocated, Bytes, Device Id, Device Type, Addr, Ev Idx.
  [pid]         host events (host categories, instants) on the host pid (the pid whose
                process_labels is "CPU") with an int tid; GPU events on an int pid labelled
                "GPU N" with an int tid = stream; args.device == pid and args.stream == tid.
  [metadata]    process_name, process_labels and process_sort_index for every int pid used;
                thread_name and thread_sort_index for every GPU stream used and every host
                thread with ops/annotations/instants. Relaxed: a host thread that carries only
                cuda_runtime/cuda_driver events needs no thread metadata (gpt_ddp1's tid
                202205504, only cudaEventQuery / cudaThreadExchangeStreamCaptureMode calls,
                has none: kineto names only the threads that ran profiled ops).
  [profiler-span] one `Trace` span "PyTorch Profiler (0)" on pid "Spans", one "Iteration
                Start: PyTorch Profiler" instant, and "Record Window End" as the last event.
Flows and links
  [flow]        s/f events have an int id, cat ac2g or fwdbwd, name == cat, "bp": "e" on f
                only, and sit on the start (pid, tid, ts) of an X event. fwdbwd: each id has
                one s and one f, s not after f. ac2g: at most one s and one f per id.
  [launch]      every kernel / gpu_memcpy / gpu_memset has a unique correlation and exactly
                one host cuda_runtime/cuda_driver event with that correlation; the launch
                starts no later than the activity (1 ns slack); an ac2g s with
                id = correlation sits on the launch and an ac2g f on the activity; the
                activity's External id equals the launch's.
  [external-id] a launch of GPU work (a cuda_runtime/cuda_driver event whose correlation
                is a kernel's, memcpy's or memset's) nested in a cpu_op/user_annotation on
                its thread has an External id, equal to one of the enclosing ops' External
                ids; a GPU activity's External id equals its launch's and is the External id
                of some host cpu_op/user_annotation; a gpu_user_annotation's External id is a
                host user_annotation's.
  [stream-overlap] kernels, memcpys and memsets on one (device, stream) do not overlap
                (1 ns slack for rounding); gpu_user_annotation spans are containers and exempt.
  [host-nesting] host X spans on one (pid, tid) nest properly: no partial overlap (1 ns slack).
With a reference trace
  [ref-top-keys] the top-level key set equals the reference's, apart from the option keys
                that depend on how the profiler was called (distributedInfo, profile_memory,
                record_shapes, with_stack, with_flops, with_modules).
  [ref-device-props] deviceProperties entries have the reference's key set.
  [ref-args]    for each X category (and instant category) both traces have, every event of
                ours has the args keys every reference event of that category has.

Relaxations, each needed by a reference trace:
- [external-id] applies to launches of GPU work only. Other runtime calls inside ops
  (cudaDeviceSynchronize, cudaStreamIsCapturing, cudaEventRecord(WithFlags),
  cudaStreamWaitEvent, cudaEventSynchronize, cudaEventQuery, "INVALID") carry no External
  id in all five references even when nested in ProfilerStep#N or an optimizer op.
- [stream-overlap]: cuBLASLt's `splitKreduce_kernel` may start up to 2 us before the
  split-K GEMM before it on the stream ends: it is launched with programmatic dependent
  launch (gpt_b32: 144 such overlaps, at most 0.96 us). No other kernel may overlap.
- [metadata]: runtime-only host threads need no thread_name (gpt_ddp1's tid 202205504).
- [flow]: ac2g ends without a start (kineto puts an `f` on synchronous runtime calls such
  as cudaEventQuery/cudaEventSynchronize/cudaStreamIsCapturing) and starts without an end
  (cudaStreamWaitEvent, cudaDeviceSynchronize) are allowed; every flow event must still
  sit on an X event.
- [args]: record_shapes keys are not required on `autograd::engine::evaluate_function: *`
  cpu_ops (none of the references has them there); a GPU activity launched outside any op
  may lack External id together with its launch.
The profiler-window edge cases one might expect (GPU work whose launch fell before the
window, kernels without a launch) do not occur in the references: [launch] is strict.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from tracing.kineto import load_trace

__all__ = ["validate_trace", "validate_file", "HOST_X_CATEGORIES", "GPU_X_CATEGORIES"]

HOST_X_CATEGORIES = frozenset({"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function"})
GPU_ACTIVITY_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
GPU_X_CATEGORIES = GPU_ACTIVITY_CATEGORIES | {"gpu_user_annotation"}
X_CATEGORIES = HOST_X_CATEGORIES | GPU_X_CATEGORIES | {"Trace"}
OP_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
FLOW_CATEGORIES = frozenset({"ac2g", "fwdbwd"})

REQUIRED_TOP = ("schemaVersion", "deviceProperties", "trace_id", "cuda_driver_version",
                "cuda_runtime_version", "cupti_version", "displayTimeUnit", "baseTimeNanoseconds",
                "traceEvents", "traceName")
OPTIONAL_TOP = frozenset({"distributedInfo", "profile_memory", "record_shapes", "with_stack",
                          "with_flops", "with_modules"})
DEVICE_PROPERTY_KEYS = ("id", "name", "totalGlobalMem", "computeMajor", "computeMinor",
                        "maxThreadsPerBlock", "maxThreadsPerMultiprocessor", "regsPerBlock",
                        "warpSize", "sharedMemPerBlock", "numSms", "regsPerMultiprocessor",
                        "sharedMemPerBlockOptin", "sharedMemPerMultiprocessor")
DIST_INFO_KEYS = ("backend", "rank", "world_size", "pg_count", "pg_config", "nccl_version")
PG_CONFIG_KEYS = ("pg_name", "pg_desc", "backend_config", "pg_size", "ranks")

SHAPE_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
REQUIRED_ARGS: dict[str, tuple[str, ...]] = {
    "cpu_op": ("External id", "Record function id", "Ev Idx"),
    "user_annotation": ("External id", "Record function id", "Ev Idx"),
    "cuda_runtime": ("cbid", "correlation"),
    "cuda_driver": ("cbid", "correlation"),
    "kernel": ("queued", "device", "context", "stream", "correlation", "registers per thread",
               "shared memory", "blocks per SM", "warps per SM", "grid", "block",
               "est. achieved occupancy %"),
    "gpu_memcpy": ("device", "context", "stream", "correlation", "bytes", "memory bandwidth (GB/s)"),
    "gpu_memset": ("device", "context", "stream", "correlation", "bytes", "memory bandwidth (GB/s)"),
    "gpu_user_annotation": ("External id",),
    "Trace": ("Op count",),
}
MEMORY_INSTANT_ARGS = ("Total Reserved", "Total Allocated", "Bytes", "Device Id", "Device Type",
                       "Addr", "Ev Idx")
NO_SHAPES_PREFIX = "autograd::engine::evaluate_function"

X_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur")
TRACE_FIELDS = ("ph", "cat", "ts", "dur", "pid", "tid", "name", "args")
FLOW_FIELDS = ("ph", "id", "pid", "tid", "ts", "cat", "name")
M_FIELDS = ("name", "ph", "ts", "pid", "tid", "args")
GLOBAL_I_FIELDS = ("name", "ph", "s", "pid", "tid", "ts")
PROFILER_SPAN = "PyTorch Profiler (0)"
ITERATION_START = "Iteration Start: PyTorch Profiler"
WINDOW_END = "Record Window End"

EPS_NS = 1
# Kernels that cuBLASLt launches with programmatic dependent launch (PDL): on Hopper they
# start up to ~1 us before the GEMM before them on the stream ends (gpt_b32: 144 cases,
# at most 0.96 us). Only these may overlap their predecessor, and by at most this much.
PDL_KERNELS = ("splitKreduce_kernel",)
PDL_MAX_OVERLAP_NS = 2000


class _Problems:
    def __init__(self, max_per_rule: int):
        self.max = max_per_rule
        self.items: list[str] = []
        self.counts: dict[str, int] = defaultdict(int)

    def add(self, rule: str, msg: str) -> None:
        n = self.counts[rule] = self.counts[rule] + 1
        if n <= self.max:
            self.items.append(f"[{rule}] {msg}")

    def result(self) -> list[str]:
        out = list(self.items)
        for rule, n in self.counts.items():
            if n > self.max:
                out.append(f"[{rule}] ... and {n - self.max} more problems of this kind")
        return out


def _desc(i: int, e: dict) -> str:
    name = e.get("name")
    if isinstance(name, str) and len(name) > 100:
        name = name[:97] + "..."
    cat = e.get("cat")
    what = f"{e.get('ph')} {cat}" if cat is not None else f"{e.get('ph')}"
    return f"event #{i} ({what} {name!r}, pid {e.get('pid')!r}, tid {e.get('tid')!r}, ts {e.get('ts')!r})"


def _ns(x: Any) -> int:
    return round(x * 1000)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_top(doc: dict, p: _Problems) -> None:
    keys = list(doc)
    for k in REQUIRED_TOP:
        if k not in doc:
            p.add("top-keys", f"missing top-level key {k!r}")
    if doc.get("schemaVersion", 1) != 1:
        p.add("top-keys", f"schemaVersion is {doc.get('schemaVersion')!r}, expected 1")
    if keys[:2] != ["schemaVersion", "deviceProperties"] and all(k in doc for k in REQUIRED_TOP[:2]):
        p.add("top-keys", f"top level must start with schemaVersion, deviceProperties; got {keys[:2]}")
    tail = ["displayTimeUnit", "baseTimeNanoseconds", "traceEvents", "traceName"]
    if all(k in doc for k in tail) and keys[-4:] != tail:
        p.add("top-keys", f"top level must end with {tail}; got {keys[-4:]}")
    if "displayTimeUnit" in doc and doc["displayTimeUnit"] not in ("ms", "ns"):
        p.add("top-keys", f"displayTimeUnit is {doc['displayTimeUnit']!r}, expected 'ms' or 'ns'")
    if "baseTimeNanoseconds" in doc and not _is_int(doc["baseTimeNanoseconds"]):
        p.add("top-keys", f"baseTimeNanoseconds is {doc['baseTimeNanoseconds']!r}, expected an int")
    for k in ("cuda_driver_version", "cuda_runtime_version", "cupti_version"):
        if k in doc and not _is_int(doc[k]):
            p.add("top-keys", f"{k} is {doc[k]!r}, expected an int")
    for k in ("trace_id", "traceName"):
        if k in doc and not isinstance(doc[k], str):
            p.add("top-keys", f"{k} is {doc[k]!r}, expected a string")
    for k in ("record_shapes", "profile_memory"):
        if k in doc and doc[k] not in (0, 1):
            p.add("top-keys", f"{k} is {doc[k]!r}, expected 0 or 1")
    if "distributedInfo" in doc:
        di = doc["distributedInfo"]
        if not isinstance(di, dict):
            p.add("top-keys", f"distributedInfo is a {type(di).__name__}, expected an object")
        else:
            for k in DIST_INFO_KEYS:
                if k not in di:
                    p.add("top-keys", f"distributedInfo has no {k!r}")
            pgs = di.get("pg_config")
            if isinstance(pgs, list):
                if di.get("pg_count") != len(pgs):
                    p.add("top-keys", f"distributedInfo pg_count {di.get('pg_count')!r} != {len(pgs)} pg_config entries")
                for j, pg in enumerate(pgs):
                    missing = [k for k in PG_CONFIG_KEYS if not isinstance(pg, dict) or k not in pg]
                    if missing:
                        p.add("top-keys", f"distributedInfo pg_config[{j}] lacks {missing}")
            elif "pg_config" in di:
                p.add("top-keys", "distributedInfo pg_config is not a list")
    props = doc.get("deviceProperties")
    if props is not None:
        if not isinstance(props, list):
            p.add("device-props", f"deviceProperties is a {type(props).__name__}, expected a list")
        else:
            seen = set()
            for j, d in enumerate(props):
                if not isinstance(d, dict):
                    p.add("device-props", f"deviceProperties[{j}] is not an object")
                    continue
                missing = [k for k in DEVICE_PROPERTY_KEYS if k not in d]
                if missing:
                    p.add("device-props", f"deviceProperties[{j}] lacks {missing}")
                if d.get("id") in seen:
                    p.add("device-props", f"deviceProperties[{j}] repeats id {d.get('id')!r}")
                seen.add(d.get("id"))


def _check_reference(doc: dict, ref: dict, xs_by_cat: dict[str, list], inst_by_cat: dict[str, list],
                     p: _Problems) -> None:
    ours = set(doc) - OPTIONAL_TOP
    theirs = set(ref) - OPTIONAL_TOP
    if ours != theirs:
        p.add("ref-top-keys", f"top-level keys differ from the reference: missing {sorted(theirs - ours)}, "
                              f"extra {sorted(ours - theirs)}")
    ref_props = ref.get("deviceProperties") or []
    ref_keys = set().union(*(set(d) for d in ref_props if isinstance(d, dict))) if ref_props else set()
    for j, d in enumerate(doc.get("deviceProperties") or []):
        if isinstance(d, dict) and ref_keys and set(d) != ref_keys:
            p.add("ref-device-props", f"deviceProperties[{j}] keys differ from the reference: missing "
                                      f"{sorted(ref_keys - set(d))}, extra {sorted(set(d) - ref_keys)}")
    # Required args per category = the keys every reference event of that category has.
    ref_required: dict[tuple[str, str], frozenset] = {}
    for e in ref.get("traceEvents") or []:
        if not isinstance(e, dict) or e.get("ph") not in ("X", "i") or "cat" not in e:
            continue
        key = (e["ph"], e["cat"])
        a = e.get("args")
        ks = frozenset(a) if isinstance(a, dict) else frozenset()
        prev = ref_required.get(key)
        ref_required[key] = ks if prev is None else prev & ks
    for (ph, cat), req in ref_required.items():
        ours_events = (xs_by_cat if ph == "X" else inst_by_cat).get(cat, ())
        for i, e in ours_events:
            a = e.get("args")
            missing = req - set(a) if isinstance(a, dict) else req
            if missing:
                p.add("ref-args", f"{_desc(i, e)} lacks args {sorted(missing)} that every reference {cat} event has")


def validate_trace(doc: dict, reference: dict | None = None, *, max_per_rule: int = 20) -> list[str]:
    """Problems with `doc` as a torch.profiler trace; [] means it passes every rule."""
    p = _Problems(max_per_rule)
    if not isinstance(doc, dict):
        return [f"[top-keys] trace is a {type(doc).__name__}, expected a JSON object"]
    _check_top(doc, p)
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        if "traceEvents" in doc:
            p.add("top-keys", "traceEvents is not a list")
        return p.result()
    record_shapes = doc.get("record_shapes") == 1

    # ---- pass 1: classify, per-event checks ----
    proc_meta: dict[Any, set[str]] = defaultdict(set)
    thread_meta: dict[tuple, set[str]] = defaultdict(set)
    labels: dict[Any, str] = {}
    xs: list[tuple[int, dict]] = []
    xs_by_cat: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    inst_by_cat: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    flows: list[tuple[int, dict]] = []
    instants: list[tuple[int, dict]] = []
    trace_spans = 0
    iteration_starts = 0
    last_index = len(events) - 1
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            p.add("event", f"event #{i} is a {type(e).__name__}, expected an object")
            continue
        ph = e.get("ph")
        if ph == "X":
            cat = e.get("cat")
            keys = tuple(e)
            if cat == "Trace":
                if keys != TRACE_FIELDS:
                    p.add("field-order", f"{_desc(i, e)} has fields {list(keys)}, expected {list(TRACE_FIELDS)}")
                trace_spans += 1
                if e.get("pid") != "Spans" or e.get("name") != PROFILER_SPAN:
                    p.add("profiler-span", f"{_desc(i, e)}: the Trace span must be {PROFILER_SPAN!r} on pid 'Spans'")
            elif keys[:7] != X_FIELDS or len(keys) > 8 or (len(keys) == 8 and keys[7] != "args"):
                p.add("field-order", f"{_desc(i, e)} has fields {list(keys)}, expected {list(X_FIELDS) + ['args']}")
            if cat not in X_CATEGORIES:
                p.add("event", f"{_desc(i, e)} has unknown category {cat!r}")
                continue
            ts, dur = e.get("ts"), e.get("dur")
            if not _is_num(ts) or not _is_num(dur):
                p.add("event", f"{_desc(i, e)} needs numeric ts and dur, got ts={ts!r} dur={dur!r}")
                continue
            if dur < 0:
                p.add("event", f"{_desc(i, e)} has negative dur {dur}")
            if not isinstance(e.get("name"), str):
                p.add("event", f"{_desc(i, e)} has no string name")
            xs.append((i, e))
            xs_by_cat[cat].append((i, e))
        elif ph in ("s", "f"):
            keys = tuple(e)
            expected = FLOW_FIELDS + (("bp",) if ph == "f" else ())
            if keys != expected:
                p.add("field-order", f"{_desc(i, e)} has fields {list(keys)}, expected {list(expected)}")
            flows.append((i, e))
        elif ph == "M":
            if tuple(e) != M_FIELDS:
                p.add("field-order", f"{_desc(i, e)} has fields {list(e)}, expected {list(M_FIELDS)}")
            name = e.get("name")
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            pid, tid = e.get("pid"), e.get("tid")
            if name in ("process_name", "process_labels", "process_sort_index"):
                proc_meta[pid].add(name)
                if name == "process_labels":
                    labels[pid] = args.get("labels")
            elif name in ("thread_name", "thread_sort_index"):
                thread_meta[(pid, tid)].add(name)
            else:
                p.add("metadata", f"{_desc(i, e)} is an unknown metadata event")
        elif ph == "i":
            name = e.get("name")
            if e.get("s") == "g" and name in (ITERATION_START, WINDOW_END):
                if tuple(e) != GLOBAL_I_FIELDS:
                    p.add("field-order", f"{_desc(i, e)} has fields {list(e)}, expected {list(GLOBAL_I_FIELDS)}")
                if name == ITERATION_START:
                    iteration_starts += 1
                elif i != last_index:
                    p.add("profiler-span", f"{_desc(i, e)}: {WINDOW_END!r} must be the last event")
                continue
            keys = tuple(e)
            expected = ("ph", "cat", "s", "name", "pid", "tid", "ts") if "cat" in e else ("ph", "s", "name", "pid", "tid", "ts")
            if keys[:len(expected)] != expected or keys[len(expected):] not in ((), ("args",)):
                p.add("field-order", f"{_desc(i, e)} has fields {list(keys)}, expected {list(expected) + ['args']}")
            if not _is_num(e.get("ts")):
                p.add("event", f"{_desc(i, e)} needs a numeric ts")
                continue
            instants.append((i, e))
            inst_by_cat[e.get("cat", "")].append((i, e))
        else:
            p.add("event", f"{_desc(i, e)} has unknown ph {ph!r}")
    if trace_spans != 1:
        p.add("profiler-span", f"expected one 'Trace' span {PROFILER_SPAN!r}, found {trace_spans}")
    if iteration_starts != 1:
        p.add("profiler-span", f"expected one {ITERATION_START!r} instant, found {iteration_starts}")
    if not events or not isinstance(events[-1], dict) or events[-1].get("name") != WINDOW_END:
        p.add("profiler-span", f"the last event must be the {WINDOW_END!r} instant")

    host_pids = [pid for pid, lab in labels.items() if lab == "CPU"]
    gpu_pids = {pid for pid, lab in labels.items() if isinstance(lab, str) and lab.startswith("GPU ")}
    if len(host_pids) != 1:
        p.add("metadata", f"expected one process labelled 'CPU' (the host), found {len(host_pids)}")
    host_pid = host_pids[0] if host_pids else None

    # ---- pass 2: X events: args, pids ----
    ext_ops: set = set()
    ua_ext: set = set()
    launches: dict[Any, list[tuple[int, dict]]] = defaultdict(list)
    activities: list[tuple[int, dict]] = []
    host_threads: dict[tuple, list] = defaultdict(list)  # (pid, tid) -> [(ts_ns, end_ns, i, e)]
    streams: dict[tuple, list] = defaultdict(list)
    ops_threads: set = set()
    x_starts: set[tuple] = set()
    graph_launches: set[tuple] = set()  # (pid, tid, ts) of cudaGraphLaunch calls: one flow start, an end per kernel
    for i, e in xs:
        cat = e["cat"]
        if cat == "Trace":
            a = e.get("args")
            if not isinstance(a, dict) or "Op count" not in a:
                p.add("args", f"{_desc(i, e)} lacks args ['Op count']")
            continue
        pid, tid = e.get("pid"), e.get("tid")
        a = e.get("args")
        if a is None:
            a = {}
        if not isinstance(a, dict):
            p.add("args", f"{_desc(i, e)} has args that are not an object")
            a = {}
        req = REQUIRED_ARGS.get(cat, ())
        missing = [k for k in req if k not in a]
        if missing:
            p.add("args", f"{_desc(i, e)} lacks args {missing}")
        ts_ns = _ns(e["ts"])
        end_ns = ts_ns + _ns(e["dur"])
        x_starts.add((pid, tid, ts_ns))
        if e.get("name") == "cudaGraphLaunch":
            graph_launches.add((pid, tid, ts_ns))
        if cat in HOST_X_CATEGORIES:
            if pid != host_pid or not _is_int(tid):
                p.add("pid", f"{_desc(i, e)}: host event must be on the host pid {host_pid!r} with an int tid")
            host_threads[(pid, tid)].append((ts_ns, end_ns, i, e))
            if cat in OP_CATEGORIES:
                ops_threads.add((pid, tid))
                if "External id" in a:
                    ext_ops.add(a["External id"])
                    if cat == "user_annotation":
                        ua_ext.add(a["External id"])
                present = [k for k in SHAPE_KEYS if k in a]
                if present and len(present) != 4:
                    p.add("args", f"{_desc(i, e)} has {present} but not all of {list(SHAPE_KEYS)}")
                elif present:
                    lens = {len(a[k]) if isinstance(a[k], list) else -1 for k in SHAPE_KEYS}
                    if len(lens) != 1 or -1 in lens:
                        p.add("args", f"{_desc(i, e)}: {list(SHAPE_KEYS)} must be lists of one length")
                elif (record_shapes and cat == "cpu_op"
                      and not e.get("name", "").startswith(NO_SHAPES_PREFIX)):
                    p.add("args", f"{_desc(i, e)} lacks args {list(SHAPE_KEYS)} (trace has record_shapes=1)")
            elif cat in LAUNCH_CATEGORIES and "correlation" in a:
                launches[a["correlation"]].append((i, e))
        else:  # GPU
            if not _is_int(pid) or pid not in gpu_pids or not _is_int(tid):
                p.add("pid", f"{_desc(i, e)}: GPU event must be on a GPU pid (a process labelled 'GPU N') "
                             f"with an int stream tid")
            if cat != "gpu_user_annotation":
                if "device" in a and a["device"] != pid:
                    p.add("pid", f"{_desc(i, e)}: args.device {a['device']!r} != pid {pid!r}")
                if "stream" in a and a["stream"] != tid:
                    p.add("pid", f"{_desc(i, e)}: args.stream {a['stream']!r} != tid {tid!r}")
                if cat == "kernel":
                    for k in ("grid", "block"):
                        v = a.get(k)
                        if k in a and not (isinstance(v, list) and len(v) == 3 and all(_is_int(x) for x in v)):
                            p.add("args", f"{_desc(i, e)}: args.{k} must be 3 ints, got {v!r}")
                activities.append((i, e))
                streams[(pid, tid)].append((ts_ns, end_ns, i, e))
            # gpu_user_annotation spans contain the stream's kernels: no overlap check

    for i, e in instants:
        if e.get("pid") != host_pid or not _is_int(e.get("tid")):
            p.add("pid", f"{_desc(i, e)}: instant event must be on the host pid {host_pid!r} with an int tid")
        else:
            ops_threads.add((e["pid"], e["tid"]))
        if e.get("cat") == "cpu_instant_event" and e.get("name") == "[memory]":
            a = e.get("args") if isinstance(e.get("args"), dict) else {}
            missing = [k for k in MEMORY_INSTANT_ARGS if k not in a]
            if missing:
                p.add("args", f"{_desc(i, e)} lacks args {missing}")

    # ---- metadata coverage ----
    used_pids = {e.get("pid") for _, e in xs if _is_int(e.get("pid"))}
    used_pids |= {e.get("pid") for _, e in flows if _is_int(e.get("pid"))}
    used_pids |= {e.get("pid") for _, e in instants if _is_int(e.get("pid"))}
    for pid in sorted(used_pids):
        missing = {"process_name", "process_labels", "process_sort_index"} - proc_meta.get(pid, set())
        if missing:
            p.add("metadata", f"pid {pid} is used but has no {sorted(missing)} metadata event")
    need_threads = set(streams) | {(e.get("pid"), e.get("tid")) for _, e in xs_by_cat.get("gpu_user_annotation", ())}
    need_threads |= ops_threads
    for key in sorted(need_threads, key=repr):
        missing = {"thread_name", "thread_sort_index"} - thread_meta.get(key, set())
        if missing:
            p.add("metadata", f"(pid {key[0]!r}, tid {key[1]!r}) is used but has no {sorted(missing)} metadata event")

    # ---- flows ----
    flow_ends: dict[tuple[str, Any], dict[str, list]] = defaultdict(lambda: {"s": [], "f": []})
    for i, e in flows:
        cat, ph = e.get("cat"), e.get("ph")
        if cat not in FLOW_CATEGORIES or e.get("name") != cat:
            p.add("flow", f"{_desc(i, e)}: flow cat/name must be 'ac2g' or 'fwdbwd' (name == cat)")
            continue
        if not _is_int(e.get("id")):
            p.add("flow", f"{_desc(i, e)}: flow id {e.get('id')!r} is not an int")
            continue
        if ph == "f" and e.get("bp") != "e":
            p.add("flow", f"{_desc(i, e)}: flow end needs \"bp\": \"e\"")
        if not _is_num(e.get("ts")):
            p.add("flow", f"{_desc(i, e)}: flow needs a numeric ts")
            continue
        ts_ns = _ns(e["ts"])
        if (e.get("pid"), e.get("tid"), ts_ns) not in x_starts:
            p.add("flow", f"{_desc(i, e)}: no X event starts at this (pid, tid, ts) to bind the flow to")
        flow_ends[(cat, e["id"])][ph].append((i, e, ts_ns))
    for (cat, fid), ends in flow_ends.items():
        ss, fs = ends["s"], ends["f"]
        if cat == "fwdbwd":
            if len(ss) != 1 or len(fs) != 1:
                i, e, _ = (ss or fs)[0]
                p.add("flow", f"fwdbwd flow id {fid} has {len(ss)} start(s) and {len(fs)} end(s), "
                              f"expected one each (first: {_desc(i, e)})")
            elif ss[0][2] > fs[0][2] + EPS_NS:
                p.add("flow", f"fwdbwd flow id {fid} starts after it ends: {_desc(ss[0][0], ss[0][1])}")
        elif len(ss) > 1 or (len(fs) > 1 and not (
                len(ss) == 1 and (ss[0][1].get("pid"), ss[0][1].get("tid"), ss[0][2]) in graph_launches)):
            i, e, _ = (ss + fs)[0]
            p.add("flow", f"ac2g flow id {fid} has {len(ss)} starts and {len(fs)} ends, expected at most "
                          f"one each (first: {_desc(i, e)})")

    # ---- host nesting; enclosing ops of each launch ----
    enclosing_ext: dict[int, list] = {}  # event index of launch -> External ids of enclosing ops
    for key, spans in host_threads.items():
        spans.sort(key=lambda s: (s[0], -s[1], s[2]))
        stack: list[tuple] = []
        for s in spans:
            ts_ns, end_ns, i, e = s
            while stack and stack[-1][1] <= ts_ns + EPS_NS:
                stack.pop()
            if stack and end_ns > stack[-1][1] + EPS_NS:
                top = stack[-1]
                p.add("host-nesting", f"{_desc(i, e)} partially overlaps {_desc(top[2], top[3])} on the same thread "
                                      f"(ends {(end_ns - top[1]) / 1000:.3f} us after it)")
            if e["cat"] in LAUNCH_CATEGORIES:
                ops = [t[3] for t in stack if t[3]["cat"] in OP_CATEGORIES]
                if ops:
                    enclosing_ext[i] = [o.get("args", {}).get("External id") for o in ops]
            stack.append(s)
    activity_corrs = {(e.get("args") or {}).get("correlation") for _, e in activities}
    for i, exts in enclosing_ext.items():
        e = events[i]
        a = e.get("args") or {}
        if a.get("correlation") not in activity_corrs:
            continue  # not a launch of GPU work (sync, event record, ...): kineto links none
        if "External id" not in a:
            p.add("external-id", f"{_desc(i, e)} is nested in an op (External id {exts[-1]!r}) but has no External id")
        elif a["External id"] not in exts:
            p.add("external-id", f"{_desc(i, e)} has External id {a['External id']!r}, not one of its enclosing "
                                 f"ops' {exts}")
    for i, e in xs_by_cat.get("gpu_user_annotation", ()):
        ext = (e.get("args") or {}).get("External id")
        if ext is not None and ext not in ua_ext:
            p.add("external-id", f"{_desc(i, e)} has External id {ext!r}, which no host user_annotation has")

    # ---- GPU stream serialization ----
    for key, spans in streams.items():
        spans.sort(key=lambda s: (s[0], s[1], s[2]))
        prev = None
        for s in spans:
            if prev is not None and s[0] < prev[1] - EPS_NS and not (
                    prev[1] - s[0] <= PDL_MAX_OVERLAP_NS
                    and any(k in s[3].get("name", "") for k in PDL_KERNELS)):
                p.add("stream-overlap", f"{_desc(s[2], s[3])} starts {(prev[1] - s[0]) / 1000:.3f} us before "
                                        f"{_desc(prev[2], prev[3])} ends on the same stream")
            if prev is None or s[1] > prev[1]:
                prev = s

    # ---- launches and ac2g links of GPU activities ----
    seen_corr: dict[Any, int] = {}
    for i, e in activities:
        a = e.get("args") or {}
        corr = a.get("correlation")
        if corr is None:
            continue  # reported by [args]
        ls = launches.get(corr, ())
        graph_node = len(ls) == 1 and ls[0][1].get("name") == "cudaGraphLaunch"
        if corr in seen_corr:
            if not graph_node:  # one cudaGraphLaunch launches every node of its graph
                p.add("launch", f"{_desc(i, e)} repeats correlation {corr!r} of event #{seen_corr[corr]}")
            continue
        seen_corr[corr] = i
        if len(ls) != 1:
            p.add("launch", f"{_desc(i, e)} has {len(ls)} host cuda_runtime/cuda_driver launches with correlation "
                            f"{corr!r}, expected exactly one")
            continue
        li, le = ls[0]
        la = le.get("args") or {}
        ts_ns = _ns(e["ts"])
        lts_ns = _ns(le["ts"])
        if "External id" not in la and "External id" not in a:
            pass  # launched outside any op: kineto writes no External id on either
        elif "External id" not in a:
            p.add("args", f"{_desc(i, e)} lacks args ['External id'] (its launch has one)")
        if lts_ns > ts_ns + EPS_NS:
            p.add("launch", f"{_desc(i, e)} starts before its launch {_desc(li, le)}")
        if "External id" in a and a["External id"] not in ext_ops:
            p.add("external-id", f"{_desc(i, e)} has External id {a['External id']!r}, which no host "
                                 f"cpu_op/user_annotation has")
        if "External id" in la:
            if a.get("External id") != la["External id"]:
                p.add("external-id", f"{_desc(i, e)} has External id {a.get('External id')!r}, its launch "
                                     f"{_desc(li, le)} has {la['External id']!r}")
        ends = flow_ends.get(("ac2g", corr))
        s_ok = ends is not None and any((fe.get("pid"), fe.get("tid"), t) == (le.get("pid"), le.get("tid"), lts_ns)
                                        for _, fe, t in ends["s"])
        f_ok = ends is not None and any((fe.get("pid"), fe.get("tid"), t) == (e.get("pid"), e.get("tid"), ts_ns)
                                        for _, fe, t in ends["f"])
        if not s_ok:
            p.add("launch", f"{_desc(i, e)}: no ac2g flow start with id {corr!r} on its launch {_desc(li, le)}")
        if not f_ok:
            p.add("launch", f"{_desc(i, e)}: no ac2g flow end with id {corr!r} on it")

    if reference is not None:
        _check_reference(doc, reference, xs_by_cat, inst_by_cat, p)
    return p.result()


def validate_file(path: str | Path, reference_path: str | Path | None = None, *,
                  max_per_rule: int = 20) -> list[str]:
    """Load `path` (and the reference) and validate. An unreadable trace is reported as a
    problem; an unreadable reference raises `TraceFormatError`."""
    from tracing.kineto import TraceFormatError

    reference = load_trace(reference_path) if reference_path is not None else None
    try:
        doc = load_trace(path)
    except TraceFormatError as e:
        return [f"[file] {e}"]
    return validate_trace(doc, reference, max_per_rule=max_per_rule)
