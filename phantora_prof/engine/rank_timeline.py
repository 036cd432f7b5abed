"""One rank's simulated timeline: turns the rank's messages into GPU activity and trace events.

Host spans come straight from the rank (its virtual clock already includes host costs);
GPU activities are scheduled on the `SimulatedGpu` streams; launches, flows and
annotations are laid out here so the Kineto writer only has to format them.
"""
from __future__ import annotations

import bisect
import logging
import statistics
from array import array
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson

from phantora_prof import hostcost
from phantora_prof.cost.gpus import DEFAULT_GPU
from phantora_prof.cost.profiles import GpuProfile, load_profile
from phantora_prof.cost.roofline import contiguous_strides
from phantora_prof.engine.contention import GpuContention, InFlight, kernel_category
from phantora_prof.engine import collector, host_layout, op_children
from phantora_prof.engine.gpu import SimulatedGpu
from phantora_prof.engine.kineto_args import shape_args
from phantora_prof.protocol import (
    Annotation,
    AutogradSpan,
    EventElapsedRequest,
    EventQueryRequest,
    EventRecord,
    MemoryCounters,
    ProfilerStarted,
    HostOps,
    MemoryEvent,
    HIDDEN_DEPTH,
    OpCall,
    ProfileExportRequest,
    ProfileStatsRequest,
    StreamCreated,
    StreamWaitEvent,
    SyncKind,
    SyncRequest,
    TensorArg,
)
from tracing.model import Flow, FlowEnd, Instant, RankTrace, Span

log = logging.getLogger(__name__)

_EVALUATE_FUNCTION = "autograd::engine::evaluate_function: "
_CUDNN_SDPA = "cudnn_generated_fort_native_sdpa"  # cuDNN's attention kernels (a longer gap before them in a graph)

_GPU_CATEGORY = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
_SYNC_API = {
    SyncKind.DEVICE: "cudaDeviceSynchronize",
    SyncKind.STREAM: "cudaStreamSynchronize",
    SyncKind.EVENT: "cudaEventSynchronize",
}


@lru_cache(maxsize=None)
def _api_kind(name: str) -> tuple[str, int]:
    """A CUDA API call's trace category and kineto callback id (a handful of names)."""
    return ("cuda_driver" if name in hostcost.DRIVER_APIS else "cuda_runtime"), hostcost.CBID.get(name, 0)


@dataclass
class RankStats:
    ops: int = 0
    kernels: int = 0
    memcpys: int = 0
    memsets: int = 0
    gpu_ns: int = 0
    host_end_ns: int = 0
    flops: float = 0.0
    estimated_ops: dict[str, int] = field(default_factory=dict)  # GPU ns by kernel-time source
    sync_wait_ns: int = 0  # host time spent blocked in synchronizations (a full launch queue too), beyond their API cost


def _union_ns(intervals) -> int:
    """Length of the union of (start, end) intervals."""
    busy = 0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    return busy


@dataclass(frozen=True)
class StepMark:
    """Where an optimizer step of the script ended: its host time, when the GPU work launched
    up to then ends, and the GPU time per kernel-time source launched up to then."""
    name: str
    host_ns: int
    gpu_end_ns: int
    sources: dict
    sync_wait_ns: int  # the host's time blocked in synchronizations up to here

    @property
    def done_ns(self) -> int:
        """When the step is over on both sides (the host's range closed, its GPU work done)."""
        return max(self.host_ns, self.gpu_end_ns)


@dataclass(frozen=True)
class StepWindow:
    """The script's steps after its first optimizer step: what a per-step estimate describes
    (the first step holds start-up: model construction, uploads, warm-up)."""
    start_ns: int
    end_ns: int
    steps: int
    busy_ns: int      # union of GPU work inside [start_ns, end_ns]
    sources: dict     # GPU ns per kernel-time source launched in the window
    host_busy_ns: int  # the host's own time over the same steps: its time between the step ends, less its waits
    intervals_ns: tuple[int, ...] = ()  # each step's time: from one optimizer step's end to the next's

    @property
    def per_step_ns(self) -> float:
        """The median step: one-off pauses (an evaluation, a checkpoint, a sleep, a compile in the
        middle of the run) do not move it, as they move the window's mean (mean_step_ns)."""
        if not self.intervals_ns:
            return self.mean_step_ns
        return float(statistics.median(self.intervals_ns))

    @property
    def mean_step_ns(self) -> float:
        return (self.end_ns - self.start_ns) / self.steps


OPTIMIZER_STEP_PREFIX = "Optimizer.step#"  # torch.optim's record_function range around step()


@dataclass(slots=True)
class _GpuWork:
    launch_ns: int
    start_ns: int
    end_ns: int
    stream: int
    device: int


class _MemorySeries:
    """A rank's GPU memory samples (host_ns, allocated, reserved) per device, in compact arrays.
    Past `limit` samples on a device, neighbours are merged in pairs keeping the one with the
    larger allocation, so the peaks stay and a long run holds a bounded amount."""

    def __init__(self, limit: int = 1 << 15):
        self.limit = limit
        self._dev: dict[int, tuple[array, array, array]] = {}

    def add(self, samples: list) -> None:
        for t, d, allocated, reserved in samples:
            cols = self._dev.get(d)
            if cols is None:
                cols = self._dev[d] = (array("q"), array("q"), array("q"))
            cols[0].append(t)
            cols[1].append(allocated)
            cols[2].append(reserved)
            if len(cols[0]) > self.limit:
                self._dev[d] = self._halve(cols)

    @staticmethod
    def _halve(cols: tuple[array, array, array]) -> tuple[array, array, array]:
        ts, al, re = cols
        out = (array("q"), array("q"), array("q"))
        for i in range(0, len(ts), 2):
            j = i + 1 if i + 1 < len(ts) and al[i + 1] >= al[i] else i
            out[0].append(ts[j])
            out[1].append(al[j])
            out[2].append(re[j])
        return out

    def samples(self) -> list[tuple[int, int, int, int]]:
        """All samples, (host_ns, device, allocated, reserved) in time order."""
        out = [(t, d, a, r) for d, (ts, al, re) in self._dev.items() for t, a, r in zip(ts, al, re)]
        out.sort()
        return out
def _graph_launches_in_ops(spans: list[Span], host: list[Span]) -> None:
    """A cudaGraphLaunch (and every kernel it launched) takes the External id of the innermost
    host op (cpu_op, not a user annotation) around it, as kineto links runtime calls to the op
    they run in (the autograd Function of a compiled graph); the replay itself is no op."""
    launches = [s for s in spans if s.cat == "cuda_runtime" and s.name == "cudaGraphLaunch"]
    if not launches:
        return
    by_tid: dict[int, list[Span]] = {}
    for h in host:
        by_tid.setdefault(h.tid, []).append(h)
    starts = {tid: [h.ts_ns for h in hs] for tid, hs in by_tid.items()}
    ext_of: dict[int, Any] = {}
    for launch in launches:
        hs = by_tid.get(launch.tid, [])
        i = bisect.bisect_right(starts.get(launch.tid, []), launch.ts_ns)
        best = None
        for j in range(i - 1, -1, -1):  # the latest-starting op that still encloses it is the innermost
            if hs[j].ts_ns + hs[j].dur_ns >= launch.ts_ns + launch.dur_ns:
                best = hs[j]
                break
        if best is not None and best.args.get("External id") is not None:
            launch.args["External id"] = best.args["External id"]
            ext_of[launch.args["correlation"]] = best.args["External id"]
    for s in spans:
        if s.graph_node and s.args.get("correlation") in ext_of:
            s.args["External id"] = ext_of[s.args["correlation"]]


def _contiguous(dims: list, strides: list | None) -> bool:
    """torch's is_contiguous for recorded dims and strides (unknown strides count as contiguous)."""
    return not strides or len(strides) != len(dims) or contiguous_strides(dims, strides)


def _reshape_alias(span: Span, out: Any) -> None:
    """A reshape that can be a view of a non-contiguous tensor runs `aten::_reshape_alias(self,
    size, stride)` on a CUDA build (`view` for a contiguous one); on a tensor subclass, which
    the simulated GPU's tensors are, ATen's reshape takes `view` instead. Recorded as the CUDA
    build records it (H200 ViT: 74 per profiled step): the new sizes and strides as its
    arguments; its autograd node is `ReshapeAliasBackward0` (`_host_ops`: HF Funnel's H100
    profile, 56 per two steps, recorded as ViewBackward0 before)."""
    if not isinstance(out, TensorArg):
        return
    a = span.args
    dims, types, strides = a.get("Input Dims") or [[]], a.get("Input type") or [""], a.get("Input Strides") or [[]]
    span.name = "aten::_reshape_alias"
    a["Input Dims"] = [dims[0], [], []]
    a["Input type"] = [types[0], "ScalarList", "ScalarList"]
    a["Input Strides"] = [strides[0], [], []]
    a["Concrete Inputs"] = ["", "[" + ", ".join(map(str, out.shape)) + "]", "[" + ", ".join(map(str, out.stride)) + "]"]


def _as_called(span: Span, recorded: str) -> None:
    """The arguments of a captured op that the capture ran as another op than the one the
    dispatcher recorded, because a CUDA build calls that other op here: the backward of advanced
    indexing's `index_put(zeros, indices, grad, True)`, which a CUDA build calls as
    `_index_put_impl_(zeros, indices, grad, True, True)` (runtime/dispatch/capture.py,
    `_index_backward_in_place`): the record's four arguments and the in-place call's `unsafe`."""
    if recorded == "aten::index_put" and span.name == "aten::_index_put_impl_":
        a = span.args
        for key, extra in (("Input Dims", []), ("Input type", "Scalar"), ("Input Strides", []),
                           ("Concrete Inputs", "True")):
            if isinstance(a.get(key), list) and len(a[key]) == 4:
                a[key] = [*a[key], extra]


def _number_ops(spans: list[Span]) -> None:
    """External ids 1, 2, ... for the host ops and annotations in the order they begin (as
    kineto numbers them), and the same for the runtime calls and GPU work that refer to them.
    (The simulation's own ids are unique but sparse, and ops from the children table have
    temporary ones.)"""
    host = sorted((s for s in spans if not s.on_gpu and s.cat in ("cpu_op", "user_annotation")),
                  key=lambda s: (s.ts_ns, -s.dur_ns, s.tid))
    _graph_launches_in_ops(spans, [s for s in host if s.cat == "cpu_op"])
    new: dict[int, int] = {}
    for n, s in enumerate(host, 1):
        old = s.args.get("External id")
        if old is not None:
            new[old] = n  # a repeated id (an op and the record around it): the innermost keeps it
        s.args["External id"] = n
    for s in spans:
        if s.on_gpu or s.cat not in ("cpu_op", "user_annotation"):
            old = s.args.get("External id")
            if old is not None and old in new:
                s.args["External id"] = new[old]


class RankTimeline:
    """Simulates one rank's GPU(s) and collects its trace."""

    def __init__(self, rank: int, host_pid: int, device_properties: list[dict[str, Any]],
                 num_sms: int = 132, base_time_ns: int = 0, profile: GpuProfile | None = None):
        """`profile`: the simulated GPU's model constants (launch latency, queue gap, NCCL
        contention); the default GPU's when not given."""
        self.rank = rank
        self.profile = profile if profile is not None else load_profile(DEFAULT_GPU)
        self.host_pid = host_pid
        self.device_properties = device_properties
        self.num_sms = num_sms
        self.base_time_ns = base_time_ns
        self.gpus: dict[int, SimulatedGpu] = {}
        self.event_times: dict[int, int] = {}
        self.spans: list[Span] = []
        # The op recorder's host-only records (composite ops, CPU ops) become spans only when an
        # output needs them: a trace, a report, or a profiler session of the script
        # (ProfilerStarted). A run without them keeps their end times only, so its memory does not
        # grow with the script's CPU work (issue #17: a 1,024-rank DTensor init).
        self.keep_host_spans = True
        self.flows: list[Flow] = []
        self.annotations: list[Annotation] = []
        # per optimizer (its step range's name): [first StepMark, last StepMark, every step's done_ns]
        # (steady_window; the step count is the list's length)
        self.step_marks: dict[str, list] = {}
        self._marked_work = 0  # self.work[:_marked_work] is in step_marks' gpu_end_ns
        self._gpu_end_marked = 0
        self.memory_events: list[MemoryEvent] = []
        self.memory = _MemorySeries()  # allocated / reserved over the whole run, per device
        self.work: list[_GpuWork] = []  # in launch order (host time is non-decreasing)
        # when each launch of the rank's ops is done, in launch order: one per kernel, copy or memset
        # an op launched, one per CUDA graph replay (the launch queue's unit: runtime/device/launch_queue.py)
        self._launch_ends: list[int] = []
        self.threads: dict[int, str] = {}
        self.stats = RankStats()
        self._correlation = 0
        self.contention = GpuContention(num_sms, self.profile.contention_slowdown, self.profile.nccl_ctas,
                                        self.profile.nccl_p2p_ctas)  # NCCL kernels holding SMs (engine.contention)
        self.in_flight = InFlight()  # collectives on this timeline, for link sharing
        self._seq_first_op: dict[int, Span] = {}  # seq_nr -> the forward op that created that node
        self._fwdbwd: list[tuple[Span, Span]] = []  # (forward op, backward node's span): fwdbwd flows
        # External id -> (span, OpCall, launches) of a captured op the op recorder also recorded
        self._recorded_ops: dict[int, tuple[Span, OpCall, list]] = {}
        # captured `aten::view`s of non-contiguous inputs by their parent record, until it arrives
        # (a reshape's view is `aten::_reshape_alias` on a CUDA build: _reshape_alias below)
        self._views_in: dict[int, tuple[Span, Any]] = {}
        self._node_of: dict[int, tuple[int, int, Span]] = {}  # evaluate_function record id -> node (seq, fwd, span)
        self._child_id = 0  # temporary External ids of ops from the children table (negative)
        # id(span) -> its copy in the last window built; None: the last build used the spans themselves
        self._copies: dict[int, Span] | None = {}
        # the CUDA graph replay being drawn: (its id, the launch's correlation, host time, thread,
        # streams that already ran one of its nodes)
        self._graph_launch: tuple[int, int, int, int, set] | None = None
        self._occupancies: dict[tuple, tuple[float, float, int]] = {}  # launch configuration -> _occupancy

    # ---- helpers ----
    def add_gpu_work(self, launch_ns: int, start_ns: int, end_ns: int, stream: int, device: int) -> None:
        """Record GPU work the timeline must wait for at syncs (kernels, copies, and the
        collectives engine's NCCL kernels), in launch order."""
        self.work.append(_GpuWork(launch_ns, start_ns, end_ns, stream, device))

    def gpu(self, device: int) -> SimulatedGpu:
        g = self.gpus.get(device)
        if g is None:
            g = SimulatedGpu(device, self.profile.launch_latency_ns, self.profile.kernel_gap_ns)
            self.gpus[device] = g
        return g

    def _host_tid(self, tid: int) -> int:
        host_tid = self.host_pid if tid == 0 else self.host_pid + 24 + tid
        if host_tid not in self.threads:
            name = "python3" if tid == 0 else "pt_autograd_0"
            self.threads[host_tid] = f"thread {host_tid} ({name})"
        return host_tid

    def _next_correlation(self) -> int:
        self._correlation += 1
        return self._correlation

    def _api_span(self, name: str, tid: int, ts: int, dur: int, external_id: int | None) -> int:
        corr = self._next_correlation()
        args: dict[str, Any] = {}
        if external_id is not None and external_id >= 0:
            args["External id"] = external_id
        cat, args["cbid"] = _api_kind(name)
        args["correlation"] = corr
        self.spans.append(Span(cat, name, tid, ts, dur, args))
        return corr

    # ---- message handlers ----
    def handle(self, msg: Any) -> Any:
        cls = type(msg)
        if cls is OpCall:  # nine messages in ten: no isinstance chain for them
            self._op(msg)
        elif cls is HostOps:
            self._host_ops(msg)
        elif isinstance(msg, OpCall):
            self._op(msg)
        elif isinstance(msg, EventRecord):
            tid = self._host_tid(0)
            self._api_span("cudaEventRecord", tid, msg.host_ns, hostcost.api_ns("cudaEventRecord"), None)
            self.event_times[msg.event] = self.gpu(msg.device).record_event(msg.stream, msg.host_ns)
        elif isinstance(msg, StreamWaitEvent):
            tid = self._host_tid(0)
            self._api_span("cudaStreamWaitEvent", tid, msg.host_ns, hostcost.api_ns("cudaStreamWaitEvent"), None)
            self.gpu(msg.device).wait_event(msg.stream, self.event_times.get(msg.event))
        elif isinstance(msg, StreamCreated):
            self.gpu(msg.device).stream(msg.stream)
        elif isinstance(msg, HostOps):
            self._host_ops(msg)
        elif isinstance(msg, ProfilerStarted):
            self.keep_host_spans = True
        elif isinstance(msg, Annotation):
            self.annotations.append(msg)
            if msg.name.startswith(OPTIMIZER_STEP_PREFIX):
                self._mark_step(msg)
        elif isinstance(msg, MemoryEvent):
            self.memory_events.append(msg)
        elif isinstance(msg, MemoryCounters):
            self.memory.add(msg.samples)
        elif isinstance(msg, AutogradSpan):
            self._autograd(msg)
        elif isinstance(msg, SyncRequest):
            return self._sync(msg)
        elif isinstance(msg, EventQueryRequest):
            done = self.event_times.get(msg.event)
            return done is None or done <= msg.host_ns
        elif isinstance(msg, ProfileExportRequest):
            return self._export(msg)
        elif isinstance(msg, ProfileStatsRequest):
            return self.window_ops(msg.start_ns, msg.end_ns)
        elif isinstance(msg, EventElapsedRequest):
            a = self.event_times.get(msg.start_event)
            b = self.event_times.get(msg.end_event)
            if a is None or b is None:
                return None
            return (b - a) / 1e6
        else:
            log.warning("rank %d: ignoring unknown message %r", self.rank, type(msg).__name__)
        return None

    def _op(self, op: OpCall) -> None:
        if op.graph:
            self._graph_node(op)
            return
        stats = self.stats
        stats.ops += 1
        tid = self._host_tid(op.tid)
        kernels = op.kernels
        if op.depth == HIDDEN_DEPTH and not kernels:
            stats.host_end_ns = max(stats.host_end_ns, op.end_ns)
            return
        ext = op.external_id
        args: dict[str, Any] = {"External id": ext, "Record function id": 0}
        span = Span("cpu_op", op.name, tid, op.start_ns, op.end_ns - op.start_ns, args, key=(ext, 0))
        if op.seq_nr >= 0:
            args["Sequence number"] = op.seq_nr
            args["Fwd thread id"] = 0 if op.tid == 0 else 1
            if op.tid == 0 and op.seq_nr not in self._seq_first_op:
                self._seq_first_op[op.seq_nr] = span
        if op.depth < 0:
            args.update(shape_args(op.args))
        # else the recorder's record of the op brings these lists (_host_ops sets them, in this
        # order); a trace built before it came fills them from the OpCall (_pending_shape_args)
        self.spans.append(span)
        stats.host_end_ns = max(stats.host_end_ns, op.end_ns)
        launches: list = []  # (runtime call span, [its GPU spans])
        if kernels:
            gpu = self.gpu(op.device)
            t = op.launch_ns if op.launch_ns >= 0 else op.start_ns
            self.contention.forget_before(op.device, t)
            wait = op.launch_wait_ns  # a full launch queue held the first launch call up
            for k in kernels:
                launches.append(self._launch(k, op, tid, t, gpu, wait))
                t += hostcost.api_ns(k.launch_api) + wait
                wait = 0
        if op.depth >= 0:  # the recorder's record of it comes later, with its full inputs
            self._recorded_ops[op.external_id] = (span, op, launches)
        else:
            self._children(op, span, launches, None)

    def _graph_node(self, op: OpCall) -> None:
        """A node of a CUDA graph replay: no host op stands for it (torch.profiler shows none);
        the replay's one `cudaGraphLaunch` (drawn at the first node's launch time, as long as
        the first node's host span) launches every node; the first kernel on a stream starts
        `graph_launch_latency_ns` after the launch, the next ones follow the stream's previous
        node at `graph_node_gap_ns` (`graph_cudnn_sdpa_gap_ns` before cuDNN's attention)."""
        tid = self._host_tid(op.tid)
        self.stats.host_end_ns = max(self.stats.host_end_ns, op.end_ns)
        if self._graph_launch is None or self._graph_launch[0] != op.graph:
            t = op.launch_ns if op.launch_ns >= 0 else op.start_ns
            corr = self._api_span("cudaGraphLaunch", tid, t, max(0, op.end_ns - t), None)  # the first node spans the call
            self._graph_launch = (op.graph, corr, t, tid, set())
            self._launched(0)  # one launch for the whole replay: done when its last node is
        _, corr, t, launch_tid, streams = self._graph_launch
        gpu = self.gpu(op.device)
        for k in op.kernels:
            # kineto: one flow start on the launch (with its first kernel), an end on every kernel
            flow_start = None if streams else FlowEnd(False, launch_tid, t)
            if op.stream in streams:
                gap = (self.profile.graph_cudnn_sdpa_gap_ns if k.name.startswith(_CUDNN_SDPA)
                       else self.profile.graph_node_gap_ns)
                act = gpu.enqueue(op.stream, t, k.duration_ns, self._finish(k, op), gap)
            else:  # the graph's first node on this stream: the launch's own latency
                act = gpu.enqueue(op.stream, t + self.profile.graph_launch_latency_ns - gpu.launch_latency_ns,
                                  k.duration_ns, self._finish(k, op))
            streams.add(op.stream)
            self._ran(k, op, corr, t, act).graph_node = True
            if act.end_ns > self._launch_ends[-1]:
                self._launch_ends[-1] = act.end_ns
            self.flows.append(Flow("ac2g", corr, flow_start, FlowEnd(True, op.stream, act.start_ns, op.device)))

    def _children(self, op: OpCall, span: Span, launches: list, types: list | None) -> None:
        """What a CUDA build's kernel of `op` dispatches inside it (engine/op_children.py)."""
        template = op_children.table().lookup(op.name, types, span.args.get("Input Dims"), span.args.get("Input Strides"),
                                              span.args.get("Concrete Inputs"))
        if template:
            self.spans.extend(op_children.expand(op, span, launches, template, self._next_child_id))

    def _next_child_id(self) -> int:
        self._child_id -= 1
        return self._child_id

    def _launch(self, k: Any, op: OpCall, tid: int, t: int, gpu: SimulatedGpu, wait_ns: int = 0) -> tuple:
        """One launch of `op`'s GPU work at host time `t`: (runtime call span, [GPU span]).
        `wait_ns`: the call waited that long for room in a full launch queue first."""
        corr = self._api_span(k.launch_api, tid, t, hostcost.api_ns(k.launch_api) + wait_ns, op.external_id)
        api_span = self.spans[-1]
        act = gpu.enqueue(op.stream, t + wait_ns, k.duration_ns, self._finish(k, op))
        gpu_span = self._ran(k, op, corr, t, act)
        self._launched(act.end_ns)
        self.flows.append(Flow("ac2g", corr, FlowEnd(False, tid, t), FlowEnd(True, op.stream, act.start_ns, op.device)))
        return api_span, [gpu_span]

    def _finish(self, k: Any, op: OpCall) -> Any:
        """How a kernel of `op` ends when NCCL kernels hold SMs of its GPU (engine/contention.py);
        None for copies and memsets."""
        if k.kind != "kernel":
            return None
        cat = kernel_category(k.name, op.name)
        return lambda s, w: self.contention.finish(op.device, cat, s, w)

    def _ran(self, k: Any, op: OpCall, corr: int, launch_ns: int, act: Any) -> Span:
        """The GPU span of `k`, run as `act` after a launch at `launch_ns`, and its share of
        the rank's work and statistics."""
        self.add_gpu_work(launch_ns, act.start_ns, act.end_ns, op.stream, op.device)
        self._gpu_span(k, op, corr, act.start_ns, act.end_ns - act.start_ns)
        self.stats.gpu_ns += act.end_ns - act.start_ns
        self.stats.flops += getattr(k, "flops", 0.0) or 0.0
        source = getattr(k, "source", "roofline")
        self.stats.estimated_ops[source] = self.stats.estimated_ops.get(source, 0) + act.end_ns - act.start_ns
        return self.spans[-1]

    def _occupancy(self, grid: tuple, block: tuple, registers: int) -> tuple[float, float, int]:
        """(blocks per SM, warps per SM, est. achieved occupancy %) of a kernel's launch
        configuration, as kineto reports them; the same few configurations recur at every step,
        so each is worked out once (issue #18)."""
        key = (tuple(grid), tuple(block), registers)
        occ = self._occupancies.get(key)
        if occ is None:
            blocks = grid[0] * grid[1] * grid[2]
            threads = max(1, block[0] * block[1] * block[2])
            warps_per_block = (threads + 31) // 32
            blocks_per_sm = blocks / self.num_sms
            regs = max(1, registers)
            resident = min(32, 2048 // threads, 65536 // max(1, regs * threads) or 1)
            occupancy = min(100, int(round(100 * min(resident, max(1.0, blocks_per_sm)) * warps_per_block / 64)))
            occ = self._occupancies[key] = (round(blocks_per_sm, 6), round(blocks_per_sm * warps_per_block, 6),
                                            occupancy)
        return occ

    def _gpu_span(self, k: Any, op: OpCall, corr: int, start: int, dur: int) -> None:
        cat = _GPU_CATEGORY[k.kind]
        if cat == "kernel":
            self.stats.kernels += 1
            blocks_per_sm, warps_per_sm, occupancy = self._occupancy(k.grid, k.block, k.registers_per_thread)
            args: dict[str, Any] = {
                "External id": op.external_id,
                "queued": 0, "device": op.device, "context": 1, "stream": op.stream,
                "correlation": corr, "registers per thread": k.registers_per_thread,
                "shared memory": k.shared_memory, "blocks per SM": blocks_per_sm,
                "warps per SM": warps_per_sm, "grid": list(k.grid),
                "block": list(k.block), "est. achieved occupancy %": occupancy,
            }
        else:
            args = {"External id": op.external_id}
            if cat == "gpu_memcpy":
                self.stats.memcpys += 1
            else:
                self.stats.memsets += 1
            bw = k.bytes / dur if dur > 0 else 0.0  # bytes per ns == GB/s
            args.update({
                "device": op.device, "context": 1, "stream": op.stream, "correlation": corr,
                "bytes": k.bytes, "memory bandwidth (GB/s)": bw,
            })
        self.spans.append(Span(cat, k.name, op.stream, start, dur, args, on_gpu=True, device=op.device))

    def _autograd(self, msg: AutogradSpan) -> None:
        tid = self._host_tid(msg.tid)
        outer = f"autograd::engine::evaluate_function: {msg.name}"
        dur = msg.end_ns - msg.start_ns
        outer_span = Span("cpu_op", outer, tid, msg.start_ns, dur, {
            "External id": msg.external_id, "Record function id": 0, "Sequence number": msg.seq_nr,
            "Fwd thread id": 1}, key=(msg.external_id, 0))
        self.spans.append(outer_span)
        # The node's own span: torch records the incoming gradients' shapes here; we do not
        # see them at the dispatch level, so the shape lists are present but empty.
        self.spans.append(Span("cpu_op", msg.name, tid, msg.start_ns, dur, {
            "External id": msg.external_id, "Sequence number": msg.seq_nr, "Fwd thread id": 1,
            "Record function id": 0, "Concrete Inputs": [], "Input type": [], "Input Strides": [],
            "Input Dims": []}, key=(msg.external_id, 1), parent=(msg.external_id, 0)))
        fwd = self._seq_first_op.get(msg.seq_nr)
        if fwd is not None:
            self._fwdbwd.append((fwd, outer_span))

    def _host_ops(self, msg: HostOps) -> None:
        """The op recorder's host calls (runtime/dispatch/op_recorder.py): composite ops, CPU-tensor
        ops and autograd nodes around the captured ops, as torch.profiler records them."""
        spans = self.spans
        captured_ops = self._recorded_ops
        keep = self.keep_host_spans
        host_end = self.stats.host_end_ns  # the records' latest end, written back below
        for rid, parent, thread, t0, t1, name, seq, fwd, _depth, dims, types, strides, concrete \
                in orjson.loads(msg.data):
            captured = captured_ops.pop(rid, None) if captured_ops else None
            if captured is None and not keep:  # a host-only call in a run without host spans
                if t1 > host_end:
                    host_end = t1
                continue
            pkey = (parent, 0) if parent else host_layout.TOP
            if captured is not None:  # a captured op: its OpCall's span stands for it, with the
                span, op, launches = captured  # inputs as the dispatcher saw them (all of them)
                a = span.args
                a["Concrete Inputs"] = concrete
                a["Input type"] = types
                a["Input Strides"] = strides
                a["Input Dims"] = dims
                if name != span.name:
                    _as_called(span, name)
                span.parent = pkey
                if keep and name == "aten::view" and parent and dims and \
                        not _contiguous(dims[0], strides[0] if strides else None):
                    self._views_in[parent] = (span, op.outputs[0] if op.outputs else None)
                self._children(op, span, launches, types)
                if t0 < span.ts_ns:  # the call began before the capture mode charged anything
                    span.dur_ns += span.ts_ns - t0  # (an autograd node's engine overhead)
                    span.ts_ns = t0
                continue
            if self._views_in:
                view = self._views_in.pop(rid, None)
                if view is not None and name == "aten::reshape":
                    _reshape_alias(*view)
            tid = self._host_tid(thread)
            if name.startswith(_EVALUATE_FUNCTION):
                # kineto gives the engine's span the sequence number of the node it evaluates
                args: dict[str, Any] = {"External id": rid, "Record function id": 0}
                node = self._node_of.pop(rid, None)
                if node is not None:
                    args["Sequence number"] = node[0]
                    args["Fwd thread id"] = node[1]
                    fwd_op = self._seq_first_op.get(node[0])
                    if fwd_op is not None:
                        self._fwdbwd.append((fwd_op, node[2]))
                        if fwd_op.name == "aten::_reshape_alias" and node[2].name == "ViewBackward0":
                            # the node of a CUDA build's _reshape_alias (see _reshape_alias)
                            node[2].name = "ReshapeAliasBackward0"
                            name = _EVALUATE_FUNCTION + "ReshapeAliasBackward0"
                spans.append(Span("cpu_op", name, tid, t0, t1 - t0, args, key=(rid, 0), parent=pkey))
                continue
            args = {"External id": rid}
            if seq >= 0:
                args["Sequence number"] = seq
                args["Fwd thread id"] = fwd
            args["Record function id"] = 0
            args["Concrete Inputs"] = concrete
            args["Input type"] = types
            args["Input Strides"] = strides
            args["Input Dims"] = dims
            span = Span("cpu_op", name, tid, t0, t1 - t0, args, key=(rid, 0), parent=pkey)
            if seq >= 0 and fwd > 0:  # an autograd node (BACKWARD_FUNCTION): its evaluate_function is the parent
                self._node_of[parent] = (seq, fwd, span)
            spans.append(span)
            if t1 > host_end:
                host_end = t1
        self.stats.host_end_ns = host_end

    def _pending_shape_args(self) -> None:
        """The record_shapes lists of captured ops whose record has not come (yet): from their
        OpCall's arguments, as `_op` would have set them. `_op` leaves them to the record (which
        replaces them) since computing them for every op cost ~8% of the coordinator's time
        (issue #18); the record, when it comes, sets the same keys again."""
        for span, op, _ in self._recorded_ops.values():
            if "Input Dims" not in span.args:
                span.args.update(shape_args(op.args))

    def _export(self, msg: ProfileExportRequest) -> str:
        """torch.profiler's export_chrome_trace for a window: written here, where the GPU
        timeline is, to the path the script asked for."""
        from tracing.kineto import write_kineto

        trace = self.build(self.base_time_ns, trace_name=msg.path, start_ns=msg.start_ns, end_ns=msg.end_ns,
                           record_shapes=msg.record_shapes, profile_memory=msg.profile_memory)
        if getattr(self, "pg_info", None):  # a distributed run: its process groups
            from phantora_prof.engine.process_groups import distributed_info

            trace.distributed_info = distributed_info(self)
        return str(write_kineto(trace, msg.path))

    def _sync(self, msg: SyncRequest) -> Any:
        # the rank's own waits on its full launch queue (_queue_wait's turns)
        self.stats.sync_wait_ns += msg.queue_waited_ns
        if msg.kind == SyncKind.QUEUE:
            return self._queue_wait(msg)
        gpu = self.gpu(msg.device)
        if msg.kind == SyncKind.DEVICE:
            done = gpu.device_done_ns()
        elif msg.kind == SyncKind.STREAM:
            done = gpu.stream_done_ns(msg.target)
        else:
            done = self.event_times.get(msg.target, 0)
        api = _SYNC_API[msg.kind]
        cost = hostcost.api_ns(api)
        ret = max(msg.host_ns + cost, done + cost // 2)
        self.stats.sync_wait_ns += ret - (msg.host_ns + cost)
        self._api_span(api, self._host_tid(msg.tid), msg.host_ns, ret - msg.host_ns, msg.external_id)
        self.stats.host_end_ns = max(self.stats.host_end_ns, ret)
        return ret

    def _launched(self, end_ns: int) -> None:
        ends = self._launch_ends
        ends.append(end_ns)
        if len(ends) > 2 * self.profile.launch_queue_depth:  # only the last depth can hold the host up
            del ends[:len(ends) - self.profile.launch_queue_depth]

    def _queue_wait(self, msg: SyncRequest) -> tuple[int, tuple[int, ...]]:
        """A full launch queue (runtime/device/launch_queue.py): the host's next launch waits
        until the launch `msg.target` (the depth) launches back is done (collectives' NCCL
        kernels are not counted, on either side), as cudaLaunchKernel blocks while the queue
        holds that many. Reply: when the host may go on, and the end times of the launches after
        that one: the turns of the rank's next launches, already known, so it waits for each
        without asking again. No API span of its own: the op that waited carries the wait
        (OpCall.launch_wait_ns) inside its first launch call, as a real trace shows it."""
        ends = self._launch_ends
        back = len(ends) - msg.target
        ret = max(msg.host_ns, ends[back] if back >= 0 else 0)
        self.stats.sync_wait_ns += ret - msg.host_ns
        self.stats.host_end_ns = max(self.stats.host_end_ns, ret)
        return ret, tuple(ends[max(0, back + 1):])

    def _mark_step(self, a: Annotation) -> None:
        """Remember where an optimizer step ended (messages come in host order, so every op
        launched inside it has been timed)."""
        for w in self.work[self._marked_work:]:
            if w.end_ns > self._gpu_end_marked:
                self._gpu_end_marked = w.end_ns
        self._marked_work = len(self.work)
        mark = StepMark(a.name, a.end_ns, self._gpu_end_marked, dict(self.stats.estimated_ops),
                        self.stats.sync_wait_ns)
        seen = self.step_marks.get(a.name)
        if seen is None:
            self.step_marks[a.name] = [mark, mark, [mark.done_ns]]
        else:
            seen[1] = mark
            seen[2].append(mark.done_ns)

    def steady_window(self) -> StepWindow | None:
        """The steps after the first, between the ends of the first and the last optimizer step
        (of the optimizer that stepped most often); None with fewer than two steps."""
        if not self.step_marks:
            return None
        first, last, done = max(self.step_marks.values(), key=lambda v: (len(v[2]), v[0].name))
        steps = len(done)
        if steps < 2:
            return None
        t0, t1 = first.done_ns, last.done_ns
        if t1 <= t0:
            return None
        sources = {k: v - first.sources.get(k, 0) for k, v in last.sources.items() if v > first.sources.get(k, 0)}
        busy = _union_ns((max(w.start_ns, t0), min(w.end_ns, t1)) for w in self.work
                         if w.end_ns > t0 and w.start_ns < t1)
        host_busy = max(0, (last.host_ns - first.host_ns) - (last.sync_wait_ns - first.sync_wait_ns))
        intervals = tuple(b - a for a, b in zip(done, done[1:]))
        return StepWindow(t0, t1, steps - 1, busy, sources, host_busy, intervals)

    # ---- output ----
    def _annotation_spans(self) -> list[Span]:
        """Host annotations, mirrored on the GPU as the span of the work launched inside them."""
        launches = [w.launch_ns for w in self.work]
        out: list[Span] = []
        for a in self.annotations:
            tid = self._host_tid(a.tid)
            out.append(Span(a.cat, a.name, tid, a.start_ns, a.end_ns - a.start_ns,
                            {"External id": a.external_id, "Record function id": 0}))
            lo = bisect.bisect_left(launches, a.start_ns)
            hi = bisect.bisect_right(launches, a.end_ns)
            if lo >= hi:
                continue
            inside = self.work[lo:hi]
            start = min(w.start_ns for w in inside)
            end = max(w.end_ns for w in inside)
            out.append(Span("gpu_user_annotation", a.name, inside[0].stream, start, end - start,
                            {"External id": a.external_id}, on_gpu=True, device=inside[0].device))
        return out

    def _window_spans(self, start_ns: int | None, end_ns: int | None, in_place: bool = False) -> list[Span]:
        """Copies of the spans a profiler window [start_ns, end_ns] records: host events that
        start inside it, and the GPU work launched inside it (wherever it runs). `in_place`
        (the whole run, built last): the spans themselves, no copies."""
        self._pending_shape_args()
        everything = self.spans + self._annotation_spans()
        if in_place and start_ns is None:
            self._copies = None
            return everything
        if start_ns is None:
            chosen = everything
        else:
            end = end_ns if end_ns is not None else self.stats.host_end_ns
            launch_by_ext: dict[int, int] = {}
            for s in self.spans:
                if s.cat in ("cuda_runtime", "cuda_driver") and start_ns <= s.ts_ns <= end:
                    launch_by_ext[s.args["correlation"]] = s.ts_ns
            annotations = {s.args["External id"] for s in everything
                           if s.cat == "user_annotation" and start_ns <= s.ts_ns <= end}
            chosen = []
            for s in everything:
                if s.cat == "gpu_user_annotation":
                    keep = s.args["External id"] in annotations
                elif s.on_gpu:
                    keep = s.args.get("correlation") in launch_by_ext
                else:
                    keep = start_ns <= s.ts_ns and s.ts_ns + s.dur_ns <= end
                if keep:
                    chosen.append(s)
        out = [Span(s.cat, s.name, s.tid, s.ts_ns, s.dur_ns, dict(s.args), s.on_gpu, s.device, s.key, s.parent,
                    s.graph_node)
               for s in chosen]
        self._copies = {id(a): b for a, b in zip(chosen, out)}
        return out

    def build(self, base_time_ns: int, trace_name: str = "", start_ns: int | None = None,
              end_ns: int | None = None, record_shapes: bool = True, profile_memory: bool = False,
              in_place: bool = False) -> RankTrace:
        """The RankTrace of the whole run (no window) or of a profiler window. It makes only
        objects the trace keeps (copies of the spans), so the cyclic collector pauses meanwhile
        (engine/collector.py: it walked them at every collection, 25% of the build).
        `in_place`: the whole run's trace takes the timeline's own spans (laid out and numbered
        where they are), for the last build of a timeline (finish)."""
        with collector.paused():
            return self._build(base_time_ns, trace_name, start_ns, end_ns, record_shapes, profile_memory, in_place)

    def _build(self, base_time_ns: int, trace_name: str, start_ns: int | None, end_ns: int | None,
               record_shapes: bool, profile_memory: bool, in_place: bool = False) -> RankTrace:
        self._host_tid(0)
        spans = self._window_spans(start_ns, end_ns, in_place)
        copies = self._copies
        # Calls at one instant are drawn nested as they ran, every begin and end at its own ns,
        # so siblings never touch (TensorBoard's plugin rejects touching ranges: "ranges should
        # not intersect") and a child ends within its parent.
        host_layout.layout(spans)
        _number_ops(spans)
        instants = self._memory_instants(start_ns, end_ns) if profile_memory else []
        # Kineto numbers host ops, annotations and memory events together, in time order.
        host_events = [(s.ts_ns, -s.dur_ns, s) for s in spans if s.cat in ("cpu_op", "user_annotation")]
        host_events += [(i.ts_ns, 0, i) for i in instants]
        for ev_idx, (_, _, e) in enumerate(sorted(host_events, key=lambda t: (t[0], t[1]))):
            e.args["Ev Idx"] = ev_idx
            if not record_shapes and isinstance(e, Span):
                for key in ("Concrete Inputs", "Input type", "Input Strides", "Input Dims"):
                    e.args.pop(key, None)
        if start_ns is None:
            flows = list(self.flows)
        else:
            end = end_ns if end_ns is not None else self.stats.host_end_ns
            # a flow's extra ends (a CUDA graph's kernels) go with the launch that starts it
            launched = {f.id: f.start.ts_ns for f in self.flows if f.cat == "ac2g" and f.start is not None}
            flows = [f for f in self.flows
                     if start_ns <= (f.start.ts_ns if f.start is not None else launched.get(f.id, -1)) <= end
                     and (f.cat == "ac2g" or f.end.ts_ns <= end)]
        # launches the layout moved (by a few ns): their flows start where they are drawn now
        call_ts = {s.args["correlation"]: s.ts_ns for s in spans
                   if s.cat in ("cuda_runtime", "cuda_driver") and "correlation" in s.args}
        for i, f in enumerate(flows):
            if f.cat == "ac2g" and f.start is not None and not f.start.on_gpu:
                ts = call_ts.get(f.id)
                if ts is not None and ts != f.start.ts_ns:
                    flows[i] = Flow(f.cat, f.id, FlowEnd(False, f.start.tid, ts, f.start.device), f.end)
        for i, (fwd, bwd) in enumerate(self._fwdbwd):
            a, b = (fwd, bwd) if copies is None else (copies.get(id(fwd)), copies.get(id(bwd)))
            if a is not None and b is not None:
                flows.append(Flow("fwdbwd", i + 1, FlowEnd(False, a.tid, a.ts_ns), FlowEnd(False, b.tid, b.ts_ns)))
        streams = {d: sorted(g.streams) for d, g in self.gpus.items()} or {0: []}
        trace = RankTrace(
            rank=self.rank, host_pid=self.host_pid, base_time_ns=base_time_ns,
            device_properties=self.device_properties, host_threads=dict(self.threads),
            gpu_streams=streams, spans=spans, flows=flows, trace_name=trace_name,
            record_shapes=record_shapes, profile_memory=profile_memory,
        )
        trace.instants = instants
        if start_ns is None:
            trace.memory_counters = self.memory.samples()
        if start_ns is not None:
            trace.profiler_start_ns = start_ns
            trace.profiler_end_ns = max(end_ns or start_ns, max((s.ts_ns + s.dur_ns for s in spans), default=0))
        return trace

    def _memory_instants(self, start_ns: int | None, end_ns: int | None) -> list[Instant]:
        """`[memory]` instant events as torch.profiler(profile_memory=True) records them."""
        lo = start_ns if start_ns is not None else -1
        hi = end_ns if end_ns is not None else self.stats.host_end_ns
        out = []
        for m in self.memory_events:
            if lo <= m.host_ns <= hi:
                out.append(Instant("cpu_instant_event", "[memory]", self._host_tid(m.tid), m.host_ns, {
                    "Total Reserved": m.total_reserved, "Total Allocated": m.total_allocated, "Bytes": m.nbytes,
                    "Device Id": m.device, "Device Type": 1, "Addr": m.addr, "finished": False}))
        return out

    def finish(self, base_time_ns: int, trace_name: str = "") -> RankTrace:
        """The whole run's trace, once, at the end: built on the timeline's own spans (no copy
        of ~7,500 spans per GPT-2 step; issue #18), which it lays out and numbers."""
        return self.build(base_time_ns, trace_name, in_place=True)

    def window_ops(self, start_ns: int, end_ns: int) -> list[tuple]:
        """Host ops and annotations of a window with the GPU activities each launched
        (name, device, duration, start, stream); GPU activities no host op launched (CUDA graph
        nodes) come as entries of their own with thread None."""
        spans = self._window_spans(start_ns, end_ns)
        gpu_by_ext: dict[int, list[tuple[str, int, int, int, int]]] = {}
        for s in spans:
            if s.on_gpu and s.cat != "gpu_user_annotation":
                gpu_by_ext.setdefault(s.args["External id"], []).append((s.name, s.device, s.dur_ns, s.ts_ns, s.tid))
        annotation_gpu = {s.args["External id"]: [(s.name, s.device, s.dur_ns, s.ts_ns, s.tid)]
                          for s in spans if s.cat == "gpu_user_annotation"}
        out = []
        for s in spans:
            if s.cat == "cpu_op":
                kernels = gpu_by_ext.get(s.args.get("External id"), []) if "Input Dims" in s.args else []
                out.append((s.name, s.tid, s.ts_ns, s.ts_ns + s.dur_ns, s.args.get("Input Dims", []), False, kernels))
            elif s.cat == "user_annotation":
                out.append((s.name, s.tid, s.ts_ns, s.ts_ns + s.dur_ns, [], True,
                            annotation_gpu.get(s.args.get("External id"), [])))
            elif s.graph_node:
                out.append((s.name, None, s.ts_ns, s.ts_ns + s.dur_ns, [], False,
                            [(s.name, s.device, s.dur_ns, s.ts_ns, s.tid)]))
        out.sort(key=lambda t: (t[2], -(t[3] - t[2])))
        return out

    def end_ns(self) -> int:
        """When the rank's run is over: its host's last event or its GPUs' last work,
        whichever is later.

        A script may exit with GPU work still queued (no final synchronize, e.g. a trainer that
        reads no value after its last step, or collectives still running on a side stream); the
        real GPU keeps running it after the host is done, so the run lasts until the GPUs are
        idle. Measuring the run by the host alone made it too short (and "GPU busy" > 100%)."""
        gpu_end = max((w.end_ns for w in self.work), default=0)
        gpu_end = max([gpu_end] + [g.device_done_ns() for g in self.gpus.values()])
        return max(self.stats.host_end_ns, gpu_end)

    def gpu_busy_ns(self) -> int:
        """Union of GPU activity intervals over all devices and streams."""
        return _union_ns((w.start_ns, w.end_ns) for w in self.work)
