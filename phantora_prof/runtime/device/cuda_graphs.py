"""CUDA graphs on the simulated GPU: `torch.cuda.CUDAGraph`, `graph_pool_handle`,
`is_current_stream_capturing`.

On a GPU, capture records the kernels (and NCCL collectives) the host launches on the
capture stream without running them; `replay()` runs all of them again with one
`cudaGraphLaunch`, for nearly no host time. Frameworks capture their whole forward and
backward (torchtitan does by default), so every step after the capture is a replay: a
replay that does nothing would make those steps empty.

Here, while a graph captures, the messages a rank sends to the coordinator are split:
host-side ones (op spans, autograd spans, annotations, allocator events) go on as usual,
with the ops' GPU work removed (nothing runs on the GPU during capture); GPU-side ones
(kernels of each op, collectives and waits on them, event records and waits) are kept in
the graph. `replay()` sends them again at the host time of the launch: each captured op's
kernels become a node of the replay (OpCall.graph) that runs on the replay stream, each
collective gets the next sequence number of its process group (every rank replays the same
graph, so the numbers agree), and the host pays one cudaGraphLaunch. As torch.profiler shows
a replay, the trace has that one `cudaGraphLaunch` and the nodes' kernels correlated with it,
no host op per node (engine/rank_timeline.py), and a node's kernels follow the previous
node's at the GPU profile's `graph_node_gap_ns`.

Approximate: replayed kernels keep the durations measured at capture; ops replayed do not
run on the CPU, so small tensors' real values (runtime/dispatch/values.py) are those of the
capture; a host sync inside a capture raises as CUDA does.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
from typing import Any

import torch

from phantora_prof import hostcost
from phantora_prof.protocol import (
    CollectiveCall,
    CollectiveWait,
    EventRecord,
    HIDDEN_DEPTH,
    OpCall,
    OpKind,
    StreamWaitEvent,
    SyncRequest,
)
from phantora_prof.runtime.process import state as _state

log = logging.getLogger(__name__)

_pool_ids = itertools.count(1)
_replay_ids = itertools.count(1)  # OpCall.graph of each replay's nodes (never 0: that is "no graph")
_capturing: "SimCUDAGraph | None" = None
_lock = threading.RLock()


def is_current_stream_capturing() -> bool:
    return _capturing is not None


def graph_pool_handle() -> tuple[int, int]:
    """An opaque memory-pool id, as torch.cuda.graph_pool_handle() returns."""
    return (0, next(_pool_ids))


class _CapturingChannel:
    """Wraps the rank's channel while a graph captures (see the module docstring)."""

    def __init__(self, inner: Any, graph: "SimCUDAGraph") -> None:
        self._inner = inner
        self._graph = graph

    def send(self, msg: Any) -> None:
        g = self._graph
        if isinstance(msg, OpCall):
            if msg.kernels or msg.kind in (OpKind.MEMCPY, OpKind.MEMSET):
                g._items.append(dataclasses.replace(msg))
                msg = dataclasses.replace(msg, kernels=(), kind=OpKind.HOST)
            self._inner.send(msg)
        elif isinstance(msg, (CollectiveCall, CollectiveWait, EventRecord, StreamWaitEvent)):
            g._items.append(msg)
        else:
            self._inner.send(msg)

    def request(self, msg: Any) -> Any:
        if isinstance(msg, SyncRequest):
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing "
                               "(a host synchronization inside a CUDA graph capture)")
        return self._inner.request(msg)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class SimCUDAGraph:
    """torch.cuda.CUDAGraph for the simulated GPU."""

    def __new__(cls, keep_graph: bool = False) -> "SimCUDAGraph":
        return super().__new__(cls)

    def __init__(self, keep_graph: bool = False) -> None:
        self._items: list = []
        self._pool: tuple[int, int] | None = None
        self._capture_stream: int | None = None
        self._captured = False
        self._channel: Any = None
        self._launch_ns = 0  # host time of its cudaGraphLaunch (set when the capture ends)

    # ---- capture ----
    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global", **options: Any) -> None:
        global _capturing
        with _lock:
            if _capturing is not None:
                raise RuntimeError("CUDA error: operation not permitted when stream is capturing "
                                   "(another CUDA graph is already capturing)")
            st = _state.get()
            self._items = []
            self._pool = tuple(pool) if pool is not None else graph_pool_handle()
            self._capture_stream = st.stream_of(st.current_device)
            self._channel = st.channel
            st.channel = _CapturingChannel(st.channel, self)
            _capturing = self

    def capture_end(self, **options: Any) -> None:
        global _capturing
        with _lock:
            if _capturing is not self:
                raise RuntimeError("capture_end() called on a CUDA graph that is not capturing")
            st = _state.get()
            st.channel = self._channel
            _capturing = None
            self._captured = True
            kernels = [k for item in self._items if isinstance(item, OpCall) for k in item.kernels]
            triton = sum(1 for k in kernels if k.name.startswith("triton_"))
            self._launch_ns = hostcost.graph_launch_ns(triton, len(kernels) - triton)
            log.debug("CUDA graph captured: %d GPU items", len(self._items))

    # ---- replay ----
    def replay(self) -> None:
        if not self._captured:
            raise RuntimeError("CUDA graph replay() before capture")
        from phantora_prof.runtime.distributed import backend

        st = _state.get()
        replay_stream = st.stream_of(st.current_device)
        if st.launch_queue is not None:  # cudaGraphLaunch is one entry of the launch queue: it may wait first
            st.launch_queue.launch(1, st.current_device)
        launch = st.clock.now_ns
        t = launch + self._launch_ns
        replay_id = next(_replay_ids)
        first = True
        seqs: dict[tuple[str, int], int] = {}

        def stream(s: int) -> int:
            return replay_stream if s == self._capture_stream else s

        # Kernel nodes are all launched by the one cudaGraphLaunch at `launch` (no host op each);
        # collectives keep the host span of their captured c10d call, after the launch.
        for item in self._items:
            if isinstance(item, OpCall):
                # the first node carries the launch call's span: [launch, t]
                msg = dataclasses.replace(item, external_id=st.next_external_id(), start_ns=launch,
                                          end_ns=t if first else launch, launch_ns=launch, stream=stream(item.stream),
                                          seq_nr=-1, depth=HIDDEN_DEPTH, graph=replay_id)
                first = False
            elif isinstance(item, CollectiveCall):
                seq = backend.next_seq(item)
                seqs[(item.group, item.seq)] = seq
                ext = st.next_external_id()
                st.next_external_id()
                st.next_external_id()
                # the captured host span's shape (c10d op, its launch at host_ns inside it): the engine
                # draws the NCCL launch from host_ns for its own API cost, which must stay inside
                dur = max(item.end_ns - item.start_ns, hostcost.api_ns("cuLaunchKernelEx"))
                off = min(max(item.host_ns - item.start_ns, 0), dur - hostcost.api_ns("cuLaunchKernelEx"))
                msg = dataclasses.replace(item, seq=seq, external_id=ext, host_ns=t + off, start_ns=t, end_ns=t + dur,
                                          stream=stream(item.stream))
                t += dur
            elif isinstance(item, CollectiveWait):
                msg = dataclasses.replace(item, seq=seqs.get((item.group, item.seq), item.seq),
                                          stream=stream(item.stream), host_ns=t)
            elif isinstance(item, (EventRecord, StreamWaitEvent)):
                msg = dataclasses.replace(item, stream=stream(item.stream), host_ns=t)
                # the engine draws the API call from host_ns for its cost: the next node starts after it
                t += hostcost.api_ns("cudaEventRecord" if isinstance(item, EventRecord) else "cudaStreamWaitEvent")
            else:
                continue
            st.channel.send(msg)
        st.clock.advance_to(t)
        st.channel.flush()  # other ranks may wait for these collectives at the coordinator

    # ---- the rest of the API ----
    def reset(self) -> None:
        self._items = []
        self._captured = False

    def pool(self) -> tuple[int, int]:
        if self._pool is None:
            raise RuntimeError("pool() of a CUDA graph that was never captured")
        return self._pool

    def enable_debug_mode(self) -> None:
        pass

    def debug_dump(self, debug_path: str) -> None:
        with open(debug_path, "w") as f:
            f.write(f"simulated CUDA graph: {len(self._items)} captured GPU items\n")

    def instantiate(self) -> None:
        pass

    def register_generator_state(self, state: Any) -> None:
        pass

    def raw_cuda_graph(self) -> int:
        return id(self)

    def raw_cuda_graph_exec(self) -> int:
        return id(self)


def install() -> None:
    """Replace torch.cuda's graph API with the simulated one (after cuda_api.install)."""
    import torch.cuda.graphs as graphs

    torch.cuda.CUDAGraph = SimCUDAGraph
    graphs.CUDAGraph = SimCUDAGraph
    torch.cuda.graph_pool_handle = graph_pool_handle
    graphs.graph_pool_handle = graph_pool_handle
    torch.cuda.is_current_stream_capturing = is_current_stream_capturing
    graphs.is_current_stream_capturing = is_current_stream_capturing
    if not hasattr(torch._C, "_host_emptyCache"):  # CPU builds: the pinned-memory cache (nothing to free)
        torch._C._host_emptyCache = lambda: None
