"""GPU memory over the whole run, sent to the coordinator as counter samples.

Every allocation and free of the allocator models (runtime/device/allocator.py) ends in one hook here:
it records (host time, device, total allocated, total reserved), one sample per host time (the
allocations of one op share its time, the last totals count), and sends them in batches
(`protocol.MemoryCounters`). They become the memory counter tracks of `run.pftrace` and the
report's `memory.png`; the Kineto traces are unchanged (torch writes memory only as the
`[memory]` events of a profile_memory window, which the profiler still gets: `listener`).
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from phantora_prof.protocol import MemoryCounters
from phantora_prof.runtime.device import allocator
from phantora_prof.runtime.process import state as _state

BATCH = 1024

_lock = threading.Lock()
_samples: list[tuple[int, int, int, int]] = []
# the profiler's [memory] events while a profile_memory window may record: (device, addr, delta, allocated, reserved)
listener: Callable[[int, int, int, int, int], None] | None = None


def _record(device: int, addr: int, delta: int, allocated: int, reserved: int) -> None:
    st = _state.get()
    t = st.clock.now_ns
    batch = None
    with _lock:
        last = _samples[-1] if _samples else None
        if last is not None and last[0] == t and last[1] == device:
            _samples[-1] = (t, device, allocated, reserved)
        else:
            _samples.append((t, device, allocated, reserved))
        if len(_samples) >= BATCH:
            batch = take()
    if batch:
        st.channel.send(MemoryCounters(st.config.rank, batch))
    if listener is not None:
        listener(device, addr, delta, allocated, reserved)


def take() -> list[tuple[int, int, int, int]]:
    """The samples not sent yet (and forget them)."""
    global _samples
    out, _samples = _samples, []
    return out


def final_message(rank: int, blocking: bool = True) -> Any:
    """What is left to send at the end of the run (None if nothing). A signal handler passes
    blocking=False: the code it interrupted may hold the lock."""
    if not _lock.acquire(blocking):
        return None
    try:
        batch = take()
    finally:
        _lock.release()
    return MemoryCounters(rank, batch) if batch else None


def install() -> None:
    st = _state.get()
    for device in range(st.config.device_count):
        allocator.model(device).on_event = (
            lambda addr, delta, allocated, reserved, _d=device: _record(_d, addr, delta, allocated, reserved))
