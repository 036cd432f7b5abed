"""Carrying a time measured on one GPU to another (roofline.carried_time_ns, roofline.hbm_bw)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from phantora_prof.cost import roofline as R
from phantora_prof.cost.gpus import get_gpu

H100, H200, A100 = get_gpu("h100"), get_gpu("h200"), get_gpu("a100")


def test_a_kernel_at_its_roofline_moves_with_the_roofline_ratio():
    assert R.carried_time_ns(100.0, 100.0, 143.0, H200, H100) == pytest.approx(143.0)
    assert R.carried_time_ns(100.0, 120.0, 171.6, H200, H100) == pytest.approx(143.0)  # faster than modelled: u = 1


def test_a_kernel_far_below_its_roofline_keeps_what_the_sms_set():
    """ATen's depthwise convolution backward runs at ~5% of HBM bandwidth: on an H100 (same SMs and
    clock) it takes about its H200 time, not 1.43x (hf_mobilevit's, session 32: the H100 measured
    880 and 1141 us where the whole-time scaling gave 1267 and 1630)."""
    t = R.carried_time_ns(1000.0, 50.0, 71.5, H200, H100)
    assert t == pytest.approx(1000.0 * (0.05 * 1.43 + 0.95))
    assert 1000.0 < t < 1030.0


def test_the_rest_moves_with_sm_throughput_on_another_gpu():
    """An A100 has fewer, slower SMs (108 at 1410 MHz against 132 at 1980): the part of the time
    the roofline does not explain grows by that ratio."""
    sm = (H200.num_sms * H200.sm_clock_mhz) / (A100.num_sms * A100.sm_clock_mhz)
    assert sm > 1.5
    assert R.carried_time_ns(1000.0, 0.0 + 1e-9, 1e-9, H200, A100) == pytest.approx(1000.0 * sm, rel=1e-6)


def test_sustained_bandwidth_is_the_datasheets_times_the_profiles_ratio():
    """The H200 is the reference (ratio 1); the H100's ratio is the fitted one its profile names,
    with its source (session 32's lease: gpt.py at batch 32)."""
    assert R.hbm_bw(H200) == H200.hbm_bandwidth
    doc = json.loads((Path(R.__file__).parent / "data" / "profiles" / "h100.json").read_text())
    entry = doc["kernel"]["hbm_sustained_ratio"]
    assert R.hbm_bw(H100) == pytest.approx(H100.hbm_bandwidth * entry["value"])
    assert entry["value"] > 1.0 and "session 32" in entry["source"]
    assert R.hbm_bw(A100) == pytest.approx(A100.hbm_bandwidth)  # inherits the reference's 1.0
