"""Benchmarks of representative ranks at scale (issue #17; not in the default run):
`python -m pytest -m benchmark -n 0 tests/bench_scale.py -s`.

One simulation of tests/scripts/dist_ddp.py (a tiny GPT under DDP, 2 steps, no traces) at
8 ... 16,384 simulated ranks (NNODES x 8) with `--live-ranks representative`: wall time, CPU
time of the whole run (the CLI and its rank processes), the coordinator's peak resident
memory and a rank's. Three rounds each. What grows with the simulated cluster is the
coordinator's work per collective (netsim over the whole group) and the script's own
O(world) work (torch's process-group bookkeeping); the number of live processes stays 2.
"""
from __future__ import annotations

import json
import sys

import pytest

from conftest import SCRIPTS, children_cpu_s, run_cli

pytestmark = pytest.mark.benchmark


@pytest.mark.parametrize("ranks", [8, 64, 1024, 16384])
def test_bench_representative_scale(benchmark, tmp_path, ranks):
    cpu: list[float] = []
    last: dict = {}

    def once() -> None:
        summary = tmp_path / "summary.json"
        c0 = children_cpu_s()
        r = run_cli(["--no-trace", "--live-ranks", "representative", "--summary-json", str(summary),
                     "--nnodes", str(ranks // 8), "--nproc-per-node", "8", sys.executable,
                     str(SCRIPTS / "dist_ddp.py"), "2"], tmp_path, timeout=1800)
        cpu.append(children_cpu_s() - c0)
        assert r.returncode == 0, r.stderr[-3000:]
        last.update(json.loads(summary.read_text()))

    benchmark.pedantic(once, rounds=3, iterations=1)
    live = last["representative_ranks"]["live"]
    benchmark.extra_info.update({
        "simulated_ranks": ranks,
        "live_ranks": len(live),
        "cpu_s_median": round(sorted(cpu)[len(cpu) // 2], 1),
        "coordinator_max_rss_MiB": round(last["coordinator_max_rss_bytes"] / 2**20),
        "rank_max_rss_MiB": round(max(last["ranks"][r]["max_rss_bytes"] for r in live) / 2**20),
        "simulated_time_ms": last["ranks"][0]["sim_time_ns"] / 1e6,
    })
    print(benchmark.extra_info)
