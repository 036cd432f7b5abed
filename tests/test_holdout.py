"""Held-out workloads (tools/holdout): simulated step times against the real H200 medians.

A drift guard, not an accuracy claim: the bands are today's measured errors (README there)
with some room, so a change that moves these models far from the real GPU shows up."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import REPO

_spec = importlib.util.spec_from_file_location("holdout_compare", REPO / "tools" / "holdout" / "compare.py")
compare = importlib.util.module_from_spec(_spec)
sys.modules["holdout_compare"] = compare
_spec.loader.exec_module(compare)


@pytest.mark.parametrize("case,band", [
    ("mlp_small", 0.10),  # host-bound, launch costs: -0.3% today
    ("mlp_tf32", 0.10),  # TF32 GEMMs: +0.7%
    ("llama", 0.20),  # foreach AdamW, GQA, RoPE: -12.9% (host gaps under-modelled)
    ("cnn", 0.15),  # NCHW batch norm + convolutions: -1.8%
])
def test_held_out_step_time_within_band(case, band):
    real = compare.real_median(case)
    assert real is not None, f"tools/holdout/real_h200/{case}.log missing"
    sim, tail = compare.simulate(case, REPO / "tools" / "holdout", "h200", [])
    assert sim is not None, tail
    assert abs(sim - real) / real < band, (case, sim, real)
