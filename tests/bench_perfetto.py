"""Perfetto writer benchmarks (pytest-benchmark). Not collected by default; run with

    python -m pytest tests/bench_perfetto.py -m benchmark -n 0 -s

Issue 8: a 64-rank run (synthetic RankTraces shaped like a DDP run, ~20k events per rank:
host ops, launches, kernels, NCCL kernels, [memory] instants, ac2g flows) is written to one
.pftrace with bounded memory. Reported: file size, write time, events per second, and the
peak RSS of a fresh process writing 4 vs 64 ranks from a generator (one rank alive at a
time), which must not grow with the number of ranks.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import own_cpu_s, spread
from synthetic_traces import synthetic_rank
from tracing.perfetto import PerfettoStats, write_perfetto

pytestmark = pytest.mark.benchmark

RANKS = 64
STEPS = 420  # x ~47 events per step = ~20k events (spans + instants) per rank


def _events(tr) -> int:
    return len(tr.spans) + len(tr.instants)


def test_write_64_ranks(benchmark, tmp_path):
    ranks = [synthetic_rank(r, RANKS, steps=STEPS, ops_per_step=10) for r in range(RANKS)]
    events = sum(_events(t) for t in ranks)
    flows = sum(len(t.flows) for t in ranks)
    stats = PerfettoStats()
    out = tmp_path / "run.pftrace"

    def write():
        stats.__init__()
        write_perfetto(ranks, out, stats=stats)

    t0 = time.perf_counter()
    benchmark.pedantic(write, rounds=1, iterations=1)
    wall = time.perf_counter() - t0
    size = out.stat().st_size
    info = {"ranks": RANKS, "events": events, "events_per_rank": events // RANKS, "kineto_flows": flows,
            "file_MiB": round(size / 2**20, 1), "bytes_per_event": round(size / events, 1),
            "write_s": round(wall, 2), "events_per_s": round(events / wall), **stats.to_json()}
    benchmark.extra_info.update(info)
    print("\n" + json.dumps(info))
    assert stats.flows_unbound == 0 and stats.collectives == RANKS * STEPS


_CHILD = """
import json, sys, time
sys.path.insert(0, {tests!r})
from synthetic_traces import synthetic_rank
from tracing.perfetto import PerfettoStats, write_perfetto
def hwm():  # VmHWM (kB): this process's peak RSS (ru_maxrss is inherited from the forking parent)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
n = int(sys.argv[1])
st = PerfettoStats()
t = time.perf_counter()
write_perfetto((synthetic_rank(r, n, steps={steps}, ops_per_step=10) for r in range(n)), sys.argv[2], stats=st)
print(json.dumps({{"ranks": n, "wall_s": round(time.perf_counter() - t, 2), "bytes": st.bytes,
                  "peak_rss_MiB": round(hwm() / 1024, 1)}}))
"""


def test_memory_bounded(tmp_path):
    """Peak RSS of a process that builds each rank lazily and streams it out: 4 vs 64 ranks."""
    tests = str(Path(__file__).parent)
    code = _CHILD.format(tests=tests, steps=STEPS)
    repo = str(Path(__file__).resolve().parent.parent)
    res = {}
    for n in (4, RANKS):
        p = subprocess.run([sys.executable, "-c", code, str(n), str(tmp_path / f"r{n}.pftrace")], cwd=repo,
                           capture_output=True, text=True, timeout=600, check=True)
        res[n] = json.loads(p.stdout.strip().splitlines()[-1])
    print("\n" + json.dumps(res))
    assert res[RANKS]["peak_rss_MiB"] < res[4]["peak_rss_MiB"] + 64  # no growth with the number of ranks


ROUNDS_AB = 5


def test_native_encoder_ab(benchmark, tmp_path):
    """The compiled event encoder (native/perfetto/perfetto_events.c) against the Python one, on
    8 ranks of synthetic DDP-shaped traces (~20k events each), alternating within each round:
    wall and CPU seconds per write (median, min, max of ROUNDS_AB rounds). Both write the same
    bytes (checked here and in tests/test_perfetto_native.py)."""
    from phantora_prof import c_extensions
    from phantora_prof.outputs import PERFETTO_ENCODER_SOURCE
    from tracing import perfetto

    module = c_extensions.load(PERFETTO_ENCODER_SOURCE, "phantora_perfetto")
    if module is None:
        pytest.skip("no C compiler: nothing to compare")
    ranks = [synthetic_rank(r, 8, steps=STEPS, ops_per_step=10) for r in range(8)]
    events = sum(_events(t) for t in ranks)
    perfetto.use_native_encoder(module)
    times: dict[str, list[tuple[float, float]]] = {"native": [], "python": []}

    def one_round() -> None:
        for name, native in (("native", True), ("python", False)):
            c0, t0 = own_cpu_s(), time.perf_counter()
            perfetto.write_perfetto(ranks, tmp_path / f"{name}.pftrace", native=native)
            times[name].append((time.perf_counter() - t0, own_cpu_s() - c0))

    try:
        benchmark.pedantic(one_round, rounds=ROUNDS_AB, iterations=1)
    finally:
        perfetto.use_native_encoder(None)
    assert (tmp_path / "native.pftrace").read_bytes() == (tmp_path / "python.pftrace").read_bytes()

    info = {"events": events}
    for name, ts in times.items():
        info[name] = {"wall_s": spread([w for w, _ in ts]), "cpu_s": spread([c for _, c in ts])}
    info["speedup_wall"] = round(info["python"]["wall_s"]["median"] / info["native"]["wall_s"]["median"], 2)
    benchmark.extra_info.update(info)
    print("\n" + json.dumps(info))
