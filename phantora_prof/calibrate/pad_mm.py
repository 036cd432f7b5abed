"""Fit the GPU profile's `pad_mm_ratio` (runtime/compile/shape_padding.py) from tools/holdout/pad_probe.py.

Inductor pads a misaligned GEMM when its benchmark on the GPU finds the padded GEMM (with the
copies) faster by its margin (1.1). Under simulation the cost model's times stand in for the
benchmark, and their ratio is not the benchmark's: on the H200 (60 decisions, session 17)
Inductor kept GEMMs whose cost-model ratio unpadded / padded was up to 1.8 and padded from
about 2.1. The ratio that best separates the GPU's decisions is fitted here: the threshold
with the most agreeing decisions, in the middle of its gap (the first such gap on a tie).

Input: REAL, the probe's output on the GPU (`PAD {...}` lines: Inductor's decision per GEMM),
and SIM, its output under `phantora-prof --log-level debug` (`pad_mm ... m= k= n=: X us
unpadded, Y us padded` lines: the cost model's times for the same GEMMs).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from phantora_prof.errors import ConfigError

_SIM = re.compile(r"pad_mm \S+ m=(\d+) k=(\d+) n=(\d+): ([\d.]+) us unpadded, ([\d.]+) us padded")


def read_real(path: Path) -> dict[tuple[int, int, int], bool]:
    out = {}
    for line in path.read_text().splitlines():
        if line.startswith("PAD "):
            d = json.loads(line[4:])
            out[(d["m"], d["k"], d["n"])] = bool(d["pad"])
    return out


def read_sim(path: Path) -> dict[tuple[int, int, int], float]:
    """(m, k, n) -> the cost model's unpadded / padded time (GEMMs that reached the comparison)."""
    out = {}
    for line in path.read_text().splitlines():
        m = _SIM.search(line)
        if m:
            out[tuple(int(x) for x in m.groups()[:3])] = float(m.group(4)) / float(m.group(5))
    return out


def fit(real: dict, sim: dict) -> tuple[float, int, int]:
    """(threshold, decisions agreeing with it, decisions compared). A GEMM the simulator
    did not compare (not compute-bound, aligned) counts as kept on its side."""
    keys = sorted(real)
    if not keys:
        raise ConfigError("no padding decisions in the real file (PAD lines of pad_probe.py)")
    ratios = sorted({sim[k] for k in keys if k in sim})
    if not ratios:
        raise ConfigError("no cost-model comparisons in the simulated log (run it with --log-level debug)")
    candidates = [ratios[0] / 2] + [(a + b) / 2 for a, b in zip(ratios, ratios[1:])] + [ratios[-1] * 2]

    def agree(t: float) -> int:
        return sum(1 for k in keys if (k in sim and sim[k] > t) == real[k])

    best = max(candidates, key=lambda t: (agree(t), -t))
    return round(best, 3), agree(best), len(keys)
