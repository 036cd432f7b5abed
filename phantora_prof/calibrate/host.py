"""Fit a host profile (cost/data/hosts/*.json) to step times measured on a real host (issue #15).

    phantora-prof calibrate host --measured DIR --reference WORKLOADS [--fit a,b,c] [--out FILE]

The simulated host time of a step is linear in the profile's parameters when the step is
host-bound: T = T0 + (k_fwd - 1) dF + a dP + b dC, where T0 is the step with the tables as
measured (k_fwd = 1) and no Python charged, dF the step's share of the script thread's per-op
costs, dP and dC its counted Python-level and C-level calls (runtime/host/pyhost.py). Each is read
off the simulator itself, by simulating every workload with one parameter moved at a time.
The fit minimizes the relative errors against the measured medians of host-bound workloads
(least squares, parameters kept positive); the workloads not fitted are simulated with the
result and reported separately (held out).

Measured medians are the RESULT lines (`median_steady_ms`) of logs in --measured, one file
per case (tools/holdout/real_h200/session4/ holds the ones measured on the H200 host on
2026-12-01 with tools/holdout/*.py and the reference gpt.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HOLDOUT = ROOT / "tools" / "holdout"

# case -> (script: "gpt.py" (the reference workload) or a tools/holdout script, args)
CASES: dict[str, tuple[str, list[str]]] = {
    "gpt": ("gpt.py", []),
    "gpt_b1": ("gpt.py", ["--batch", "1", "--seq", "64"]),
    "gpt_tiny": ("gpt.py", ["--layers", "4", "--dim", "256", "--heads", "4", "--seq", "256", "--batch", "8"]),
    "gpt_b4": ("gpt.py", ["--batch", "4"]),
    "mlp_small": ("mlp.py", ["--batch", "256", "--width", "1024"]),
    "vit_b16": ("vit.py", ["--batch", "16"]),
    "cnn": ("cnn.py", []),
    "loader0": ("hostbound.py", ["--case", "loader0"]),
    "loader4": ("hostbound.py", ["--case", "loader4"]),
    "trainer": ("hostbound.py", ["--case", "trainer"]),
    "pyheavy": ("hostbound.py", ["--case", "pyheavy"]),
}
FIT = ("gpt_b1", "gpt_tiny", "gpt_b4", "mlp_small", "pyheavy", "loader0")


def measured(case: str, directory: Path) -> float | None:
    p = directory / f"{case}.log"
    if not p.exists():
        return None
    for line in p.read_text().splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])["median_steady_ms"]
    return None


def profile(forward: float = 1.0, py_call_ns: float = 0.0, opcode_ns: float = 0.0, speed: float = 1.0,
            name: str = "fit") -> dict:
    """A host profile: `speed` scales every host cost (the measured host against the reference
    host), `forward` the script thread's per-op costs on top, Python costs are per call."""
    return {"name": name, "scale": {"all": speed, "forward": forward},
            "python": {"py_call_ns": py_call_ns, "opcode_ns": opcode_ns}}


def simulate(case: str, prof: dict, reference: Path, steps: int = 8) -> float:
    script, args = CASES[case]
    path = (reference if script == "gpt.py" else HOLDOUT) / script
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(prof, f)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        r = subprocess.run([sys.executable, "-m", "phantora_prof", "--no-trace", "--host", f.name, "python",
                            str(path), *args, "--steps", str(steps)], cwd=path.parent, env=env,
                           capture_output=True, text=True, timeout=900)
    finally:
        os.unlink(f.name)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])["median_steady_ms"]
    raise RuntimeError(f"{case}: no RESULT line\n{(r.stdout + r.stderr)[-1500:]}")


def sensitivities(cases: list[str], reference: Path, speed: float = 1.0,
                  py_call_ns: float = 0.0) -> dict[str, dict[str, float]]:
    """Per case: T0 and the step time's change per unit of each parameter (at host `speed`)."""
    out = {}
    for c in cases:
        base = dict(speed=speed, py_call_ns=py_call_ns)
        t0 = simulate(c, profile(**base), reference)
        out[c] = {"T0": t0,
                  "forward": simulate(c, profile(forward=2.0, **base), reference) - t0,
                  "opcode_ns": (simulate(c, profile(opcode_ns=10.0, **base), reference) - t0) / 10.0}
        print(f"{c:10s} " + " ".join(f"{k} {v:.4g}" for k, v in out[c].items()), flush=True)
    return out


def fit(sens: dict, real: dict[str, float], cases: tuple[str, ...] = FIT) -> dict[str, float]:
    """k_fwd and the cost per bytecode instruction, least squares in relative error, both >= 0.

    The cost per Python-level call is not fitted (given to sensitivities(); 0 by default: a
    call's own instructions are counted), calls and instructions move together in real
    programs, so a fit cannot separate them."""
    rows, rhs = [], []
    for c in cases:
        s, m = sens[c], real[c]
        # T = T0 - dF + k dF + b dI  ->  [dF, dI] . [k, b] = m - T0 + dF
        rows.append([s["forward"] / m, s["opcode_ns"] / m])
        rhs.append((m - s["T0"] + s["forward"]) / m)
    a, b = np.array(rows), np.array(rhs)
    sol, *_ = np.linalg.lstsq(a, b, rcond=None)
    if sol[1] < 0:  # no C-call cost: the per-op costs alone
        sol = np.array([float(np.linalg.lstsq(a[:, :1], b, rcond=None)[0][0]), 0.0])
    if sol[0] < 0.05:
        k = 0.05
        sol = np.array([k, max(0.0, float(np.linalg.lstsq(a[:, 1:], b - k * a[:, 0], rcond=None)[0][0]))])
    return {"forward": float(sol[0]), "opcode_ns": float(sol[1])}


def predict(sens: dict, theta: dict[str, float]) -> dict[str, float]:
    return {c: s["T0"] + (theta["forward"] - 1.0) * s["forward"] + theta["opcode_ns"] * s["opcode_ns"]
            for c, s in sens.items()}
