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
    assert "storage ptrs True True" in r.stdout
    assert "Accessing the data pointer of FakeTensor" not in r.stderr
    doc = load_trace(cli.cwd / "t" / "rank0.pt.trace.json.gz")
    assert validate_trace(doc) == []
    kernels = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels.count("triton_tem_fused_flex_attention_0") == 1
    assert kernels.count("triton_tem_fused_flex_attention_backward_0") == 1
    gemms = [k for k in kernels if "gemm" in k.lower() or "sm90" in k or "cutlass" in k]
    assert len(gemms) == 4  # warm-up + 3 replays (the capture itself runs nothing on the GPU)


def _flex_args(b, h, hkv, s, d, mask_mod, backward=False):
    """flex_attention's HOP arguments with meta tensors and a BlockMask tuple of 128-blocks."""
    import torch

    q = torch.empty(b, h, s, d, device="meta", dtype=torch.bfloat16)
    k = torch.empty(b, hkv, s, d, device="meta", dtype=torch.bfloat16)
    block_mask = (s, s, None, None, None, None, None, None, None, None, None, None, None, None, 128, 128, mask_mod)
    if backward:
        return (q, k, k, q, None, q, None, None, None, block_mask, d ** -0.5, {}, (), ())
    return (q, k, k, None, block_mask, d ** -0.5, {}, (), ())


def test_flex_attention_cost_follows_its_mask_and_the_measured_templates():
    """A full mask costs ~2x a causal one (the mask function is evaluated over its blocks), and
    the templates' fitted efficiency reproduces the H200 measurements (tools/holdout/real_h200/
    session13/flex_real.jsonl) within the fit's own residuals."""
    import json
    from pathlib import Path

    from phantora_prof.cost import get_gpu
    from phantora_prof.runtime.dispatch import hops

    def causal(b, h, q, k):
        return q >= k

    def full(b, h, q, k):
        return q >= 0

    assert hops._mask_density(causal, 1024, 1024, 128, 128) == pytest.approx(36 / 64)
    assert hops._mask_density(full, 1024, 1024, 128, 128) == 1.0
    assert hops._causal_block_fraction(1024, 1024, 128, 128) == pytest.approx(36 / 64)
    gpu = get_gpu("h200")
    data = Path(__file__).resolve().parent.parent / "tools" / "holdout" / "real_h200" / "session13" / "flex_real.jsonl"
    errors = []
    for line in data.read_text().splitlines():
        r = json.loads(line)
        c = r["case"]
        mask = causal if c["mask"] == "causal" else full
        for name, real_us in r["kernels"].items():
            backward = "backward" in name
            args = _flex_args(c["b"], c["h"], c["hkv"], c["s"], c["d"], mask, backward)
            ks = hops.kernels("flex_attention_backward" if backward else "flex_attention", args, gpu, False)
            errors.append(sum(k.duration_ns for k in ks) / 1e3 / real_us - 1)
    assert len(errors) == 24
    assert sum(abs(e) for e in errors) / len(errors) < 0.09
    assert max(abs(e) for e in errors) < 0.30
