"""Trace files written by forked children while the CLI goes on with the next one.

After the ranks end, the CLI builds each rank's trace and writes it twice: the Kineto JSON
(render + gzip, ~0.6 s for an 8-step GPT-2 run in Python; ~0.2 s since 2026-12-06 with the
events rendered in C, native/kineto/kineto_events.c) and its part of the Perfetto file (~0.4 s
with its native encoder). Each runs on one core while the machine's other cores are idle, so
each Kineto file is written by a child forked with the trace in memory (copy-on-write, nothing
pickled), while the parent encodes the Perfetto packets of the same rank and builds the next.

The files are the same bytes as when written in this process (the writers are
deterministic). A child's failure (a full disk) comes back as an OSError naming the file; a
signal that stops the writing (KeyboardInterrupt) kills the children and removes their
temporary files. Only on Linux with more than one core; PHANTORA_SERIAL_WRITES=1 writes in
this process, one after the other, as before.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

from tracing.atomic import temporaries_of

log = logging.getLogger(__name__)

SERIAL_ENV = "PHANTORA_SERIAL_WRITES"


def _can_fork() -> bool:
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and (os.cpu_count() or 1) > 1
            and not os.environ.get(SERIAL_ENV))


class ForkedWrites:
    """`submit(write, path, *args)` runs `write(*args)` (which writes `path`, atomically: a
    temporary file renamed at the end) in a child; `__exit__` waits for them all. At most
    `max_children` run at once (default: the cores but one)."""

    def __init__(self, max_children: int | None = None) -> None:
        self.enabled = _can_fork()
        self.max_children = max(1, max_children if max_children is not None else (os.cpu_count() or 2) - 1)
        self._running: dict[int, tuple[int, Path]] = {}  # pid -> (read end of its error pipe, its file)
        self._errors: list[str] = []

    def __enter__(self) -> ForkedWrites:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.wait()
        else:
            self.abort()

    def submit(self, write: Callable[..., Any], path: Path, *args: Any) -> None:
        if not self.enabled:
            try:
                write(*args)
            except OSError as exc:  # named as a child's failure is
                raise OSError(f"{path}: {type(exc).__name__}: {exc}") from exc
            return
        while len(self._running) >= self.max_children:
            self._reap(next(iter(self._running)))
        read_end, write_end = os.pipe()
        with warnings.catch_warnings():  # Python >= 3.12 warns about fork() with threads running
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: write, report a failure on the pipe, never return
            code = 0
            try:
                os.close(read_end)
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it (abort) if need be
                write(*args)
            except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
                code = 1
                try:
                    os.write(write_end, f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")[:4000])
                except OSError:
                    pass
            os._exit(code)
        os.close(write_end)
        self._running[pid] = (read_end, Path(path))

    def _reap(self, pid: int) -> None:
        read_end, path = self._running.pop(pid)
        _, status = os.waitpid(pid, 0)
        try:
            message = os.read(read_end, 4096).decode("utf-8", "replace")
        finally:
            os.close(read_end)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            self._errors.append(f"{path}: {message or f'its writer ended with status {code}'}")

    def wait(self) -> None:
        """Wait for every child; an OSError naming the files whose writing failed."""
        while self._running:
            self._reap(next(iter(self._running)))
        if self._errors:
            errors, self._errors = self._errors, []
            raise OSError("; ".join(errors))

    def abort(self) -> None:
        """Kill the children and remove what they had half written."""
        for pid in list(self._running):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid, (read_end, path) in list(self._running.items()):
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
            os.close(read_end)
            for tmp in temporaries_of(path, pid):  # the child's half-written file (tracing/atomic.py)
                try:
                    tmp.unlink()
                except OSError:
                    pass
        self._running.clear()
        self._errors.clear()
