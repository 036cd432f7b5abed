"""Kernel sources for cost.estimate: a kernel database, read-only or filled by measuring.

`DatabaseSource` answers from a KernelDB (`--kernel-db DB`); `MeasuringSource` also sends
each signature the database lacks to a measuring worker on the real GPU (worker.py) and
keeps the answer (`--kernel-times measure`, `phantora-prof db build`). New entries are
merged into the database file when the rank ends, under a file lock, so ranks of one run
(and runs after it) share what was measured. torch-free: the rank imports it with its
CUDA faked; the worker is another process.
"""
from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from phantora_prof.cost.kernel_db import Entry, KernelDB, MeasuredKernel, signature
from phantora_prof.errors import PhantoraError
from phantora_prof.measure.gpu_names import gpu_key_for

log = logging.getLogger(__name__)

# variables that make a child process a simulated rank: the worker must be a plain torch process
_RANK_ENV = ("PHANTORA_RANK_CONFIG", "PHANTORA_COORDINATOR", "PHANTORA_EPOCH_NS")


class MeasureError(PhantoraError):
    """Measuring on the GPU is impossible here (no GPU, the worker cannot start)."""


class DatabaseSource:
    """Kernel times looked up in a database by exact signature; misses go to the models."""

    def __init__(self, db: KernelDB, path: Path | None = None):
        self.db = db
        self.path = path
        self.hits = 0
        self.misses = 0
        self._warned: set = set()

    def warn_other_arch(self, db_gpu: str, gpu: str) -> None:
        """Said once per pair: the database cannot stand in for another architecture's kernels."""
        if (db_gpu, gpu) not in self._warned:
            self._warned.add((db_gpu, gpu))
            log.warning("the kernel database was measured on %s, another architecture than the simulated %s: "
                        "it is not used (kernel times come from the models)", db_gpu, gpu)

    def kernels(self, op: Any) -> tuple[MeasuredKernel, ...] | None:
        e = self.db.get(signature(op))
        if e is None or e.error is not None:
            self.misses += 1
            return None
        self.hits += 1
        return e.kernels

    def close(self) -> None:
        pass


class MeasuringSource(DatabaseSource):
    """Like DatabaseSource, but a miss is measured on the real GPU now and remembered."""

    def __init__(self, path: Path, repeats: int = 5, warmup: int = 2):
        super().__init__(KernelDB.load_or_empty(path), Path(path))
        self.repeats = repeats
        self.warmup = warmup
        self.new = KernelDB(device=dict(self.db.device), gpu=self.db.gpu)
        self.worker: WorkerClient | None = None
        self.measured = 0
        self.failed = 0
        self._lock = threading.Lock()  # ranks with threads (DCP stagers) may estimate concurrently
        atexit.register(self.close)

    def kernels(self, op: Any) -> tuple[MeasuredKernel, ...] | None:
        sig = signature(op)
        with self._lock:
            e = self.db.get(sig)
            if e is None:
                e = self._measure(sig)
        if e.error is not None:
            self.misses += 1
            return None
        self.hits += 1
        return e.kernels

    def _measure(self, sig: dict) -> Entry:
        if self.worker is None:
            self.worker = WorkerClient()
            dev = self.worker.device
            if not self.db.device:
                self.db.device = self.new.device = dev
                self.db.gpu = self.new.gpu = gpu_key_for(dev.get("name", ""))
            elif self.db.device.get("name") != dev.get("name"):
                raise MeasureError(f"{self.path} holds kernels measured on {self.db.device.get('name')}, "
                                   f"but this machine's GPU is {dev.get('name')}: use another database file")
        res = self.worker.measure(sig, self.repeats, self.warmup)
        if "error" in res:
            e = Entry(sig, error=res["error"])
            self.failed += 1
            log.info("could not measure %s: %s (its time comes from the models)", sig["op"], res["error"])
        else:
            ks = tuple(MeasuredKernel(k[0], k[1], int(k[2]), tuple(k[3]), tuple(k[4]), int(k[5]), int(k[6]),
                                      int(k[7]), k[8]) for k in res["kernels"])
            e = Entry(sig, ks, int(res.get("reps", 0)))
            self.measured += 1
        self.db.add(e)
        self.new.add(e)
        return e

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        if self.path is None or not self.new.entries:
            return
        save_merged(self.new, self.path)
        self.new = KernelDB(device=dict(self.db.device), gpu=self.db.gpu)


def check_can_measure(db_path: Path | None, simulated_gpu: str) -> dict:
    """Start a worker once: MeasureError if this machine cannot measure or the DB is another GPU's."""
    w = WorkerClient()
    w.close()
    dev = w.device
    if db_path is not None and Path(db_path).exists():
        db = KernelDB.load(db_path)
        if db.device and db.device.get("name") != dev.get("name"):
            raise MeasureError(f"{db_path} holds kernels measured on {db.device.get('name')}, but this "
                               f"machine's GPU is {dev.get('name')}: give another --kernel-db")
    key = gpu_key_for(dev.get("name", ""))
    if key is not None and key != simulated_gpu:
        log.warning("measuring on a %s while simulating --gpu %s: measured times are scaled by the roofline "
                    "ratio of the two (same architecture) or not used (another one)", key, simulated_gpu)
    return dev


def save_merged(new: KernelDB, path: Path) -> None:
    """Merge `new` into the database file at `path` (created if absent) under a file lock."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "a+") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            merged = KernelDB.load_or_empty(path)
            merged.merge(new)
            merged.save(path)
        finally:
            fcntl.flock(lk, fcntl.LOCK_UN)


class WorkerClient:
    """A measuring worker process on the real GPU, restarted if a CUDA error kills it."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.device: dict = {}
        self._next_id = 0
        self._start()

    def _start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in _RANK_ENV}
        env["PYTHONUNBUFFERED"] = "1"
        if "PHANTORA_MEASURE_CUDA_VISIBLE_DEVICES" in env:  # ranks may run with the GPU hidden; the worker needs it
            env["CUDA_VISIBLE_DEVICES"] = env["PHANTORA_MEASURE_CUDA_VISIBLE_DEVICES"]
        self.proc = subprocess.Popen([sys.executable, "-m", "phantora_prof.measure.worker"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, text=True)
        first = self._read()
        if first is None or "fatal" in first:
            why = (first or {}).get("fatal", "the measuring worker exited before it was ready")
            self.close()
            raise MeasureError(f"cannot measure kernel times on this machine: {why}. "
                               "--kernel-times measure and `db build` need a CUDA GPU; "
                               "elsewhere use the built-in models (the default) or --kernel-db DB")
        self.device = first.get("device", {})

    def _read(self) -> dict | None:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            return None
        return json.loads(line)

    def measure(self, sig: dict, repeats: int, warmup: int) -> dict:
        for attempt in (0, 1):
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            self._next_id += 1
            try:
                self.proc.stdin.write(json.dumps({"id": self._next_id, "sig": sig, "repeats": repeats,
                                                  "warmup": warmup}) + "\n")
                self.proc.stdin.flush()
                res = self._read()
            except (BrokenPipeError, OSError):
                res = None
            if res is not None:
                if "error" in res and _fatal(res["error"]):
                    self.close()  # the worker exits after a CUDA error; the next call starts a fresh one
                return res
            self.close()  # the worker died while measuring: once more in a fresh one, then give up
        return {"error": "the measuring worker died twice while replaying this call"}

    def close(self) -> None:
        """Close the worker's stdin (it exits) and reap it, waiting in real time.

        The rank's time functions are simulated (runtime/process/clock.py: sleep advances the
        virtual clock), so Popen.wait(timeout=...) would burn simulated seconds; this polls
        with the real sleep instead and never adds simulated time.
        """
        p, self.proc = self.proc, None
        if p is None:
            return
        sleep, mono = _real_time("sleep"), _real_time("monotonic")
        try:
            if p.stdin:
                p.stdin.close()
        except OSError:
            pass
        deadline = mono() + 30.0
        while p.poll() is None and mono() < deadline:
            sleep(0.01)
        if p.poll() is None:
            p.kill()
            p.wait()


def _real_time(name: str):
    """The real `time.<name>` even inside a rank whose clock is simulated."""
    try:
        from phantora_prof.runtime.process.clock import real_time
    except ImportError:  # pragma: no cover - the runtime package is always there
        import time

        return getattr(time, name)
    return real_time(name)


def _fatal(msg: str) -> bool:
    return "CUDA error" in msg or "device-side assert" in msg or "AcceleratorError" in msg
