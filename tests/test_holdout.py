"""Held-out workloads (tools/holdout): simulated step times against the real H200 medians.

A drift guard, not an accuracy claim: the bands are today's measured errors (README there)
with some room, so a change that moves these models far from the real GPU shows up."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import REPO

_spec = importlib.util.spec_from_file_location("holdout_compare", REPO / "tools" / "holdout" / "compare.py")
compare = importlib.util.module_from_spec(_spec)
sys.modules["holdout_compare"] = compare
_spec.loader.exec_module(compare)


@pytest.mark.parametrize("case,band", [
    # today's errors (tools/holdout/compare_2026-12-01.json) against the session-1 medians
    ("mlp_small", 0.35),  # host-bound: -26.9% (the reference host profile is faster than that lease's host)
    ("mlp_tf32", 0.10),  # TF32 GEMMs: +3.0%
    ("llama", 0.20),  # foreach AdamW, GQA, RoPE: -12.1%
    ("cnn", 0.15),  # NCHW batch norm + convolutions: -6.2%
])
def test_held_out_step_time_within_band(case, band):
    real = compare.real_median(case)
    assert real is not None, f"tools/holdout/real_h200/{case}.log missing"
    sim, tail = compare.simulate(case, REPO / "tools" / "holdout", "h200", [])
    assert sim is not None, tail
    assert abs(sim["ms"] - real) / real < band, (case, sim, real)


def test_host_probe_reports_simulated_phase_times(tmp_path):
    """loop.py --host-probe: per-phase host times; under the simulator they are simulated and
    add up to the host's share of the step."""
    import os
    import re
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "phantora_prof", "--no-trace", "python",
                        str(REPO / "tools" / "holdout" / "mlp.py"), "--batch", "256", "--width", "1024",
                        "--steps", "4", "--host-probe"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"step 3 host_ms fwd ([\d.]+) bwd ([\d.]+) mid ([\d.]+) opt ([\d.]+) rest ([\d.]+) total ([\d.]+)",
                  r.stdout)
    assert m, r.stdout[-2000:]
    fwd, bwd, mid, opt, rest, total = map(float, m.groups())
    assert fwd > 0 and bwd > 0 and opt > 0
    assert abs(fwd + bwd + mid + opt + rest - total) < 0.01
    step = float(re.search(r"step 3 time_ms ([\d.]+)", r.stdout).group(1))
    assert total <= step


def test_interleaved_host_errors_are_relative_to_the_anchor_of_each_round():
    """host_interleaved.py --report: a case's time is read against the reference's in the same
    round (a slow spell of the host cancels), the median over rounds, the mean over runs."""
    spec = importlib.util.spec_from_file_location("host_interleaved", REPO / "tools" / "holdout" / "host_interleaved.py")
    hi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hi)

    def run(anchor: list[float], case: list[float]) -> dict:
        return {"gpt_b1": {ph: anchor for ph in hi.PHASES}, "c": {ph: case for ph in hi.PHASES}}

    sim = run([10.0], [20.0])
    # the host ran 2x slower in the second round: the case's ratio to the anchor stays 2
    steady = run([10.0, 20.0, 10.0], [20.0, 40.0, 20.0])
    assert hi.relative_errors(sim, [steady]) == {"c": {ph: 1.0 for ph in hi.PHASES}}
    # two runs: ratios 2.5 (median of 2.5, 2.5, 3.0) and 2.0: their mean 2.25, the simulation's 2.0
    err = hi.relative_errors(sim, [run([10.0, 10.0, 10.0], [25.0, 25.0, 30.0]), steady])["c"]["step"]
    assert err == pytest.approx(2.0 / 2.25)
