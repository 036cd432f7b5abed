"""Benchmarks of many-rank simulation (not in the default run):
`python -m pytest -m benchmark -n 0 tests/bench_distributed.py -s`.

Wall time per simulated step and resident memory per rank process for the DDP and FSDP2
examples at 8, 16 and 32 ranks, every rank live (`--live-ranks all`; a small GPT so that 32
rank processes fit in 24 GB). Representative ranks at scale: bench_scale.py.
"""
from __future__ import annotations

import json
import sys
import time

import pytest

from conftest import REPO, children_cpu_s, run_cli, spread

pytestmark = pytest.mark.benchmark

MODEL = ["--layers", "2", "--dim", "256", "--heads", "4", "--seq", "256", "--batch", "4", "--vocab", "4096"]


def _run(tmp_path, example: str, ranks: int, steps: int, env: dict | None = None) -> tuple[float, dict]:
    summary = tmp_path / f"{example}{ranks}_{steps}.json"
    t0 = time.perf_counter()
    r = run_cli(["--no-trace", "--live-ranks", "all", "--summary-json", str(summary), "--nproc-per-node", str(ranks), sys.executable,
                 str(REPO / "examples" / example / "train.py"), "--steps", str(steps), *MODEL], tmp_path, timeout=1800,
                env=env)
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    return wall, json.loads(summary.read_text())


@pytest.mark.parametrize("example", ["ddp", "fsdp"])
@pytest.mark.parametrize("ranks", [8, 16, 32])
def test_bench_ranks(benchmark, tmp_path, example, ranks):
    wall2, _ = _run(tmp_path, example, ranks, 2)
    wall4, s4 = benchmark.pedantic(lambda: _run(tmp_path, example, ranks, 4), rounds=1, iterations=1)
    rss = [r["max_rss_bytes"] for r in s4["ranks"]]
    benchmark.extra_info.update({
        "example": example, "ranks": ranks,
        "wall_s_per_simulated_step": round((wall4 - wall2) / 2, 2),
        "startup_s": round(wall2 - (wall4 - wall2), 1),
        "max_rss_per_rank_MiB": round(max(rss) / 2**20),
        "simulated_time_ms": s4["ranks"][0]["sim_time_ns"] / 1e6,
    })
    print(benchmark.extra_info)


def test_bench_fork_server_ab(benchmark, tmp_path):
    """8 ranks of the DDP example (2 steps) with ranks forked from one server that imported
    torch once (runtime/process/fork_server.py) and with every rank its own process
    (PHANTORA_NO_FORK_SERVER=1), alternating round by round (A/B in one run): wall and CPU
    seconds of the whole run (CPU: the CLI's children, the server's ranks included)."""
    forked: list[tuple[float, float]] = []
    separate: list[tuple[float, float]] = []

    def one(env: dict | None) -> tuple[float, float]:
        cpu0 = children_cpu_s()
        wall, _ = _run(tmp_path, "ddp", 8, 2, env=env)
        return wall, children_cpu_s() - cpu0

    def one_round() -> None:
        forked.append(one(None))
        separate.append(one({"PHANTORA_NO_FORK_SERVER": "1"}))

    benchmark.pedantic(one_round, rounds=3, iterations=1)

    benchmark.extra_info.update({
        "forked_wall_s": spread([w for w, _ in forked], 2), "forked_cpu_s": spread([c for _, c in forked], 2),
        "separate_wall_s": spread([w for w, _ in separate], 2), "separate_cpu_s": spread([c for _, c in separate], 2),
    })
    print(benchmark.extra_info)
