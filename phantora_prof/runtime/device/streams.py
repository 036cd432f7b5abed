"""Simulated CUDA streams and events, standing in for torch.cuda.Stream / torch.cuda.Event.

They carry ids only; their semantics live in the coordinator's timeline. Host-blocking
calls (synchronize, query, elapsed_time) are requests to the coordinator, whose answer
moves the virtual clock.
"""
from __future__ import annotations

import contextlib
from typing import Any

from phantora_prof import hostcost
from phantora_prof.protocol import (
    EventElapsedRequest,
    EventQueryRequest,
    EventRecord,
    StreamCreated,
    StreamWaitEvent,
    SyncKind,
    SyncRequest,
)
from phantora_prof.runtime.host.pyhost import simulator_work
from phantora_prof.runtime.process import state as _state
from phantora_prof.runtime.process.state import DEFAULT_STREAM_ID


def _device_index(device: Any) -> int:
    return _state.get().device_index(device)


def host_sync(kind: SyncKind, target: int, device: int, external_id: int = -1) -> None:
    """Block the virtual host until the coordinator says the awaited GPU work is done."""
    from phantora_prof.runtime.device import memory

    st = _state.get()
    # called from the program too (torch.cuda.synchronize): the simulator's Python off the slow
    # tracing path of the host model's hook (issue #18)
    with simulator_work(st.pyhost):
        st.syncs += 1
        queue = st.launch_queue
        waited = (queue.take_waited() if queue else 0) + st.clock.take_slept()
        reply = st.channel.request(SyncRequest(st.config.rank, kind, target, device, st.clock.now_ns,
                                               st.tid(), external_id, waited))
        st.clock.advance_to(reply)
        if queue is not None:
            queue.synced()
        memory.note_host_sync(device)


def queue_turns(depth: int, device: int, waited_ns: int) -> tuple[int, tuple[int, ...]]:
    """Ask the coordinator when a full launch queue lets the host go on, and the turns of its
    next launches (runtime/device/launch_queue.py); the clock is the caller's to move."""
    st = _state.get()
    with simulator_work(st.pyhost):
        return st.channel.request(SyncRequest(st.config.rank, SyncKind.QUEUE, depth, device, st.clock.now_ns,
                                              st.tid(), -1, waited_ns + st.clock.take_slept()))


class SimStream:
    """A simulated torch.cuda.Stream."""

    _by_id: dict[tuple[int, int], "SimStream"] = {}

    def __new__(cls, device: Any = None, priority: int = 0, stream_id: int | None = None, **kwargs: Any):
        st = _state.get()
        dev = _device_index(device)
        if stream_id is None:
            stream_id = next(st.stream_ids)
            st.channel.send(StreamCreated(st.config.rank, stream_id, dev, priority))
        key = (dev, stream_id)
        obj = cls._by_id.get(key)
        if obj is None:
            obj = super().__new__(cls)
            obj.stream_id = stream_id
            obj.device_index = dev
            obj.priority = priority
            cls._by_id[key] = obj
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @property
    def device(self):
        import torch

        return torch.device("cuda", self.device_index)

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    @property
    def device_type(self) -> int:
        return 1  # DeviceType::CUDA

    def wait_event(self, event: "SimEvent") -> None:
        event.wait(self)

    def wait_stream(self, stream: "SimStream") -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: "SimEvent | None" = None) -> "SimEvent":
        event = SimEvent() if event is None else event
        event.record(self)
        return event

    def query(self) -> bool:
        return self.record_event().query()

    def is_capturing(self) -> bool:
        return False  # CUDA graph capture is not simulated yet

    def synchronize(self) -> None:
        host_sync(SyncKind.STREAM, self.stream_id, self.device_index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SimStream) and (other.stream_id, other.device_index) == (self.stream_id, self.device_index)

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index))

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device=cuda:{self.device_index} cuda_stream={self.stream_id:#x} (simulated)>"

    def __enter__(self) -> "SimStream":
        self._ctx = stream_context(self)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)


def current_stream(device: Any = None) -> SimStream:
    st = _state.get()
    dev = _device_index(device)
    return SimStream(dev, stream_id=st.stream_of(dev))


def default_stream(device: Any = None) -> SimStream:
    return SimStream(_device_index(device), stream_id=DEFAULT_STREAM_ID)


def set_stream(stream: SimStream | None) -> None:
    if stream is None:
        return
    _state.get().current_stream[stream.device_index] = stream.stream_id


@contextlib.contextmanager
def stream_context(stream: SimStream | None):
    """torch.cuda.stream(s): make `s` current on its device (None is a no-op, as in torch)."""
    if stream is None:
        yield
        return
    st = _state.get()
    prev_device = st.current_device
    prev = st.current_stream.get(stream.device_index, DEFAULT_STREAM_ID)
    st.current_device = stream.device_index
    st.current_stream[stream.device_index] = stream.stream_id
    try:
        yield stream
    finally:
        st.current_stream[stream.device_index] = prev
        st.current_device = prev_device


class SimEvent:
    """A simulated torch.cuda.Event."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 external: bool = False) -> None:
        st = _state.get()
        self.event_id = next(st.event_ids)
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.recorded = False
        self.device_index = st.current_device

    def record(self, stream: SimStream | None = None) -> None:
        st = _state.get()
        stream = current_stream() if stream is None else stream
        self.device_index = stream.device_index
        st.channel.send(EventRecord(st.config.rank, self.event_id, stream.stream_id, stream.device_index,
                                    st.clock.now_ns))
        st.clock.advance(hostcost.api_ns("cudaEventRecord"))
        self.recorded = True

    def wait(self, stream: SimStream | None = None) -> None:
        st = _state.get()
        stream = current_stream() if stream is None else stream
        st.channel.send(StreamWaitEvent(st.config.rank, stream.stream_id, self.event_id, stream.device_index,
                                        st.clock.now_ns))
        st.clock.advance(hostcost.api_ns("cudaStreamWaitEvent"))

    def query(self) -> bool:
        st = _state.get()
        if not self.recorded:
            return True
        done = st.channel.request(EventQueryRequest(st.config.rank, self.event_id, st.clock.now_ns))
        st.clock.advance(hostcost.api_ns("cudaEventQuery"))
        return bool(done)

    def synchronize(self) -> None:
        if self.recorded:
            host_sync(SyncKind.EVENT, self.event_id, self.device_index)

    def elapsed_time(self, end_event: "SimEvent") -> float:
        st = _state.get()
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if not (self.recorded and end_event.recorded):
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        ms = st.channel.request(EventElapsedRequest(st.config.rank, self.event_id, end_event.event_id))
        return float(ms)

    @property
    def cuda_event(self) -> int:
        return self.event_id

    def __repr__(self) -> str:
        return f"<torch.cuda.Event {self.event_id} (simulated)>"
