"""Developer aid: where does a rank's own time go? cProfile on every thread that runs the
simulator's Python (`PHANTORA_CPROFILE=PREFIX`); the capture mode's CPU per aten op
(`PHANTORA_OP_CPU=PATH`, runtime/process/op_cpu.py).

The script's thread is profiled from the start of the script; a thread the capture mode first
sees handling an op (autograd's, which runs the whole backward) gets its own profiler from
that op on. At exit the script thread's statistics go to PREFIX.rank<N>, every other
thread's, merged, to PREFIX.rank<N>.threads (read both with `python -m pstats`)."""
from __future__ import annotations

import cProfile
import os
import threading

ENV = "PHANTORA_CPROFILE"


class SelfProfile:
    def __init__(self, prefix: str, rank: int):
        self.prefix = prefix
        self.rank = rank
        self.main = cProfile.Profile()
        self.main_ident = threading.get_ident()
        self.others: list[cProfile.Profile] = []
        self._seen = threading.local()
        self._lock = threading.Lock()

    def start(self) -> None:
        self.main.enable()

    def on_thread(self) -> None:
        """Called by the capture mode for each op: profile this thread from now on (once)."""
        if getattr(self._seen, "on", False):
            return
        self._seen.on = True
        if threading.get_ident() == self.main_ident:
            return
        p = cProfile.Profile()
        with self._lock:
            self.others.append(p)
        p.enable()  # this thread only

    def stop_and_write(self) -> list[str]:
        """Stop (the other threads are idle by now) and write the statistics; returns the paths."""
        import pstats

        self.main.disable()
        paths = [f"{self.prefix}.rank{self.rank}"]
        self.main.dump_stats(paths[0])
        with self._lock:
            others = list(self.others)
        if others:
            for p in others:
                p.create_stats()  # snapshots; the threads' hooks stay, they run no more Python here
            stats = pstats.Stats(others[0])
            for p in others[1:]:
                stats.add(p)
            paths.append(f"{self.prefix}.rank{self.rank}.threads")
            stats.dump_stats(paths[1])
        return paths


def from_env(rank: int) -> SelfProfile | None:
    prefix = os.environ.get(ENV)
    return SelfProfile(prefix, rank) if prefix else None
