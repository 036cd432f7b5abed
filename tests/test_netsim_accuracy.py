"""Simulated nccl-tests results against published DGX/HGX H100 measurements.

Data: tests/data/nccl_tests/*.json (sources, systems and NCCL versions inside each file and
in netsim/README.md). Checked: busbw at >= 1 GiB within 10%, and time at 8 B - 64 KiB
within 25% (the measured time is the smaller of nccl-tests' out-of-place and in-place
columns, which drops the one-off warm-up spikes such as 68 us at 32 B). A dataset that
NVIDIA itself called a site problem is kept as an expected deviation (strict xfail), so a
model change that moves it is noticed.
"""
import json
from functools import lru_cache
from pathlib import Path

import pytest

from netsim.nccl_tests import busbw_factor, run_sweep

DATA = Path(__file__).parent / "data" / "nccl_tests"
FILES = sorted(DATA.glob("*.json"))
LARGE_TOL, SMALL_TOL = 0.10, 0.25


def _load(p):
    return json.loads(p.read_text())


@lru_cache(maxsize=None)
def _sim(op, nnodes, ppn, cluster, size):
    (row,) = run_sweep(op, nnodes, ppn, cluster, size, size, 2)
    return row


def _cases():
    for p in FILES:
        d = _load(p)
        marks = [pytest.mark.xfail(strict=True, reason=d["expected_outlier"])] if "expected_outlier" in d else []
        for r in d["rows"]:
            s = r["size"]
            if s >= 1 << 30 or 8 <= s <= 64 << 10:
                yield pytest.param(p.name, s, marks=marks, id=f"{p.stem}-{s}")


@pytest.mark.parametrize("fname,size", list(_cases()))
def test_matches_published(fname, size):
    d = _load(DATA / fname)
    row = next(r for r in d["rows"] if r["size"] == size)
    sim = _sim(d["op"], d["nnodes"], d["nproc_per_node"], d["cluster"], size)
    n = d["nnodes"] * d["nproc_per_node"]
    if size >= 1 << 30:
        if "busbw" in row:
            ref = row["busbw"]
        else:
            t = min(row["time_us"], row.get("time_us_inplace", row["time_us"]))
            ref = size / (t * 1e3) * busbw_factor(d["op"], n)
        err = sim.busbw / ref - 1
        assert abs(err) <= LARGE_TOL, f"busbw sim {sim.busbw:.1f} vs published {ref:.1f} GB/s ({err:+.1%})"
    else:
        ref = min(row["time_us"], row.get("time_us_inplace", row["time_us"]))
        err = sim.time_us / ref - 1
        assert abs(err) <= SMALL_TOL, f"time sim {sim.time_us:.2f} vs published {ref:.2f} us ({err:+.1%})"


def test_every_dataset_cites_its_source():
    for p in FILES:
        d = _load(p)
        for key in ("source", "system", "nccl_version", "op", "nnodes", "rows", "kind"):
            assert key in d, f"{p.name} lacks {key}"
        assert d["source"].startswith("https://"), p.name
