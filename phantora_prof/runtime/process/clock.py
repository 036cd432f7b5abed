"""The virtual host clock of a rank, and the patches that make Python's clocks read it.

The clock starts at a fixed origin so that traces of two runs line up (timestamps in the
trace are this clock's values, as kineto uses the monotonic clock); `time.time()` and
`datetime.now()` read the real wall-clock time of the start of the run plus simulated
elapsed time. Threading timeouts stay real (they bound real waits, e.g. in DataLoader).
"""
from __future__ import annotations

import datetime as _dt
import sys
import threading
import time as _time

# Simulated time starts at 1000 s on the "monotonic" axis.
from phantora_prof.protocol import ORIGIN_NS  # noqa: F401 - where simulated time starts


class VirtualClock:
    """Integer-ns simulated host time; advanced only by modelled costs and GPU waits."""

    def __init__(self, origin_ns: int = ORIGIN_NS, epoch_ns: int | None = None):
        self._now = origin_ns
        self.origin_ns = origin_ns
        self.epoch_ns = _time.time_ns() if epoch_ns is None else epoch_ns
        self._lock = threading.Lock()
        self._pending = None  # () -> ns of host work done since the last read (runtime/host/pyhost.py)
        self._mirror = None  # a ctypes.c_int64 that follows the clock (the native op recorder's)
        self._slept = 0  # the program's time.sleep since the coordinator last heard (take_slept)

    def set_pending(self, pending) -> None:
        """Host work that is counted, not timed (the interpreter's), is charged at every read."""
        self._pending = pending

    def mirror(self, cell) -> None:
        """Keep `cell.value` (a ctypes.c_int64) equal to the clock from now on."""
        self._mirror = cell
        if cell is not None:
            cell.value = self._now

    @property
    def now_ns(self) -> int:
        self.charge_pending()
        return self._now

    def charge_pending(self) -> None:
        """Advance by the counted host work of the calling thread since it was last charged
        (every read does this; callers that only need the charge at a fixed point call it)."""
        pending = self._pending
        if pending is not None:
            ns = pending()
            if ns:
                with self._lock:
                    self._now += ns
                    if self._mirror is not None:
                        self._mirror.value = self._now

    def advance(self, ns: int) -> int:
        with self._lock:
            self._now += max(0, int(ns))
            if self._mirror is not None:
                self._mirror.value = self._now
            return self._now

    def advance_to(self, ns: int) -> int:
        with self._lock:
            if ns > self._now:
                self._now = int(ns)
                if self._mirror is not None:
                    self._mirror.value = self._now
            return self._now

    def sleep(self, ns: int) -> int:
        """The program sleeps: simulated time passes, and the host is idle, not busy (the
        summary's "host busy" leaves it out, as it leaves out waits for the GPU)."""
        self._slept += max(0, int(ns))
        return self.advance(ns)

    def take_slept(self) -> int:
        """Sleep since the last call (reported with the rank's next synchronisation)."""
        ns, self._slept = self._slept, 0
        return ns

    def elapsed_ns(self) -> int:
        return self._now - self.origin_ns

    def wall_ns(self) -> int:
        """Simulated wall-clock (epoch) time."""
        return self.epoch_ns + self.elapsed_ns()


# Packages whose sleeps poll for a lock held by another process (e.g. `datasets` preparing
# its cache under a filelock while the other ranks wait).
LOCK_POLLING_PACKAGES = frozenset({"filelock", "fasteners", "portalocker", "oslo_concurrency"})


def _polls_for_a_lock(frame) -> bool:
    """True when the caller of time.sleep is a lock library polling for a held lock.

    Such a wait is real: it lasts as long as the holder (another simulated rank on this
    machine) takes in *real* time, which depends on the simulating machine's speed and
    load, not on the simulated cluster. The holder's own Python work costs no simulated
    time (only captured ops do), so charging the waiters their real polling time would be
    inconsistent and makes runs non-deterministic: 8 ranks loading a fresh `datasets`
    cache spent 12-17 simulated seconds in 748 polls of 50 ms. So these sleeps wait for
    real and leave the simulated clock alone. Approximate: a lock timeout measured with
    time.perf_counter() never expires while the clock stands still.
    """
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name.partition(".")[0] in LOCK_POLLING_PACKAGES


def _on_the_program_thread() -> bool:
    """Whether the caller is the thread the script runs on. The virtual clock is that thread's
    host timeline: a sleep there is the program waiting. Another thread's sleep does not hold it
    up (a progress bar's refresh loop: Lightning's RichProgressBar sleeps 10 ms at a time on its
    own thread, which advanced the clock ~9,000 times in a 32-step run, 95 s of simulated time
    for a step of a few ms, and as often as the real machine let it: not deterministic), so it
    waits in real time and leaves the clock alone. Approximate: a thread the program waits for
    that sleeps to pace its work does not delay the program in simulated time."""
    return threading.current_thread() is threading.main_thread()


def real_sleep(seconds: float) -> None:
    """Sleep in real time (for phantora-prof's own waits), whether or not the clock is installed."""
    _real.get("sleep", _time.sleep)(seconds)


_installed: VirtualClock | None = None
_real = {}
# > 0 while torch.compile compiles (runtime/compile/backend.py): its waits (cache file locks,
# worker processes) are the compiler's, charged as its compile time, not slept on the clock
compiling = 0
_datetime_classes: tuple[type, type] = (_dt.datetime, _dt.datetime)  # (real, simulated)


def install(clock: VirtualClock) -> None:
    """Make time.*, time.*_ns and datetime.now/utcnow/today read the virtual clock."""
    global _installed
    if _installed is not None:
        _installed = clock
        return
    _installed = clock
    for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns",
                 "sleep", "process_time", "process_time_ns", "thread_time", "thread_time_ns"):
        _real[name] = getattr(_time, name)

    def mono() -> float:
        return _installed.now_ns / 1e9

    def mono_ns() -> int:
        return _installed.now_ns

    def wall() -> float:
        return _installed.wall_ns() / 1e9

    def wall_ns() -> int:
        return _installed.wall_ns()

    def sleep(seconds: float) -> None:
        # Sleeping takes simulated time; yield the real CPU briefly so threads progress.
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        if compiling or _polls_for_a_lock(sys._getframe(1)) or not _on_the_program_thread():
            _real["sleep"](seconds)
            return
        _installed.sleep(int(seconds * 1e9))
        _real["sleep"](0)

    _time.perf_counter = mono
    _time.perf_counter_ns = mono_ns
    _time.monotonic = mono
    _time.monotonic_ns = mono_ns
    _time.time = wall
    _time.time_ns = wall_ns
    _time.sleep = sleep
    # CPU-time clocks follow the virtual host time too: the simulated host is always busy.
    _time.process_time = lambda: _installed.elapsed_ns() / 1e9
    _time.process_time_ns = lambda: _installed.elapsed_ns()
    _time.thread_time = _time.process_time
    _time.thread_time_ns = _time.process_time_ns

    real_datetime = _dt.datetime

    class datetime(real_datetime):  # noqa: N801 - must keep the stdlib name
        """datetime whose now()/utcnow()/today() read simulated time."""

        __slots__ = ()  # keep datetime's C struct size

        @classmethod
        def now(cls, tz=None):
            return cls.fromtimestamp(_installed.wall_ns() / 1e9, tz)

        @classmethod
        def utcnow(cls):
            return cls.fromtimestamp(_installed.wall_ns() / 1e9, _dt.timezone.utc).replace(tzinfo=None)

        @classmethod
        def today(cls):
            return cls.fromtimestamp(_installed.wall_ns() / 1e9)

    datetime.__name__ = "datetime"
    datetime.__qualname__ = "datetime"
    datetime.__module__ = "datetime"
    _dt.datetime = datetime
    _real_datetime_for_extensions(real_datetime, datetime)
    _rebind_early_imports()


# Modules that copy a clock function at import (`from time import time`) and may already be
# imported when the clock is installed (torch's own imports bring in tqdm): their copy is
# pointed at the simulated clock, so that the script's progress bars and timeit report
# simulated time. Not queue, threading, subprocess: their timeouts bound real waits.
_EARLY_COPIES = (("tqdm.std", "time", "time"), ("timeit", "default_timer", "perf_counter"))


def _rebind_early_imports() -> None:
    for module, attr, name in _EARLY_COPIES:
        mod = sys.modules.get(module)
        if mod is not None and getattr(mod, attr, None) is _real.get(name):
            setattr(mod, attr, getattr(_time, name))


def _real_datetime_for_extensions(real_datetime: type, patched: type) -> None:
    """C extensions imported from now on see the real `datetime.datetime`.

    Cython extensions (pandas' tslibs, pulled in by `datasets`) read `datetime.datetime`
    from the module when they load and use it as the base of their own C types
    (pandas.Timestamp); a Python subclass there makes them crash (SIGSEGV in the garbage
    collector). So while an extension module initializes, `datetime.datetime` is the real
    class again, and Python code keeps the simulated one. Approximate: such extensions'
    own clocks (e.g. `pandas.Timestamp.now()`) read real time.
    """
    from importlib import machinery

    global _datetime_classes
    _datetime_classes = (real_datetime, patched)
    loader = machinery.ExtensionFileLoader
    if getattr(loader, "_phantora_patched", False):
        return

    def wrap(method):
        def call(self, *args, **kwargs):
            real, sim = _datetime_classes
            if _dt.datetime is not sim:
                return method(self, *args, **kwargs)
            _dt.datetime = real
            try:
                return method(self, *args, **kwargs)
            finally:
                _dt.datetime = sim
        return call

    loader.create_module = wrap(loader.create_module)  # single-phase init runs here
    loader.exec_module = wrap(loader.exec_module)  # multi-phase init runs here
    loader._phantora_patched = True


def real_time(name: str):
    """The original time function (for our own bookkeeping, e.g. progress output)."""
    return _real.get(name) or getattr(_time, name)
