"""Benchmarks of the simulation itself (not in the default run: `pytest -m benchmark tests/bench_runtime.py`).

Figures: captured ops per second and simulated steps per second for the GPT example, with
start-up (imports, building the model on the CPU) separated out by running 2 and 6 steps.
"""
from __future__ import annotations

import json
import sys
import time

import pytest

from conftest import REPO, run_cli

pytestmark = pytest.mark.benchmark

GPT = str(REPO / "examples" / "gpt" / "train.py")


def _run(tmp_path, steps: int, *extra: str) -> tuple[float, dict]:
    summary = tmp_path / f"summary{steps}.json"
    t0 = time.perf_counter()
    r = run_cli(["--no-trace", "--summary-json", str(summary), sys.executable, GPT, "--steps", str(steps),
                 *extra], tmp_path, timeout=900)
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    return wall, json.loads(summary.read_text())


@pytest.mark.parametrize("layers", [2, 12])
def test_bench_gpt_steps_per_second(benchmark, tmp_path, layers):
    wall2, s2 = _run(tmp_path, 2, "--layers", str(layers))

    def six():
        return _run(tmp_path, 6, "--layers", str(layers))

    wall6, s6 = benchmark.pedantic(six, rounds=1, iterations=1)
    per_step = (wall6 - wall2) / 4
    ops_per_step = (s6["ranks"][0]["ops"] - s2["ranks"][0]["ops"]) / 4
    benchmark.extra_info.update({
        "layers": layers,
        "wall_s_per_simulated_step": round(per_step, 3),
        "simulated_steps_per_s": round(1 / per_step, 3) if per_step > 0 else None,
        "captured_ops_per_step": ops_per_step,
        "captured_ops_per_s": round(ops_per_step / per_step) if per_step > 0 else None,
        "startup_s": round(wall2 - 2 * per_step, 2),
    })
    print(benchmark.extra_info)
