"""CUDA graphs, higher-order ops (flex_attention) and the clock patch with C extensions:
runtime pieces real frameworks (torchtitan) need, checked on a small script."""
from __future__ import annotations

import re
import sys

import pytest

from conftest import SCRIPTS
from tracing.kineto import load_trace
from tracing.validate import validate_trace

PY = sys.executable


def test_cuda_graph_replays_captured_work_and_flex_attention_is_one_kernel(cli):
    pytest.importorskip("pandas")
    r = cli("--out", "t", PY, str(SCRIPTS / "graphs_hops.py"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "capturing True" in r.stdout and "capturing False" in r.stdout
    replays = [float(m) for m in re.findall(r"replay_ms ([\d.]+)", r.stdout)]
    # every replay runs the captured GEMM (4096^3, ~1-3 ms on an H200) again: never an empty step
    assert len(replays) == 3 and all(0.5 < t < 20 for t in replays) and max(replays) - min(replays) < 0.01
    assert "flex (2, 8, 1024, 64) (2, 8, 1024, 64)" in r.stdout
    assert "datetime ok True" in r.stdout
    assert "ptrs True 40 True" in r.stdout  # distinct per storage, offsets in bytes, views share
    doc = load_trace(cli.cwd / "t" / "rank0.pt.trace.json.gz")
    assert validate_trace(doc) == []
    kernels = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels.count("triton_tem_fused_flex_attention_0") == 1
    assert kernels.count("triton_tem_fused_flex_attention_backward_0") == 1
    gemms = [k for k in kernels if "gemm" in k.lower() or "sm90" in k or "cutlass" in k]
    assert len(gemms) == 4  # warm-up + 3 replays (the capture itself runs nothing on the GPU)
