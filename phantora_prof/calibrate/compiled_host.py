"""Host time of compiled graph calls (host_model.json "compiled_calls"), fitted from
tools/holdout/compiled_host.py run on a GPU host and under the simulator.

Each run prints `RESULT {case: median us per call}`; the simulated run also prints one
`PLAN {inputs, outputs, triton, extern}` per compiled graph, in compile order (for each chain
length: the no-grad graph, the training forward, its backward; then the mm chains; then for
each parameter count the training forward and its backward). Each real
run is scaled to the reference host by its eager softmax chain (`eager_pw32`) against the
simulated one. What the simulation charged through the current constants is taken out of its
times, and the constants are fitted again by least squares on

    real - simulated without them = call + fwd [training forward] + bwd [backward]
        + per_forward_input * inputs + per_forward_output * outputs [training forward]
        + per_backward_input * inputs + per_backward_output * outputs [backward]
        + triton_launch * Triton kernels + extern_adjust * extern calls

The chains give a training forward one input and a backward one output; the modules of N
parameters (`par{N}`, from session 18 on) give a forward N + 1 inputs and a backward N + 1
outputs, so the per-input and per-output costs separate. Logs without par cases fit the
per-input and per-output costs as 0.

so running it on the logs the shipped constants came from gives them back (to rounding).
The fitted values are at the simulated host's speed; they are stored at the reference host's
(divided by the profile's `all` speed).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FEATURES = ("call_ns", "training_forward_ns", "backward_ns", "per_forward_input_ns", "per_forward_output_ns",
            "per_backward_input_ns", "per_backward_output_ns", "triton_launch_ns", "extern_adjust_ns")


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # "inference" | "forward" | "backward"
    inputs: int
    outputs: int
    triton: int
    extern: int

    def features(self) -> list[float]:
        fwd, bwd = self.kind == "forward", self.kind == "backward"
        return [1.0, float(fwd), float(bwd), self.inputs if fwd else 0.0, self.outputs if fwd else 0.0,
                self.inputs if bwd else 0.0, self.outputs if bwd else 0.0, float(self.triton), float(self.extern)]


def result_and_plans(path: Path) -> tuple[dict, list[dict]]:
    """The `RESULT {json}` line (empty if none) and every `PLAN {json}` line of a measuring
    script's log (compiled_host.py, cudagraph_host.py)."""
    result: dict = {}
    plans: list[dict] = []
    for line in path.read_text().splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
        elif line.startswith("PLAN "):
            plans.append(json.loads(line[5:]))
    return result, plans


def read_log(path: Path) -> tuple[dict[str, float], list[dict]]:
    """(RESULT, [PLAN ...]) of one run's log."""
    result, plans = result_and_plans(path)
    if not result:
        raise ValueError(f"{path}: no RESULT line (is it compiled_host.py's output?)")
    return result, plans


def cases(result: dict[str, float], plans: list[dict]) -> list[Case]:
    """The cases of a simulated run with the plan of the graph each one calls."""
    ks = sorted(int(k[2:]) for k in result if k.startswith("pw") and k[2:].isdigit())
    ms = sorted(int(k[2:]) for k in result if k.startswith("mm") and k[2:].isdigit())
    ns = sorted(int(k[3:-4]) for k in result if k.startswith("par") and k.endswith("_fwd"))
    names: list[tuple[str, str]] = []
    for k in ks:
        names += [(f"pw{k}", "inference"), (f"pw{k}_fwd", "forward"), (f"pw{k}_bwd", "backward")]
    names += [(f"mm{k}", "inference") for k in ms]
    for n in ns:
        names += [(f"par{n}_fwd", "forward"), (f"par{n}_bwd", "backward")]
    if len(plans) != len(names):
        raise ValueError(f"{len(plans)} PLAN lines for {len(names)} compiled graphs: the simulated log must be a run "
                         "of compiled_host.py that prints each plan")
    return [Case(n, kind, p["inputs"], p["outputs"], p["triton"], p["extern"]) for (n, kind), p in zip(names, plans)]


def fit(reals: list[dict[str, float]], sim: dict[str, float], sim_cases: list[Case],
        current: dict[str, float], speed: float) -> tuple[dict[str, int], list[tuple[str, float, float]]]:
    """Constants at the reference host's speed, and (case, real scaled, fitted simulation) rows."""
    cur = np.array([current.get(f, 0) * speed for f in FEATURES])
    X, y, rows = [], [], []
    for real in reals:
        scale = sim["eager_pw32"] / real["eager_pw32"]
        for c in sim_cases:
            if c.name not in real:  # a run from before the case existed (session 13's: no par cases)
                continue
            f = np.array(c.features())
            base = sim[c.name] - f @ cur / 1e3  # us, without the current constants
            X.append(f)
            y.append(real[c.name] * scale - base)
            rows.append((c.name, real[c.name] * scale, base))
    X_, y_ = np.array(X), np.array(y)
    # a feature the cases cannot tell from earlier ones (the per-input / per-output costs of logs
    # without par cases, which equal the fixed ones' indicators) is fitted as 0 rather than left
    # to lstsq's minimum-norm split with them
    used = np.zeros(X_.shape[1], dtype=bool)
    for j in range(X_.shape[1]):
        used[j] = True
        if np.linalg.matrix_rank(X_[:, used]) < used.sum():
            used[j] = False
    coef = np.zeros(X_.shape[1])
    coef[used] = np.linalg.lstsq(X_[:, used], y_, rcond=None)[0]
    consts = {f: int(round(v * 1e3 / speed)) for f, v in zip(FEATURES, coef)}
    fitted = [(n, r, b + float(np.array(x) @ coef)) for (n, r, b), x in zip(rows, X)]
    return consts, fitted


def refit(sim: Path, reals: list[Path], current: dict[str, float]) -> tuple[dict[str, int], list]:
    """`fit` of compiled_host.py's logs (SIM under the simulator with its PLAN lines, REALS on the
    GPU host) against the `current` constants, at the speed of the host profile in use."""
    from phantora_prof import hostcost

    sim_result, plans = read_log(sim)
    speed = float(hostcost.PROFILE["scale"].get("all", 1.0))
    return fit([read_log(p)[0] for p in reals], sim_result, cases(sim_result, plans), current, speed)
