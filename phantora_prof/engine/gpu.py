"""Simulated GPU timelines: per-stream FIFO queues, events, and synchronization.

Semantics follow CUDA's:
- work on one stream runs in launch order, one item at a time;
- an item starts no earlier than its launch time plus the launch latency, the end of the
  previous item on its stream plus a small retire/start gap, and every event the stream was
  told to wait for;
- an event recorded on a stream completes when all work enqueued on that stream before
  the record has completed;
- synchronizing a stream / an event / the device blocks the host until that work is done.

Approximation (documented in the README): compute kernels on different streams of one GPU
run concurrently without slowing each other down; the real GPU shares SMs and HBM between
them. NCCL kernels do slow the kernels beside them (engine.contention, through `finish`).
Copies use the copy engines and so genuinely overlap with compute.

Everything is integer nanoseconds, and each method is a pure function of the call sequence,
so a timeline is reproducible.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

# Two numbers of the simulated GPU (its profile, cost/data/profiles/<gpu>.json, says where
# each comes from): a kernel cannot start sooner than `launch_latency_ns` after its launch
# call begins (the H200 references show >= 6 us under the profiler; without it CUDA's launch
# latency is a few microseconds), and back-to-back items on one stream are `kernel_gap_ns`
# apart, the time the GPU takes to retire one kernel and start the next queued one (median
# 1.18 us in gpt_small; over gpt.py's ~840 kernels per step this is ~1 ms of the 1.6 ms by
# which the real step exceeds its kernel time).


@dataclass(slots=True)
class Activity:
    """One item of GPU work with its resolved times."""

    stream: int
    start_ns: int
    end_ns: int


@dataclass(slots=True)
class StreamState:
    stream: int
    tail_ns: int = 0  # completion time of the last item enqueued
    pending_waits: list[int] = field(default_factory=list)  # event times to wait for
    busy_ns: int = 0  # total time spent running work


@dataclass
class SimulatedGpu:
    """One device: its streams and events (events are per-process ids, shared namespace)."""

    device: int
    launch_latency_ns: int
    kernel_gap_ns: int
    streams: dict[int, StreamState] = field(default_factory=dict)

    def stream(self, stream: int) -> StreamState:
        state = self.streams.get(stream)
        if state is None:
            state = StreamState(stream)
            self.streams[stream] = state
        return state

    def enqueue(self, stream: int, launch_ns: int, duration_ns: int,
                finish: Callable[[int, int], int] | None = None, gap_ns: int | None = None) -> Activity:
        """Run `duration_ns` of work on `stream`, launched at host time `launch_ns`. `finish`
        (start, work) -> end, when given, says when the work ends if it does not run alone
        (engine.contention: NCCL kernels holding SMs). `gap_ns` replaces the gap after the
        stream's previous item (a CUDA graph's nodes follow each other more closely)."""
        s = self.stream(stream)
        gap = self.kernel_gap_ns if gap_ns is None else gap_ns
        start = max(launch_ns + self.launch_latency_ns, s.tail_ns + gap if s.tail_ns else 0)
        if s.pending_waits:
            start = max(start, max(s.pending_waits))
            s.pending_waits.clear()
        end = start + max(0, duration_ns) if finish is None else finish(start, max(0, duration_ns))
        s.tail_ns = end
        s.busy_ns += end - start
        return Activity(stream, start, end)

    def record_event(self, stream: int, host_ns: int) -> int:
        """Completion time of an event recorded on `stream` at host time `host_ns`."""
        s = self.stream(stream)
        ready = max(s.tail_ns, host_ns)
        if s.pending_waits:
            # A wait followed by a record: the record also completes after the awaited event.
            ready = max(ready, max(s.pending_waits))
        return ready

    def wait_event(self, stream: int, event_ns: int | None) -> None:
        """Make the next work on `stream` wait for an event completing at `event_ns`."""
        if event_ns is None:  # waiting on a never-recorded event is a no-op in CUDA
            return
        self.stream(stream).pending_waits.append(event_ns)

    def stream_done_ns(self, stream: int) -> int:
        s = self.stream(stream)
        done = s.tail_ns
        if s.pending_waits:
            done = max(done, max(s.pending_waits))
        return done

    def device_done_ns(self) -> int:
        return max((self.stream_done_ns(sid) for sid in self.streams), default=0)

    def busy_ns(self) -> int:
        return sum(s.busy_ns for s in self.streams.values())
