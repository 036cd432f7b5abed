"""Messages between a rank process (runtime/) and the coordinator (engine/, cost/).

This module is the only thing both sides import. It holds plain data (no torch), so the
coordinator never depends on torch-side runtime code and the same messages can later go
over TCP to ranks on other hosts. Nothing here assumes "one process = one rank": every
message names its rank.

Times are integer nanoseconds of simulated (virtual) time since the start of the run.
"""
from __future__ import annotations

import json
import os
import pickle
import socket
import struct
import dataclasses
import operator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Union

from phantora_prof.errors import ConfigError, ProtocolError

CPU_DEVICE = -1

COORDINATOR_ENV = "PHANTORA_COORDINATOR"  # the coordinator's socket, in the run's private directory


def sigint_note_path(run_dir: str, rank: int) -> str:
    """Where rank `rank` notes a SIGINT it received itself (a file in the run's private
    directory, the coordinator socket's), so that the coordinator does not pass the CLI's
    SIGINT on to it a second time (runtime/process/interrupts.py). Derived from the socket's
    path rather than set in one more environment variable: the rank's environment is the
    script's, and its size changes how much Python some libraries run (counted host time)."""
    return os.path.join(run_dir, f"sigint.{rank}")


def pickled_by_fields(cls):
    """Pickle a slotted dataclass as (class, field values): what Python 3.11 generates for
    `slots=True` (`__getstate__` calling `dataclasses.fields()` on every object) was ~10% of a
    rank's time, since every captured op crosses to the coordinator pickled (issue #18)."""
    names = tuple(f.name for f in dataclasses.fields(cls))
    values = operator.attrgetter(*names) if len(names) > 1 else (lambda o: (getattr(o, names[0]),))

    def __reduce__(self):
        return (cls, values(self))  # attrgetter of several names: the tuple, built in C

    cls.__reduce__ = __reduce__
    return cls


# Simulated time of every rank starts here (1000 s, not 0: trace readers treat 0 as unset).
ORIGIN_NS = 1_000_000_000_000


@pickled_by_fields
@dataclass(slots=True, frozen=True)
class TensorArg:
    """What the cost model and the trace need to know about one tensor argument."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str  # torch dtype name without the "torch." prefix: "float32", "bfloat16", "int64"
    device: int  # CUDA device index, or CPU_DEVICE
    pinned: bool = False  # only meaningful for CPU tensors

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def itemsize(self) -> int:
        return DTYPE_ITEMSIZE.get(self.dtype, 4)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def on_gpu(self) -> bool:
        return self.device >= 0


DTYPE_ITEMSIZE = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1,
    "bool": 1, "complex64": 8, "complex128": 16,
}

# An argument is a tensor, a list of tensors, or a plain scalar / string / None.
Arg = Union[TensorArg, tuple, int, float, bool, str, None]


class OpKind(IntEnum):
    """How the engine treats an op on the GPU side."""

    COMPUTE = 0  # kernels on the op's stream (cost model decides which; may be none)
    MEMCPY = 1  # a copy between host and device or device and device
    MEMSET = 2  # fill with a constant (zeros, zero_)
    HOST = 3  # host-only op on GPU tensors (views, metadata): no GPU work


# OpCall.depth of a call no dispatcher call stands for (FakeTensor's own detach, a CUDA graph's
# node): host time only, no op span, no op record follows.
HIDDEN_DEPTH = -2

# torch.multiprocessing.spawn under a single-rank run (runtime/patches/mp_spawn.py, launcher.py):
# the file where the rank writes how many processes the script asked for, and the flag that
# holds a relaunched rank's output back until it reaches its mp.spawn
SPAWN_REQUEST_ENV = "PHANTORA_SPAWN_REQUEST"
SPAWN_QUIET_ENV = "PHANTORA_SPAWN_QUIET"
# process groups of the simulator's own (mp.spawn's join): not the program's, not in the traces
INTERNAL_GROUP_PREFIX = "phantora:"


@pickled_by_fields
@dataclass(slots=True)
class OpCall:
    """One captured operator call on a rank, with its host-side span."""

    rank: int
    external_id: int
    name: str  # "aten::addmm"
    args: tuple  # positional arguments, each an Arg
    kwargs: dict[str, Any]
    outputs: tuple  # TensorArg for each tensor output
    tid: int  # host thread (0 = main)
    start_ns: int
    end_ns: int
    stream: int  # stream id the op was issued on
    device: int
    kind: OpKind = OpKind.COMPUTE
    seq_nr: int = -1  # autograd sequence number, -1 when none
    launch_ns: int = -1  # host time the op's GPU work was launched (inside [start, end])
    kernels: tuple = ()  # cost.Kernel items the op launches, in order (empty: no GPU work)
    depth: int = -1  # nesting depth among the recorded host ops of its thread (-1: not recorded,
    # -2: no dispatcher call stands for it, e.g. FakeTensor's own detach: host time only, no span)
    graph: int = 0  # a node of a CUDA graph replay: the replay's id (one cudaGraphLaunch launches
    # every node with that id, runtime/device/cuda_graphs.py); 0: launched on its own
    launch_wait_ns: int = 0  # its launches' wait on a full launch queue, inside its first launch call


@pickled_by_fields
@dataclass(slots=True)
class Annotation:
    """A user range (record_function, nvtx, ProfilerStep#N) on the host, mirrored on the GPU."""

    rank: int
    name: str
    tid: int
    start_ns: int
    end_ns: int
    external_id: int
    cat: str = "user_annotation"


@pickled_by_fields
@dataclass(slots=True)
class AutogradSpan:
    """A backward node's evaluation (autograd::engine::evaluate_function: XBackward0)."""

    rank: int
    name: str  # "AddmmBackward0"
    tid: int
    start_ns: int
    end_ns: int
    seq_nr: int
    external_id: int


@pickled_by_fields
@dataclass(slots=True)
class HostOps:
    """Host calls the native op recorder saw (runtime/dispatch/op_recorder.py): composite ops around
    captured ones, ops on CPU tensors, autograd nodes; `data` is the recorder's JSON array of
    [id, parent id, thread, start ns, end ns, name, sequence nr, forward thread id, depth,
    Input Dims, Input type, Input Strides, Concrete Inputs]. A record whose id is a captured
    op's External id stands for that op (its OpCall was sent before)."""

    rank: int
    data: bytes


class SyncKind(IntEnum):
    DEVICE = 0
    STREAM = 1
    EVENT = 2
    QUEUE = 3  # a full launch queue: until the launch `target` launches back is done (launch_queue.py)


@dataclass(slots=True)
class EventRecord:
    rank: int
    event: int
    stream: int
    device: int
    host_ns: int


@dataclass(slots=True)
class StreamWaitEvent:
    rank: int
    stream: int
    event: int
    device: int
    host_ns: int


@dataclass(slots=True)
class StreamCreated:
    rank: int
    stream: int
    device: int
    priority: int = 0


@dataclass(slots=True)
class CollectiveCall:
    """A collective (or point-to-point op) on CUDA tensors, launched by one member of a group.

    `group` names the process group (its c10d name), `ranks` its global ranks in group-rank
    order (sent with a rank's first collective of the group only, empty afterwards: the
    coordinator fills them in, so a call costs O(1) at any group size), `seq` counts this
    rank's collectives in the group (the same on every member for the same collective). It runs on `comm_stream` after the work already enqueued on
    `stream` (NCCL's stream semantics) and starts on the GPU when every member launched it.
    `nbytes` follows nccl-tests' size convention (all_gather: the gathered output,
    reduce_scatter: the full input, all_to_all: one rank's send buffer, send/recv: bytes sent).
    """

    rank: int
    group: str
    group_desc: str
    ranks: tuple  # global ranks, in group-rank order
    seq: int
    op: str  # netsim name: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv
    coll_name: str  # c10d's name for the trace: allreduce, _allgather_base, ...
    nbytes: int
    dtype: str
    in_nelems: int
    out_nelems: int
    stream: int  # the stream the collective follows (current stream at launch)
    comm_stream: int
    device: int
    host_ns: int  # launch time (inside [start_ns, end_ns])
    start_ns: int  # host span of the c10d call
    end_ns: int
    external_id: int
    tid: int = 0
    reduce_op: str = "sum"
    root: int = 0  # global rank (broadcast/reduce)
    peer: int = -1  # global rank of the other side (send/recv)
    input_dims: tuple = ()
    coalesced: bool = False  # more calls of this rank's coalesced group follow (ncclGroupStart/End)


@dataclass(slots=True)
class CollectiveWait:
    """`stream` waits for the collective (group, seq) launched by this rank (Work.wait())."""

    rank: int
    group: str
    seq: int
    stream: int
    device: int
    host_ns: int


@dataclass(slots=True)
class GroupCreated:
    """A process group this rank belongs to (for distributedInfo.pg_config). Groups named with
    INTERNAL_GROUP_PREFIX are the simulator's own (host exchanges only, never in a trace)."""

    rank: int
    group: str
    group_desc: str
    ranks: tuple
    backend: str = "nccl"
    backend_config: str = "cuda:nccl"


@dataclass(slots=True)
class GroupDeclared:
    """A `new_group` call seen on the layout probe (rank 0 of a representative-rank run):
    every group the script creates, member or not, so the coordinator learns the parallel
    layout (engine/representatives.py) before it starts the other ranks."""

    rank: int
    ranks: tuple
    group_desc: str


@dataclass(slots=True)
class ProfilerStarted:
    """The script started a torch.profiler session: from here on the coordinator keeps the
    host op tree even when the run writes no trace (the session may export one)."""

    rank: int
    host_ns: int


@dataclass(slots=True)
class HostSend:
    """Bytes sent from rank to rank on the host (a CPU `send`, a small device message's real
    values): posted at once, received by the matching `HostRecv` (same group, pair, tag, seq)."""

    rank: int
    group: str
    dst: int  # global rank
    tag: int
    seq: int
    host_ns: int
    payload: bytes


# ---- requests that need an answer (the rank blocks until the coordinator replies) ----


@dataclass(slots=True)
class SyncRequest:
    """Block the host until the target's GPU work is done; reply: the host time it returns
    (QUEUE: that and the end times of the next launches' turns, runtime/device/launch_queue.py)."""

    rank: int
    kind: SyncKind
    target: int  # stream id, event id, or device index; QUEUE: the queue's depth
    device: int
    host_ns: int
    tid: int = 0
    external_id: int = -1
    queue_waited_ns: int = 0  # host time the rank spent idle since its last request: a full launch queue, time.sleep


@dataclass(slots=True)
class EventQueryRequest:
    """Has the event completed by host_ns? reply: bool."""

    rank: int
    event: int
    host_ns: int


@dataclass(slots=True)
class EventElapsedRequest:
    """Reply: milliseconds between two recorded events (as torch.cuda.Event.elapsed_time)."""

    rank: int
    start_event: int
    end_event: int


@pickled_by_fields
@dataclass(slots=True)
class MemoryEvent:
    """One allocation (+bytes) or free (-bytes) of simulated GPU memory, for the profiler's
    `[memory]` events (profile_memory=True)."""

    rank: int
    tid: int
    host_ns: int
    device: int
    addr: int
    nbytes: int
    total_allocated: int
    total_reserved: int


@dataclass(slots=True)
class MemoryCounters:
    """Simulated GPU memory over the whole run (the Perfetto trace's counter tracks, the
    report's memory plot): samples (host_ns, device, total_allocated, total_reserved), one per
    host time at which the allocator's totals changed, sent in batches."""

    rank: int
    samples: list


@dataclass(slots=True)
class ProfileExportRequest:
    """Write the trace of the host-time window [start_ns, end_ns] to `path` (torch.profiler's
    export_chrome_trace); reply: the path written."""

    rank: int
    start_ns: int
    end_ns: int
    path: str
    record_shapes: bool = True
    profile_memory: bool = False


@dataclass(slots=True)
class ProfileStatsRequest:
    """The ops of a window with their kernels, for key_averages(); reply: list of
    (name, tid, start_ns, end_ns, input_dims, is_annotation, [(kernel name, device, dur_ns)])."""

    rank: int
    start_ns: int
    end_ns: int


@dataclass(slots=True)
class HostExchange:
    """One member's part of a collective on the host (CPU tensors, Python objects, the real
    values of a small device collective). The coordinator answers every live member when all
    of them have sent theirs (`HostExchangeReply`); the rank combines the parts itself."""

    rank: int
    group: str
    seq: int  # this rank's host exchanges in the group, counted from 0
    what: str  # the c10d call, for mismatch reports: "allreduce", "allgather", ...
    host_ns: int
    payload: bytes


@dataclass(slots=True)
class HostExchangeReply:
    host_ns: int  # the latest member's host time at the exchange
    payloads: tuple  # the distinct parts: one per live member, in group order
    index: tuple | None = None  # for each member (group order), its part in `payloads`; None: one each


@dataclass(slots=True)
class HostRecv:
    """Receive the `HostSend` with the same group, pair, tag and seq; reply: `HostRecvReply`."""

    rank: int
    group: str
    src: int  # global rank
    tag: int
    seq: int
    host_ns: int


@dataclass(slots=True)
class HostRecvReply:
    host_ns: int  # the sender's host time when it sent
    payload: bytes


@dataclass(slots=True)
class Hello:
    rank: int
    world_size: int
    pid: int
    argv: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Goodbye:
    """The rank finished (exit code) and sends its final host time."""

    rank: int
    host_ns: int
    exit_code: int
    summary: dict[str, Any] = field(default_factory=dict)


REQUESTS = (SyncRequest, EventQueryRequest, EventElapsedRequest, ProfileExportRequest, ProfileStatsRequest,
            HostExchange, HostRecv)
# answered when other ranks have sent their parts, not in the rank's queue order (engine/host_exchange.py)
DEFERRED_REQUESTS = (HostExchange, HostRecv)


# ---- framing: length-prefixed pickled lists of messages over a stream socket ----

_HEADER = struct.Struct("!Q")


def send_batch(sock: socket.socket, messages: list) -> None:
    """Send a list of messages as one frame."""
    payload = pickle.dumps(messages, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def recv_batch(sock: socket.socket) -> list | None:
    """Receive one frame; None when the peer closed the connection cleanly."""
    header = _recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    (length,) = _HEADER.unpack(header)
    payload = _recv_exact(sock, length)
    if payload is None:
        raise ProtocolError("connection closed in the middle of a message")
    return pickle.loads(payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    got = 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError("connection closed in the middle of a message")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


@dataclass
class RankConfig:
    """What the launcher tells a rank process (JSON in PHANTORA_RANK_CONFIG)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device_count: int = 1
    gpu: str = "h200"
    kernel_times: str = "model"  # model: built-in data and models; measure: time new ops on this machine's GPU
    kernel_db: str | None = None  # a kernel database to read (and, when measuring, to fill)
    placeholder_float: float = 0.0
    placeholder_int: int = 1
    placeholder_bool: bool = True
    op_costs: dict = field(default_factory=dict)  # op name -> GPU time in ns (--op-cost)
    host_python: bool = True  # charge the interpreter's work between ops (runtime/host/pyhost.py)
    representative: bool = False  # some ranks are mirrored (engine/representatives.py): rank 0 probes the layout
    host_records: bool = True  # the run writes host op records (a trace or a report): no op may be skipped

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is outside world size {self.world_size}")
        if self.device_count < 1:
            raise ConfigError("device_count must be at least 1")
        if self.kernel_times not in ("model", "measure"):
            raise ConfigError(f"kernel_times must be 'model' or 'measure', not {self.kernel_times!r}")

    @classmethod
    def from_env(cls) -> "RankConfig":
        raw = os.environ.get("PHANTORA_RANK_CONFIG")
        if not raw:
            return cls()
        return cls(**json.loads(raw))

    def to_env(self) -> str:
        return json.dumps(self.__dict__)
