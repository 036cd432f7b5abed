"""Generated model data is what its generator makes from the inputs in the repository.

Each shipped file under phantora_prof/cost/data says how it was made; where the inputs are in
the repository (or in ../shared), rebuilding it here must give the shipped file. Elsewhere:
op_children.json (tests/test_op_tree.py), host_costs.json (tests/test_hostcost.py),
aten_arg_positions.json (tests/test_architecture.py). h200_families.json.gz and
h200_measured.json come from sweeps run on the H200 whose raw traces (~40 MB) are not kept
here: `phantora-prof calibrate families` rebuilt the former byte for byte from them when it
was committed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REFERENCE

ROOT = Path(__file__).resolve().parent.parent
HOLDOUT = ROOT / "tools" / "holdout" / "real_h200"


def test_source_errors_are_fresh():
    """cost/data/source_errors.json (the error band's per-source sigmas) is what
    `phantora-prof calibrate errors` measures with today's cost model on its listed traces."""
    from phantora_prof.calibrate import errors

    shipped_path = ROOT / "phantora_prof" / "cost" / "data" / "source_errors.json"
    shipped = json.loads(shipped_path.read_text())
    paths = []
    for name in shipped["traces"]:
        for p in (REFERENCE / name / "trace.pt.trace.json.gz", HOLDOUT / "traces" / name,
                  HOLDOUT / "zoo" / "traces" / name):
            if p.exists():
                paths.append(p)
                break
        else:
            pytest.skip(f"trace {name} not available")
    fresh = errors.build(paths)
    assert fresh["sigma"] == shipped["sigma"], "stale: rerun `phantora-prof calibrate errors` on the listed traces"
    assert fresh["per_trace"] == shipped["per_trace"]
