"""Developer aid: what does capturing each aten op cost? (`PHANTORA_OP_CPU=PATH`, issue #18.)

Per op overload, the number of calls that reached the capture mode and the thread CPU time
spent inside its `__torch_dispatch__` (every thread: the script's, autograd's), written as
JSON to PATH.rank<N> when the rank exits. Nested dispatches (an op the mode itself runs) are
counted in their caller's time and again on their own line. Thread CPU time leaves out other
processes and waits, so two runs of one build differ by a few percent where wall time differs
by tens (these machines' neighbours); it still includes the timer's own ~1 us per call.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Callable

ENV = "PHANTORA_OP_CPU"
_CLOCK = time.CLOCK_THREAD_CPUTIME_ID


class OpCpuProfile:
    def __init__(self, path: str) -> None:
        self.path = path
        self._totals: dict[str, list] = {}
        self._lock = threading.Lock()

    def wrap(self, dispatch: Callable) -> Callable:
        """`dispatch` (an unbound `__torch_dispatch__`) timed per op."""
        totals, lock, clock = self._totals, self._lock, time.clock_gettime
        names: dict = {}

        def timed(mode: Any, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            key = names.get(func)
            if key is None:
                key = names[func] = str(func)
            t0 = clock(_CLOCK)
            try:
                return dispatch(mode, func, types, args, kwargs)
            finally:
                dt = clock(_CLOCK) - t0
                with lock:
                    entry = totals.get(key)
                    if entry is None:
                        entry = totals[key] = [0, 0.0]
                    entry[0] += 1
                    entry[1] += dt

        return timed

    def write(self, rank: int) -> str:
        path = f"{self.path}.rank{rank}"
        with self._lock:
            rows = sorted(({"op": k, "calls": n, "cpu_s": round(s, 6)} for k, (n, s) in self._totals.items()),
                          key=lambda r: -r["cpu_s"])
        with open(path, "w") as f:
            json.dump({"ops": rows, "calls": sum(r["calls"] for r in rows),
                       "cpu_s": round(sum(r["cpu_s"] for r in rows), 6)}, f, indent=1)
        return path


ACTIVE: OpCpuProfile | None = None  # set by install(); runtime/dispatch/capture.py wraps its mode with it


def install(path: str) -> OpCpuProfile:
    """Time the capture mode (wrapped when runtime/dispatch/capture.py is imported, which must
    come after this: torch is not imported yet when a rank starts); write PATH.rank<RANK> at
    exit (ranks run atexit handlers, runtime/process/bootstrap.py)."""
    import atexit

    global ACTIVE
    profile = ACTIVE = OpCpuProfile(path)
    atexit.register(lambda: profile.write(int(os.environ.get("RANK", "0"))))
    return profile
