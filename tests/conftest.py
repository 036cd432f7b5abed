"""Shared fixtures: running the CLI in a subprocess, finding the reference traces."""
from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phantora_prof.calibrate.reference import shared_dir

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "tests" / "scripts"
SHARED = shared_dir(REPO)  # ../shared beside the repo (as CI lays it), else /work/shared
REFERENCE = SHARED / "reference" / "h200"


def run_cli(args: list[str], cwd: Path, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `phantora-prof ARGS` as a user would (a fresh process), capturing its output."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env["COLUMNS"] = "200"
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "phantora_prof", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli(tmp_path):
    def _run(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
        return run_cli(list(args), tmp_path, timeout=timeout, env=env)

    _run.cwd = tmp_path
    return _run


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children (and theirs): benchmarks
    take the difference around a simulation."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def own_cpu_s() -> float:
    """User + system CPU seconds of this process so far: benchmarks that run their work in
    process take the difference around it."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def spread(values, digits: int = 3) -> dict:
    """Median, smallest and largest of a benchmark's rounds."""
    import statistics

    values = sorted(values)
    return {"median": round(statistics.median(values), digits), "min": round(values[0], digits),
            "max": round(values[-1], digits)}


def reference_trace(name: str) -> Path:
    path = REFERENCE / name / "trace.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"reference trace {path} not available (../shared is laid beside the repo)")
    return path


@contextlib.contextmanager
def big_run_lock():
    """One many-rank simulation at a time on this machine (2 cores): tests and manual runs
    (`flock /tmp/phantora-bigrun.lock ...`) take the same lock."""
    with open("/tmp/phantora-bigrun.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def pytest_configure(config) -> None:
    """Benchmarks measure one process at a time: pytest-benchmark switches itself off under
    pytest-xdist's workers (on by default, pyproject.toml), so a benchmark run must say -n 0."""
    marks = config.getoption("markexpr", "") or ""
    workers = config.getoption("numprocesses", None)
    if "benchmark" in marks.replace("not benchmark", "") and workers not in (None, 0):
        raise pytest.UsageError("benchmarks run without pytest-xdist's workers: add -n 0 "
                                "(python -m pytest -m benchmark -n 0 tests/bench_runtime.py ...)")
