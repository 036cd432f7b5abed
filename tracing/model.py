"""The in-memory model of one rank's trace, in integer nanoseconds.

The engine fills a `RankTrace`; `tracing.kineto.write_kineto` turns it into the Chrome/Kineto
JSON torch.profiler writes. Keeping times as integer ns until the writer converts them to
microseconds (as kineto's output_json.cpp does) keeps the simulation exact and the output
deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Event categories a torch.profiler trace uses, in the order the writer emits them.
HOST_CATEGORIES = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function")
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


@dataclass(slots=True)
class Span:
    """A complete ('X') event.

    `on_gpu` spans live on pid = device index and tid = stream id; host spans on the
    rank's host pid and a host thread id.
    """

    cat: str
    name: str
    tid: int
    ts_ns: int
    dur_ns: int
    args: dict[str, Any] = field(default_factory=dict)
    on_gpu: bool = False
    device: int = 0
    # For the writer of the spans (not written to the file): a host span's begin order among
    # the spans of its thread (a sortable tuple) and its parent's, where the writer knows them
    # (spans that start or end at the same instant nest by these, not by time).
    key: Any = None
    parent: Any = None
    # A GPU activity a CUDA graph launched (not written: torch.profiler marks none; its launch is a
    # cudaGraphLaunch that shares its correlation with every node of the graph).
    graph_node: bool = False


@dataclass(slots=True)
class FlowEnd:
    on_gpu: bool
    tid: int
    ts_ns: int
    device: int = 0


@dataclass(slots=True)
class Flow:
    """A flow arrow: `ac2g` (launch -> GPU activity, id = correlation) or `fwdbwd`. `start`
    None: one more end of a flow another Flow of the same id starts (a cudaGraphLaunch has one
    flow start and an end on each kernel of the graph, as kineto writes them)."""

    cat: str
    id: int
    start: FlowEnd | None
    end: FlowEnd


@dataclass(slots=True)
class Instant:
    """An instant ('i') event, e.g. `[memory]` allocations (cat cpu_instant_event)."""

    cat: str
    name: str
    tid: int
    ts_ns: int
    args: dict[str, Any] = field(default_factory=dict)
    scope: str = "t"


@dataclass
class RankTrace:
    """Everything one rank's Kineto file holds."""

    rank: int
    host_pid: int
    base_time_ns: int  # wall-clock epoch ns corresponding to simulated time 0
    device_properties: list[dict[str, Any]]
    host_threads: dict[int, str] = field(default_factory=dict)  # tid -> name
    gpu_streams: dict[int, list[int]] = field(default_factory=dict)  # device -> stream ids
    spans: list[Span] = field(default_factory=list)
    flows: list[Flow] = field(default_factory=list)
    instants: list[Instant] = field(default_factory=list)
    distributed_info: dict[str, Any] | None = None
    trace_name: str = ""
    trace_id: str = ""
    process_name: str = "python3"
    profiler_start_ns: int = 0
    profiler_end_ns: int = 0
    cuda_driver_version: int = 13000
    cuda_runtime_version: int = 13000
    cupti_version: int = 130001
    # Additions (writer options). torch.profiler writes `record_shapes: 1` / `profile_memory: 1`
    # at the top level when those options were on.
    record_shapes: bool = True
    profile_memory: bool = False
    # The value written as `baseTimeNanoseconds`; `ts` is written relative to it, as kineto
    # does: ts_us = (base_time_ns + ts_ns - trace_base_ns) / 1000. None: base_time_ns (the
    # simulated program start, kineto's "program loading time"), so `ts` is the simulated
    # time since start and stays exact as a double.
    trace_base_ns: int | None = None
    # GPU memory over the whole run, (ts_ns, device, total allocated, total reserved) in time
    # order: not part of the Kineto file (torch writes memory only as `[memory]` instants of a
    # profile_memory window); the Perfetto writer makes its counter tracks from it.
    memory_counters: list[tuple[int, int, int, int]] = field(default_factory=list)
