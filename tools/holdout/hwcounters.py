"""CPU hardware counters of this process's threads, read with perf_event_open (issue #15).

A device probe's helper: no `perf` binary is needed (the GPU machine has none), only a kernel
and a VM that expose the PMU. `ThreadCounters.open()` opens, for every thread the process has at
that moment, one user-space-only counter per event (cycles, instructions, L1 data / instruction
cache read misses, last-level cache read accesses / misses, branch misses), disabled; `enable()`
and `disable()` bracket the window to count; `read()` sums each event over the threads and
scales by the time each counter was actually scheduled (the PMU may multiplex more events than
it has counters). Threads started after `open()` are not counted: open after warm-up.

    from hwcounters import ThreadCounters
    c = ThreadCounters.open()      # None where the VM exposes no counters (reason in .why_not)
    c.enable(); ...; c.disable(); c.read() -> {"cycles": ..., "instructions": ..., ...}
"""
from __future__ import annotations

import ctypes
import os
import struct

_SYS_PERF_EVENT_OPEN = 298  # x86_64
_IOC_ENABLE, _IOC_DISABLE, _IOC_RESET = 0x2400, 0x2401, 0x2403
_TYPE_HARDWARE, _TYPE_SOFTWARE, _TYPE_HW_CACHE = 0, 1, 3
_L1D, _L1I, _LL = 0, 1, 2
_READ, _MISS, _ACCESS = 0, 1, 0


def _cache(cache: int, result: int) -> int:
    return cache | (_READ << 8) | (result << 16)


EVENTS: dict[str, tuple[int, int]] = {
    "cycles": (_TYPE_HARDWARE, 0),
    "instructions": (_TYPE_HARDWARE, 1),
    "branch_misses": (_TYPE_HARDWARE, 5),
    "l1d_read_misses": (_TYPE_HW_CACHE, _cache(_L1D, _MISS)),
    "l1i_read_misses": (_TYPE_HW_CACHE, _cache(_L1I, _MISS)),
    "llc_read_accesses": (_TYPE_HW_CACHE, _cache(_LL, _ACCESS)),
    "llc_read_misses": (_TYPE_HW_CACHE, _cache(_LL, _MISS)),
    "task_clock_ns": (_TYPE_SOFTWARE, 1),
}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _attr(kind: int, config: int) -> bytes:
    """perf_event_attr (128 bytes): disabled, user space only, total/running times in reads."""
    flags = (1 << 0) | (1 << 5) | (1 << 6)  # disabled, exclude_kernel, exclude_hv
    read_format = 1 | 2  # TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING
    head = struct.pack("=IIQQQQQ", kind, 128, config, 0, 0, read_format, flags)
    return head + b"\0" * (128 - len(head))


def _open(kind: int, config: int, tid: int) -> int:
    buf = ctypes.create_string_buffer(_attr(kind, config), 128)
    fd = _libc.syscall(_SYS_PERF_EVENT_OPEN, buf, ctypes.c_int(tid), ctypes.c_int(-1), ctypes.c_int(-1),
                       ctypes.c_ulong(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)


class ThreadCounters:
    """One counter per (thread, event); summed per event on read."""

    why_not = ""

    def __init__(self, fds: dict[str, list[int]]):
        self.fds = fds

    @classmethod
    def open(cls, events: dict[str, tuple[int, int]] = EVENTS) -> "ThreadCounters | None":
        tids = sorted(int(t) for t in os.listdir("/proc/self/task"))
        fds: dict[str, list[int]] = {}
        for name, (kind, config) in events.items():
            try:
                fds[name] = [_open(kind, config, tid) for tid in tids]
            except OSError as exc:
                if kind == _TYPE_HARDWARE and config in (0, 1):  # no cycles / instructions: no PMU
                    for fs in fds.values():
                        for fd in fs:
                            os.close(fd)
                    cls.why_not = f"{name}: {exc}"
                    return None
                # an event this PMU lacks is left out; the others still count
        return cls(fds)

    def _ioctl(self, request: int) -> None:
        for fs in self.fds.values():
            for fd in fs:
                _libc.ioctl(fd, request, 0)

    def enable(self) -> None:
        self._ioctl(_IOC_RESET)
        self._ioctl(_IOC_ENABLE)

    def disable(self) -> None:
        self._ioctl(_IOC_DISABLE)

    def read(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, fs in self.fds.items():
            total = 0.0
            for fd in fs:
                value, enabled, running = struct.unpack("=QQQ", os.read(fd, 24))
                total += value * (enabled / running) if running else 0.0
            out[name] = total
        return out

    def close(self) -> None:
        for fs in self.fds.values():
            for fd in fs:
                os.close(fd)
        self.fds = {}
