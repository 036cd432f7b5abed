"""Megatron-core GPT pretraining (examples/frameworks/megatron/pretrain_gpt.py), unmodified, under
phantora-prof: its own iteration lines in simulated time, valid per-rank traces, and the
collectives of each kind of parallelism on the right process groups.

The 2-rank cases take ~10 s each; the 8-rank TP 2 x PP 2 x DP 2 case ~1-2 min (marked slow) and
holds /tmp/phantora-bigrun.lock so that only one big simulation runs on the machine at a time."""
from __future__ import annotations

import collections
import re
import sys

import pytest

from conftest import REPO, reference_trace, big_run_lock
from tracing.kineto import load_trace
from tracing.validate import validate_trace

pytest.importorskip("megatron.core")

PY = sys.executable
SCRIPT = REPO / "examples" / "frameworks" / "megatron" / "pretrain_gpt.py"
SMALL = ("--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "256")
_ITER = re.compile(r"^\[rank(\d+)\]: iteration\s+(\d+)/(\d+) \| lm loss \S+ \| "
                   r"elapsed time per iteration \(ms\): ([0-9.]+) \| tokens/s: ([0-9,]+)", re.M)


def _iterations(stdout: str) -> list[tuple[int, int, float, int]]:
    """(reporting rank, iteration, elapsed ms, tokens/s) of the script's own lines."""
    return [(int(r), int(i), float(ms), int(tps.replace(",", "")))
            for r, i, _, ms, tps in _ITER.findall(stdout)]


def _collectives(doc: dict) -> dict[str, set[str]]:
    """Collective name -> the 'Process Group Ranks' its NCCL kernels ran on."""
    out: dict[str, set[str]] = collections.defaultdict(set)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel"):
            out[e["args"]["Collective name"]].add(e["args"]["Process Group Ranks"])
    return out


def _check_run(r, steps: int, reporting_rank: int) -> list[tuple[int, int, float, int]]:
    assert r.returncode == 0, r.stderr[-4000:] + r.stdout[-2000:]
    its = _iterations(r.stdout)
    assert [i for _, i, _, _ in its] == list(range(1, steps + 1)), r.stdout[-3000:]
    assert {rank for rank, _, _, _ in its} == {reporting_rank}
    assert all(ms > 0 and tps > 0 for _, _, ms, tps in its)
    assert "megatron-core GPT: world" in r.stdout and "done:" in r.stdout
    return its


@pytest.mark.frameworks
@pytest.mark.parametrize("tp,pp", [(2, 1), pytest.param(1, 2, marks=pytest.mark.slow)], ids=["tp2", "pp2"])
def test_megatron_two_ranks(cli, tp, pp):
    r = cli("--nproc-per-node", "2", "--out", "tr", PY, str(SCRIPT), "--tp", str(tp), "--pp", str(pp),
            "--steps", "2", *SMALL, timeout=600)
    # the last pipeline stage's first TP/DP rank reports (rank 1 with PP 2, else rank 0)
    _check_run(r, 2, 1 if pp == 2 else 0)
    reference = load_trace(reference_trace("gpt_ddp1"))
    for rank in (0, 1):
        doc = load_trace(cli.cwd / "tr" / f"rank{rank}.pt.trace.json.gz")
        assert validate_trace(doc, reference) == []
        assert doc["distributedInfo"]["world_size"] == 2
        colls = _collectives(doc)
        if tp == 2:  # the row/column-parallel layers' all-reduces over the TP group
            assert "[0, 1]" in colls["allreduce"]
        else:  # activations forward, gradients back between the two stages
            assert colls["send"] and colls["recv"]


@pytest.mark.frameworks
@pytest.mark.slow
def test_megatron_tp2_pp2_dp2_eight_ranks(cli):
    steps = 3
    with big_run_lock():
        r = cli("--nproc-per-node", "8", "--out", "tr", PY, str(SCRIPT), "--tp", "2", "--pp", "2",
                "--steps", str(steps), "--layers", "4", "--hidden", "512", "--heads", "8", "--seq", "1024",
                timeout=1200)
    # Megatron's rank order is tp-cp-ep-dp-pp: TP groups [0,1].., DP [0,2].., PP [0,4]..;
    # rank 4 is the last stage's TP rank 0 / DP rank 0.
    its = _check_run(r, steps, 4)
    assert its[-1][2] == pytest.approx(its[-2][2], rel=0.05)  # steady state
    reference = load_trace(reference_trace("gpt_ddp1"))
    for rank in range(8):
        doc = load_trace(cli.cwd / "tr" / f"rank{rank}.pt.trace.json.gz")
        assert validate_trace(doc, reference) == [], rank
        info = doc["distributedInfo"]
        assert info["rank"] == rank and info["world_size"] == 8
        colls = _collectives(doc)
        tp_group = str([rank - rank % 2, rank - rank % 2 + 1])
        dp_base = rank - (rank % 4) + rank % 2
        dp_group = str([dp_base, dp_base + 2])
        pp_peers = {str([rank % 4, rank % 4 + 4]), str([rank % 4 + 4, rank % 4])}
        assert tp_group in colls["allreduce"], (rank, dict(colls))
        # the distributed optimizer: gradients reduce-scattered, parameters all-gathered over DP
        assert colls["reduce_scatter_tensor_coalesced"] == {dp_group}, (rank, dict(colls))
        assert colls["allgather_into_tensor_coalesced"] == {dp_group}, (rank, dict(colls))
        assert colls["send"] <= pp_peers and colls["recv"] <= pp_peers and colls["send"] and colls["recv"]
