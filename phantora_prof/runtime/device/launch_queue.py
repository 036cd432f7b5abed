"""CUDA's launch queue is bounded: a host that runs far ahead of its GPU blocks.

cudaLaunchKernel (and the copies and memsets queued the same way) returns at once while the
queue has room; once it holds `launch_queue_depth` launches (the GPU profile's, cost/profiles.py)
the next launch waits until the GPU has finished one. So a script that never synchronizes runs
at most that far ahead of its GPU, and its own clock readings (`time.perf_counter()` around a
step with no `.item()` in it) follow the GPU's pace, as on the real machine.

The rank counts its launches. Once more than the depth were launched since the host last waited
for its GPU (any synchronization), a launch asks the coordinator (SyncKind.QUEUE) when the launch
`depth` back is done, and waits until then; the reply also carries the end times of the launches
after that one, already timed, which are the turns of the rank's next launches: each waits for
its turn on the rank's own clock, without asking again, until they are used up. Launches are
counted per rank, not per stream or device (one queue, an approximation for scripts that drive
several GPUs from one process). Where the waits fall depends on the launch sequence only, so runs
stay reproducible.
"""
from __future__ import annotations

from collections import deque


class LaunchQueue:
    """One rank's launches against its GPU's launch queue."""

    def __init__(self, depth: int, clock) -> None:
        self.depth = depth
        self.clock = clock  # runtime.process.clock.VirtualClock
        self.launched = 0
        self._at_sync = 0  # launches when the host last waited for its GPU
        self._turns: deque[int] = deque()  # when each of the next launches may go
        self._waited = 0  # host time spent on turns, not yet reported to the coordinator

    def may_wait(self, n: int) -> bool:
        """Whether `n` more launches would find the queue full (else `launched += n` is all
        launch() would do)."""
        return self.launched + n - self._at_sync > self.depth

    def launch(self, n: int, device: int) -> None:
        """`n` launches were just issued on `device`: each beyond the queue's room waits."""
        self.launched += n
        over = self.launched - self._at_sync - self.depth
        if over <= 0:
            return
        for _ in range(min(n, over)):
            if not self._turns:
                from phantora_prof.runtime.device.streams import queue_turns

                ret, turns = queue_turns(self.depth, device, self.take_waited())
                self.clock.advance_to(ret)
                self._turns.extend(turns)
                continue
            t = self._turns.popleft()
            now = self.clock.now_ns
            if t > now:
                self._waited += t - now
                self.clock.advance_to(t)

    def take_waited(self) -> int:
        """Host time waited on turns since the last report (the coordinator counts it as waiting)."""
        w, self._waited = self._waited, 0
        return w

    def synced(self) -> None:
        """The host waited for its GPU: what it had queued is done, or no longer ahead."""
        self._at_sync = self.launched
        self._turns.clear()
