"""Holistic Trace Analysis (HTA) opens our traces as it opens torch.profiler's: every rank of
a multi-rank run (its loader finds a file's rank with a regex that needs `"rank": N` as torch
writes it) and its analyses run on them."""
from __future__ import annotations

import logging
import sys

import pytest

from conftest import SCRIPTS

PY = sys.executable
# HTA and pandas 3 warn about their own code (inplace=, downcasting): not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def _analysis(trace_dir):
    pytest.importorskip("hta", reason="holistictraceanalysis is in the test extra")
    logging.getLogger("hta").setLevel(logging.ERROR)
    from hta.trace_analysis import TraceAnalysis

    return TraceAnalysis(trace_dir=str(trace_dir))


def test_hta_opens_every_rank_of_a_two_rank_run(cli):
    r = cli("--nproc-per-node", "2", "--format", "kineto", "--out", "t", PY, str(SCRIPTS / "dist_ddp.py"), "2")
    assert r.returncode == 0, r.stderr[-3000:]
    ta = _analysis(cli.cwd / "t")
    assert sorted(ta.t.traces) == [0, 1]
    assert ta.t.trace_files[1].endswith("rank1.pt.trace.json.gz")
    temporal = ta.get_temporal_breakdown(visualize=False)
    assert sorted(temporal["rank"]) == [0, 1] and (temporal["compute_time(us)"] > 0).all()
    overlap = ta.get_comm_comp_overlap(visualize=False)  # nccl kernels count as communication
    assert sorted(overlap["rank"]) == [0, 1]
    kernel_types, _ = ta.get_gpu_kernel_breakdown(visualize=False)
    assert {"COMPUTATION", "COMMUNICATION"} <= set(kernel_types["kernel_type"])
    assert len(ta.get_idle_time_breakdown(visualize=False)[0]) >= 2
    assert not ta.get_cuda_kernel_launch_stats(visualize=False)[0].empty


def test_hta_opens_a_single_gpu_trace(cli):
    r = cli("--format", "kineto", "--out", "t", PY, str(SCRIPTS / "tiny_gpt.py"), "2")
    assert r.returncode == 0, r.stderr[-3000:]
    ta = _analysis(cli.cwd / "t")
    assert list(ta.t.traces) == [0]
    temporal = ta.get_temporal_breakdown(visualize=False)
    assert temporal["kernel_time(us)"].iloc[0] > 0
    kernel_types, _ = ta.get_gpu_kernel_breakdown(visualize=False)
    assert "COMPUTATION" in set(kernel_types["kernel_type"])
