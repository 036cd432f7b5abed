"""Golden traces: a refactoring leaves the simulated traces as they were, byte for byte.

A renovation of the engine, the cost model or the capture path must not move a single event.
This test simulates two small workloads (a tiny GPT on one rank; the same model under DDP on
two) and compares a digest of each rank's trace (canonical JSON, without the ids of the run:
trace_id, baseTimeNanoseconds, traceName) and its step times with tests/data/golden/.

A change that is meant to move the traces (a better model) updates the golden file in the same
commit, and its message says why:

    PHANTORA_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_traces.py

The digests depend on the torch version (the op stream is torch's): they are checked only with
the version that wrote them.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

import pytest

from conftest import SCRIPTS
from tracing.kineto import load_trace

GOLDEN = Path(__file__).resolve().parent / "data" / "golden" / "traces.json"
PY = sys.executable
CASES = {
    "tiny_gpt_1rank": ([], "tiny_gpt.py", ["2"]),
    "ddp_2ranks": (["--nproc-per-node", "2"], "dist_ddp.py", ["2"]),
}


def _torch_version() -> str:
    import torch

    return torch.__version__


def digest(path: Path) -> str:
    doc = load_trace(path)
    for key in ("trace_id", "baseTimeNanoseconds", "traceName"):
        doc.pop(key, None)
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _steps(stdout: str) -> list[str]:
    return re.findall(r"step \d+ time_ms [0-9.]+", stdout)


@pytest.mark.parametrize("case", sorted(CASES))
def test_traces_equal_the_golden_ones(cli, case):
    opts, script, args = CASES[case]
    r = cli(*opts, "--out", "out", PY, str(SCRIPTS / script), *args, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {"steps": sorted(_steps(r.stdout)),
           "traces": {p.name: digest(p) for p in sorted((cli.cwd / "out").glob("rank*.pt.trace.json.gz"))}}
    assert got["traces"], "no trace written"
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("PHANTORA_UPDATE_GOLDEN"):
        golden["torch"] = _torch_version()
        golden.setdefault("cases", {})[case] = got
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        return
    if golden.get("torch") != _torch_version():
        pytest.skip(f"golden traces were written with torch {golden.get('torch')}, this is {_torch_version()}")
    want = golden["cases"][case]
    assert got["steps"] == want["steps"], "step times moved (see the module docstring to update on purpose)"
    assert got["traces"] == want["traces"], ("the traces moved while the step times did not "
                                             "(see the module docstring to update on purpose)")


def test_the_op_cpu_developer_aid_leaves_the_traces_as_they_are(cli):
    """PHANTORA_OP_CPU (runtime/process/op_cpu.py) times the capture mode per op: it writes its
    table, and the simulation it watches is the golden one."""
    golden = json.loads(GOLDEN.read_text())
    if golden.get("torch") != _torch_version():
        pytest.skip(f"golden traces were written with torch {golden.get('torch')}, this is {_torch_version()}")
    opts, script, args = CASES["tiny_gpt_1rank"]
    table = cli.cwd / "opcpu"
    r = cli(*opts, "--out", "out", PY, str(SCRIPTS / script), *args, timeout=600, env={"PHANTORA_OP_CPU": str(table)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert {p.name: digest(p) for p in sorted((cli.cwd / "out").glob("rank*.pt.trace.json.gz"))} == \
        golden["cases"]["tiny_gpt_1rank"]["traces"]
    rows = json.loads((cli.cwd / "opcpu.rank0").read_text())
    ops = {row["op"]: row for row in rows["ops"]}
    assert ops["aten.mm.default"]["calls"] > 0 and ops["aten.mm.default"]["cpu_s"] > 0
    assert rows["calls"] == sum(row["calls"] for row in rows["ops"])


def test_the_python_dispatch_entry_gives_the_golden_traces(cli):
    """The capture mode is entered from C++ through the host model's C extension
    (CaptureMode._native_entry: prim::device answered in C, the rest run with the Python hook
    paused); PHANTORA_PYTHON_DISPATCH_ENTRY=1 enters its Python method directly. Speed only:
    the simulation is the same either way."""
    golden = json.loads(GOLDEN.read_text())
    if golden.get("torch") != _torch_version():
        pytest.skip(f"golden traces were written with torch {golden.get('torch')}, this is {_torch_version()}")
    opts, script, args = CASES["tiny_gpt_1rank"]
    r = cli(*opts, "--out", "out", PY, str(SCRIPTS / script), *args, timeout=600,
            env={"PHANTORA_PYTHON_DISPATCH_ENTRY": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert {p.name: digest(p) for p in sorted((cli.cwd / "out").glob("rank*.pt.trace.json.gz"))} == \
        golden["cases"]["tiny_gpt_1rank"]["traces"]
