"""Benchmarks of the simulation itself (not in the default run: `pytest -m benchmark -n 0 tests/bench_runtime.py`).

Figures for the GPT example (GPT-2 124M by default): wall and CPU seconds per simulated step,
captured ops per second, start-up. Start-up (imports, building the model on the CPU) is taken
out by running 2 and 6 steps and dividing the difference by 4. Each figure is the median of
ROUNDS rounds, with the smallest and largest beside it; CPU time is the user + system time of
the simulation's processes (coordinator and rank), measured as the children of this one.
`test_bench_meta_cache_ab` runs the same steps with the output-metadata cache
(runtime/dispatch/meta_cache.py) on and off, alternating, in one run.
`test_bench_rank_instructions_per_op` counts the instructions the rank executes (valgrind's
callgrind), which do not depend on the machine's load: the figure to compare across commits.
"""
from __future__ import annotations

import json
import re
import shutil
import statistics
import sys
import time

import pytest

from conftest import REPO, children_cpu_s, run_cli, spread

pytestmark = pytest.mark.benchmark

GPT = str(REPO / "examples" / "gpt" / "train.py")
ROUNDS = 3


def _run(tmp_path, steps: int, *extra: str, env: dict | None = None) -> tuple[float, float, dict]:
    """(wall s, CPU s, summary) of one simulated run of `steps` steps."""
    summary = tmp_path / f"summary{steps}.json"
    cpu0, t0 = children_cpu_s(), time.perf_counter()
    r = run_cli(["--no-trace", "--summary-json", str(summary), sys.executable, GPT, "--steps", str(steps),
                 *extra], tmp_path, timeout=900, env=env)
    wall, cpu = time.perf_counter() - t0, children_cpu_s() - cpu0
    assert r.returncode == 0, r.stderr[-2000:]
    return wall, cpu, json.loads(summary.read_text())


def _per_step(tmp_path, *extra: str, env: dict | None = None) -> dict:
    """One round: wall / CPU seconds per simulated step and start-up, from a 2- and a 6-step run."""
    w2, c2, s2 = _run(tmp_path, 2, *extra, env=env)
    w6, c6, s6 = _run(tmp_path, 6, *extra, env=env)
    wall, cpu = (w6 - w2) / 4, (c6 - c2) / 4
    # a negative step means start-up noise swamped the steps: a broken measurement, not a fast one
    assert wall > 0 and cpu > 0, (w2, w6, c2, c6)
    return {"wall_s": wall, "cpu_s": cpu, "startup_s": w2 - 2 * wall,
            "ops_per_step": (s6["ranks"][0]["ops"] - s2["ranks"][0]["ops"]) / 4}


def _summary(rounds: list[dict], key: str) -> dict:
    return spread(r[key] for r in rounds)


def _ab_rounds(benchmark, tmp_path, b_env: dict) -> tuple[list[dict], list[dict]]:
    """ROUNDS rounds of `_per_step` as is (A) and with `b_env` (B), alternating (A/B in one run)."""
    a: list[dict] = []
    b: list[dict] = []

    def one_round() -> None:
        a.append(_per_step(tmp_path))
        b.append(_per_step(tmp_path, env=b_env))

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    return a, b


@pytest.mark.parametrize("layers", [2, 12])
def test_bench_gpt_steps_per_second(benchmark, tmp_path, layers):
    rounds: list[dict] = []
    benchmark.pedantic(lambda: rounds.append(_per_step(tmp_path, "--layers", str(layers))),
                       rounds=ROUNDS, iterations=1)
    wall = _summary(rounds, "wall_s")
    ops = rounds[0]["ops_per_step"]
    benchmark.extra_info.update({
        "layers": layers,
        "wall_s_per_simulated_step": wall,
        "cpu_s_per_simulated_step": _summary(rounds, "cpu_s"),
        "startup_s": _summary(rounds, "startup_s"),
        "captured_ops_per_step": ops,
        "wall_us_per_captured_op": round(wall["median"] / ops * 1e6, 1) if ops else None,
    })
    print(benchmark.extra_info)


def test_bench_rank_cpu_per_step(benchmark, tmp_path):
    """The rank's own CPU time per step, sampled at every optimizer step of one long run
    (tests/scripts/step_cpu.py): per-step samples within a run, so neither start-up nor the
    machine's drift between runs (+-20% on these 2-core machines) enters a figure. Median and
    quartiles of steps 3..N, per round."""
    import re

    from conftest import SCRIPTS

    rounds: list[dict] = []

    def one_round() -> None:
        r = run_cli(["--no-trace", sys.executable, str(SCRIPTS / "step_cpu.py"), GPT, "--steps", "24"], tmp_path,
                    timeout=900)
        assert r.returncode == 0, r.stderr[-2000:]
        steps = json.loads(re.search(r"^STEP_CPU_S (.*)$", r.stdout, re.M).group(1))[2:]
        assert len(steps) >= 20 and min(steps) > 0, steps
        q = statistics.quantiles(steps, n=4)
        rounds.append({"median": statistics.median(steps), "q1": q[0], "q3": q[2]})

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    benchmark.extra_info.update({
        "rank_cpu_s_per_step_median": _summary(rounds, "median"),
        "rank_cpu_s_per_step_q1": _summary(rounds, "q1"),
        "rank_cpu_s_per_step_q3": _summary(rounds, "q3"),
    })
    print(benchmark.extra_info)


def _rank_cpu_steps(tmp_path, steps: int, env: dict | None = None) -> list[float]:
    """The rank's CPU seconds of each step after the second, from one run (step_cpu.py)."""
    import re

    from conftest import SCRIPTS

    r = run_cli(["--no-trace", sys.executable, str(SCRIPTS / "step_cpu.py"), GPT, "--steps", str(steps)], tmp_path,
                timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    samples = json.loads(re.search(r"^STEP_CPU_S (.*)$", r.stdout, re.M).group(1))[2:]
    assert len(samples) >= steps - 4 and min(samples) > 0, samples
    return samples


def test_bench_native_entry_ab(benchmark, tmp_path):
    """The capture mode entered from C++ through pyhost.c's dispatch_entry (prim::device
    answered in C, the rest run with the host model's hook paused: the default) against its
    Python method entered directly (PHANTORA_PYTHON_DISPATCH_ENTRY=1), alternating round by
    round: the rank's CPU per GPT-2 step, median of each run's steps 3..16."""
    native: list[float] = []
    python: list[float] = []

    def one_round() -> None:
        native.append(statistics.median(_rank_cpu_steps(tmp_path, 16)))
        python.append(statistics.median(_rank_cpu_steps(tmp_path, 16, {"PHANTORA_PYTHON_DISPATCH_ENTRY": "1"})))

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    benchmark.extra_info.update({
        "native_entry_rank_cpu_s_per_step": spread(native),
        "python_entry_rank_cpu_s_per_step": spread(python),
        "cpu_ratio_native_python": round(statistics.median(native) / statistics.median(python), 3),
    })
    print(benchmark.extra_info)


def test_bench_meta_cache_ab(benchmark, tmp_path):
    """The output-metadata cache on and off, alternating round by round (A/B in one run)."""
    on, off = _ab_rounds(benchmark, tmp_path, {"PHANTORA_NO_META_CACHE": "1"})
    benchmark.extra_info.update({
        "cache_on_wall_s_per_step": _summary(on, "wall_s"), "cache_off_wall_s_per_step": _summary(off, "wall_s"),
        "cache_on_cpu_s_per_step": _summary(on, "cpu_s"), "cache_off_cpu_s_per_step": _summary(off, "cpu_s"),
        "cpu_ratio_on_off": round(statistics.median(r["cpu_s"] for r in on)
                                  / statistics.median(r["cpu_s"] for r in off), 3),
    })
    print(benchmark.extra_info)


def test_bench_lazy_dynamo_ab(benchmark, tmp_path):
    """torch._dynamo loaded on first use (runtime/process/lazy_dynamo.py) against the eager
    import at start-up (PHANTORA_EAGER_DYNAMO=1), alternating round by round (A/B in one run):
    start-up, and wall / CPU per step (the simulator's own FakeTensorMode dispatch skips
    Dynamo's disable wrapper until Dynamo loads)."""
    lazy, eager = _ab_rounds(benchmark, tmp_path, {"PHANTORA_EAGER_DYNAMO": "1"})
    benchmark.extra_info.update({
        **{f"lazy_{k}": _summary(lazy, k) for k in ("startup_s", "wall_s", "cpu_s")},
        **{f"eager_{k}": _summary(eager, k) for k in ("startup_s", "wall_s", "cpu_s")},
    })
    print(benchmark.extra_info)


TINY_GPT = ("--layers", "2", "--dim", "256", "--heads", "4", "--seq", "128", "--batch", "2", "--vocab", "1024")


def _rank_instructions(tmp_path, steps: int) -> tuple[int, float]:
    """(instructions the rank process executed, captured ops) of one run with the rank under
    callgrind (PHANTORA_RANK_WRAPPER, phantora_prof/launcher.py)."""
    out = tmp_path / f"callgrind.{steps}"
    summary = tmp_path / f"summary_callgrind{steps}.json"
    env = {"PHANTORA_RANK_WRAPPER": f"valgrind --tool=callgrind --callgrind-out-file={out}", "PYTHONHASHSEED": "0"}
    r = run_cli(["--no-trace", "--summary-json", str(summary), sys.executable, GPT, "--steps", str(steps), *TINY_GPT],
                tmp_path, timeout=1800, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    total = int(re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M).group(1))
    return total, json.loads(summary.read_text())["ranks"][0]["ops"]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (callgrind counts the instructions)")
def test_bench_rank_instructions_per_op(benchmark, tmp_path):
    """Instructions per simulated step and per captured op of a small GPT's rank (2 and 6 steps:
    the difference over 4 steps leaves start-up out). Counted by callgrind, so the figure does
    not move with the machine's load (CPU time here moves +-20%); about 6 minutes (the rank
    runs ~30x slower under valgrind). One round: two runs of one build, side by side on a busy
    machine, agreed within 0.15% (985.1M and 983.6M instructions over 4 steps, 2026-12-04)."""
    rounds: list[dict] = []

    def one_round() -> None:
        i2, ops2 = _rank_instructions(tmp_path, 2)
        i6, ops6 = _rank_instructions(tmp_path, 6)
        assert i6 > i2 and ops6 > ops2, (i2, i6, ops2, ops6)
        rounds.append({"per_step": (i6 - i2) / 4, "per_op": (i6 - i2) / (ops6 - ops2), "ops_per_step": (ops6 - ops2) / 4})

    benchmark.pedantic(one_round, rounds=1, iterations=1)
    benchmark.extra_info.update({
        "instructions_per_step": round(rounds[0]["per_step"]),
        "instructions_per_captured_op": round(rounds[0]["per_op"]),
        "captured_ops_per_step": rounds[0]["ops_per_step"],
    })
    print(benchmark.extra_info)
