"""Host time of CUDA graph replays of compiled graphs (host_model.json "cuda_graphs"), fitted
from tools/holdout/cudagraph_host.py run on a GPU host and under the simulator.

Both runs print `RESULT {mode: {case: {host_us, first_us, ...}}}`; the simulated one also prints
one `PLAN {inputs, outputs, static, triton, extern, backward, inference}` per compiled graph, in
compile order (every case in the default mode, then every case again with
mode="reduce-overhead"). Each real run is scaled to the simulated host by its eager softmax
chain (`eager_pw32`, as calibrate/compiled_host.py does). What the simulation charged through
the current constants is taken out of its times, and three groups are fitted by least squares
on the reduce-overhead cases:

  steady replay:  real - simulated without them = replay_adjust
      + per_triton_node * Triton nodes + per_extern_node * extern nodes
      + per_copied_input * copied inputs + per_output * outputs
  (inference graphs only; the training ones are checked: see `fit`)
  record (the second call; not the process's first, which also builds the tree manager:
  tree_init is what it takes beyond the fit):  record + record_per_node * nodes
      + record_per_input * inputs
  first replay (the third call) minus a steady one:  first_replay + first_replay_per_output * outputs

The per-node terms are the cudaGraphLaunch call itself (its duration in the trace); the rest
is CUDA graph trees' Python. Fitted values are at the simulated host's speed and stored at the
reference host's (divided by the profile's `all` speed).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from phantora_prof.calibrate.compiled_host import result_and_plans

STEADY = ("replay_adjust_ns", "launch_per_triton_node_ns", "launch_per_extern_node_ns", "per_copied_input_ns",
          "per_output_ns")
RECORD = ("record_ns", "record_per_node_ns", "record_per_input_ns")  # and tree_init_ns (once per process)
FIRST = ("first_replay_ns", "first_replay_per_output_ns")
MODE = "reduce-overhead"
# compile order of cudagraph_host.py's graphs within one mode: (case, graph) pairs
GRAPHS = (("pw1", ""), ("pw8", ""), ("pw32", ""), ("pw128", ""), ("io1", ""), ("io4", ""), ("io16", ""),
          ("io64", ""), ("mm8", ""), ("mm32", ""), ("lin8_fwd", "fwd"), ("lin8_bwd", "bwd"),
          ("lin32_fwd", "fwd"), ("lin32_bwd", "bwd"))


@dataclass(frozen=True)
class Graph:
    case: str
    kind: str  # "" (inference) | "fwd" | "bwd"
    inputs: int
    outputs: int
    static: int
    triton: int
    extern: int

    @property
    def copied(self) -> int:
        return self.inputs - self.static

    def steady(self) -> list[float]:
        return [1.0, float(self.triton), float(self.extern), float(self.copied), float(self.outputs)]

    def record(self) -> list[float]:
        return [1.0, float(self.triton + self.extern), float(self.inputs)]

    def first(self) -> list[float]:
        return [1.0, float(self.outputs)]


def read_log(path: Path) -> tuple[dict, list[dict]]:
    """(RESULT, [PLAN ...]) of one cudagraph_host.py run's log."""
    result, plans = result_and_plans(path)
    if MODE not in result:
        raise ValueError(f"{path}: no RESULT line with {MODE!r} cases (is it cudagraph_host.py's output?)")
    return result, plans


def graphs(plans: list[dict]) -> list[Graph]:
    """The reduce-overhead graphs of a simulated run (the second half of its plans)."""
    if len(plans) != 2 * len(GRAPHS):
        raise ValueError(f"{len(plans)} PLAN lines for {2 * len(GRAPHS)} compiled graphs: the simulated log must be "
                         "a run of cudagraph_host.py under phantora-prof")
    return [Graph(case, kind, p["inputs"], p["outputs"], p["static"], p["triton"], p["extern"])
            for (case, kind), p in zip(GRAPHS, plans[len(GRAPHS):])]


def _lstsq(X: list, y: list, names: tuple, speed: float) -> tuple[dict[str, int], np.ndarray]:
    coef = np.linalg.lstsq(np.array(X), np.array(y), rcond=None)[0]
    return {n: int(round(v * 1e3 / speed)) for n, v in zip(names, coef)}, coef


def _group(gs: list[Graph], real: dict, sim: dict, scale: float, names: tuple, feats, value, used,
           current: dict[str, float], speed: float) -> tuple[dict[str, int], list]:
    """Least squares of one group of constants over the graphs `used` selects. Returns
    (constants, (case, real scaled, fitted) rows for every graph; unused ones marked '(held)')."""
    cur = np.array([current.get(n, 0) * speed for n in names])
    X, y, base = [], [], []
    for g in gs:
        f = np.array(feats(g))
        b = value(sim[MODE][g.case]) - f @ cur / 1e3
        X.append(f)
        y.append(value(real[MODE][g.case]) * scale - b)
        base.append((g.case, value(real[MODE][g.case]) * scale, b))
    keep = [i for i, g in enumerate(gs) if used(g)]
    c, coef = _lstsq([X[i] for i in keep], [y[i] for i in keep], names, speed)
    rows = [(case + ("" if used(g) else " (held)"), rv, b + float(np.array(x) @ coef))
            for g, (case, rv, b), x in zip(gs, base, X)]
    return c, rows


def fit(real: dict, sim: dict, gs: list[Graph], current: dict[str, float],
        speed: float) -> tuple[dict[str, int], list[tuple[str, str, float, float]]]:
    """Constants at the reference host's speed, and (group, case, real scaled, fitted) rows (us);
    rows of cases left out of a group's fit are marked '(held)'."""
    scale = sim[MODE]["eager_pw32"]["host_us"] / real[MODE]["eager_pw32"]["host_us"]
    consts: dict[str, int] = {}
    rows: list[tuple[str, str, float, float]] = []
    args = (real, sim, scale)
    # steady replays: fitted on the inference graphs (guards and the call besides the replay);
    # the training graphs are held out: their autograd Function keeps the default mode's fixed
    # costs, and a saved tensor costs a replay only its rebuild (per_output), since what the
    # default mode charges per saved tensor is mostly the generated wrapper allocating it. (Their
    # simulated base also holds the autograd engine's and AccumulateGrad's host models, which
    # are off on these small MLPs: fitting per-tensor terms to them gave negative costs.)
    c, r = _group(gs, *args, STEADY, Graph.steady, lambda c: c["host_us"], lambda g: g.kind == "", current, speed)
    consts.update(c)
    rows += [("steady", *row) for row in r]
    # the process's first record also creates the tree manager: tree_init below
    c, r = _group(gs, *args, RECORD, Graph.record, lambda c: c["first_us"][1], lambda g: g.case != "pw1",
                  current, speed)
    consts.update(c)
    rows += [("record", *row) for row in r]
    c, r = _group(gs, *args, FIRST, Graph.first, lambda c: c["first_us"][2] - c["host_us"], lambda g: True,
                  current, speed)
    consts.update(c)
    rows += [("first replay", *row) for row in r]
    first_record = next(r for r in rows if r[0] == "record" and r[1].startswith("pw1 "))
    # the simulated first record already holds the current tree_init: what is left is added to it
    consts["tree_init_ns"] = int(round((first_record[2] - first_record[3]) * 1e3 / speed
                                       + current.get("tree_init_ns", 0)))
    return {n: consts[n] for n in STEADY + RECORD + FIRST + ("tree_init_ns",)}, rows


def refit(sim: Path, real: Path, current: dict[str, float]) -> tuple[dict[str, int], list]:
    """`fit` of cudagraph_host.py's logs (SIM under the simulator with its PLAN lines, REAL on
    the GPU host) against the `current` constants, at the speed of the host profile in use."""
    from phantora_prof import hostcost

    sim_result, plans = read_log(sim)
    speed = float(hostcost.PROFILE["scale"].get("all", 1.0))
    return fit(read_log(real)[0], sim_result, graphs(plans), current, speed)
