"""Fit the Triton kernel curve (cost/triton.py) from the kernel sweep (issue #16).

Input: two JSON-lines files of tools/holdout/triton_sweep.py, one measured on the GPU (kernel
name and mean time per case) and one simulated (the same cases under phantora-prof: each
kernel's category, elements and bytes from the simulator's Inductor plan). Kernels pair by
(case, kernel name); a kernel the two Inductor versions named differently (another fusion
choice) has no pair and is left out.

Kernels whose fused ops are compute-heavy (cost/triton.py `compute_class`: transcendental
math, random numbers) are fitted apart: their cost per iteration point is the median of
time / points over the large kernels (>= 4M points) that the bytes curve does not explain (its
time under 90% of the measured one). The bytes curve is fitted on the plain kernels only.
Per category, the measured points (bytes moved, ns) are grouped in bins of a factor 2 in
bytes; each bin gives one point (median bytes, median time); the curve is then made
non-decreasing (more bytes never take less time). Past its last point the curve keeps that
point's bandwidth; below its first, the first point's time (the launch floor). Pointwise
points also stand in for a reduction category below its first point, where a reduction with
few points has no floor of its own.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from statistics import median

from phantora_prof.cost.triton import CATEGORIES, SCHEMA, TritonKernelShape, compute_class, curve_from_doc, curve_keys
from phantora_prof.errors import ConfigError

MIN_CLASS_PAIRS = 8  # measured kernels a class needs for a curve of its own
# Column sums that stream at most this many buffers (a plain sum(0): its input and output, or a
# bias gradient of a kernel's input) get a curve apart from those fused with more: in the
# session-17 sweep the first ran at 0.88x the shared curve, the others at 1.35-1.39x (median).
FEW_BUFFERS = 3


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{i}: not JSON ({exc})") from None
    return rows


def pair(real: list[dict], sim: list[dict], sweep: int = 0) -> list[dict]:
    """(category, bytes, real ns, ...) per kernel present in both files; `sweep` ranks the sweep
    the files come from (a bin covered by a higher-ranked sweep takes only its points, see fit)."""
    feats = {(r["case"], r["kernel"]): r for r in sim if "category" in r}
    out = []
    for r in real:
        f = feats.get((r["case"], r["kernel"]))
        if f is None:
            continue
        out.append({"case": r["case"], "kernel": r["kernel"], "category": f["category"],
                    "bytes": int(f["bytes_read"]) + int(f["bytes_written"]), "ns": float(r["us"]) * 1e3,
                    "points": int(f["numel"]) * int(f["rnumel"]), "compute": compute_class(r["kernel"], f["category"]),
                    "welford": bool(f.get("welford", False)), "hint": f.get("reduction_hint", ""),
                    "n_buffers": int(f.get("n_buffers", 0)), "sweep": sweep})
    return out


def pair_sweeps(sweeps: list[tuple[Path, Path]]) -> list[dict]:
    """The pairs of several sweeps, each given as (REAL, SIM) files, ranked in the order given."""
    return [p for rank, (real, sim) in enumerate(sweeps) for p in pair(read_jsonl(real), read_jsonl(sim), rank)]


def _binned(points: list[tuple[int, float, int]]) -> list[tuple[int, float]]:
    """(bytes, ns, sweep rank) -> a monotone curve of bin medians (bins of a factor 2 in bytes);
    where several sweeps cover a bin, the highest-ranked one's points alone make it."""
    bins: dict[int, list[tuple[int, float, int]]] = {}
    for b, ns, rank in points:
        if b > 0 and ns > 0:
            bins.setdefault(int(math.floor(math.log2(b))), []).append((b, ns, rank))
    curve = []
    for k in sorted(bins):
        top = max(r for _, _, r in bins[k])
        pts = [(b, ns) for b, ns, r in bins[k] if r == top]
        curve.append((int(median(b for b, _ in pts)), float(median(ns for _, ns in pts))))
    mono, best = [], 0.0
    for b, ns in curve:
        best = max(best, ns)
        mono.append((b, round(best, 1)))
    return mono


def _keys(p: dict) -> tuple[str, ...]:
    return curve_keys(p["category"], p["welford"], p.get("hint", ""), p.get("n_buffers", 0), FEW_BUFFERS)


def _class_of(p: dict, classes: set[str]) -> str:
    return next(k for k in _keys(p) if k in classes)


def fit(pairs: list[dict], gpu: str, hbm_bandwidth: float) -> dict:
    plain = [p for p in pairs if p["compute"] == "plain"]
    # a kind of reduction (cost/triton.py curve_keys) gets a curve of its own where enough of
    # them were measured
    kinds = Counter(_keys(p)[0] for p in plain)
    classes = set(CATEGORIES) | {k for k, n in kinds.items() if n >= MIN_CLASS_PAIRS}
    by_cls: dict[str, list[tuple[int, float, int]]] = {c: [] for c in sorted(classes)}
    for p in plain:
        by_cls[_class_of(p, classes)].append((p["bytes"], p["ns"], p["sweep"]))
    if len(by_cls["pointwise"]) < 4:
        raise ConfigError(f"only {len(by_cls['pointwise'])} pointwise kernels paired: too few to fit a curve")
    points = {}
    pw = _binned(by_cls["pointwise"])
    points["pointwise"] = pw
    for cls in sorted(classes - {"pointwise"}):
        own = _binned(by_cls[cls])
        if not own:
            points[cls] = pw
            continue
        floor = [(b, ns) for b, ns in pw if b < own[0][0] and ns <= own[0][1]]
        points[cls] = floor + own
    doc = {"schema": SCHEMA, "gpu": gpu, "hbm_bandwidth": hbm_bandwidth,
           "source": "tools/holdout/triton_sweep.py, sets base (session 12) and inmodel (session 17): "
                     "real H200 vs simulated features",
           "pairs": {c: len(v) for c, v in by_cls.items()},
           "few_buffers": FEW_BUFFERS,
           "points": {c: [[b, ns] for b, ns in v] for c, v in points.items()}}
    bytes_only = curve_from_doc(doc)
    per_point = {}
    for cls in ("transcendental", "rng"):
        ratios = []
        for p in pairs:
            if p["compute"] != cls or p["points"] < (1 << 22):
                continue
            t_bytes = bytes_only.bytes_ns(_shape(p))
            if t_bytes < 0.9 * p["ns"]:
                ratios.append(p["ns"] / p["points"])
        if ratios:
            per_point[cls] = round(median(ratios), 6)
    doc["ns_per_point"] = per_point
    doc["compute_pairs"] = {cls: sum(1 for p in pairs if p["compute"] == cls) for cls in ("transcendental", "rng")}
    return doc


def _shape(p: dict) -> TritonKernelShape:
    """The kernel shape of a pair as the curve sees it (bytes and points; the kind's keys)."""
    return TritonKernelShape(p["category"], p["points"], 1, p["bytes"], 0, p["compute"],
                             p.get("n_buffers", 0), p.get("hint", ""), p["welford"])


def residuals(pairs: list[dict], doc: dict) -> dict:
    """Relative error of the fitted curve on the points it was fitted on, per category."""
    curve = curve_from_doc(doc)
    errs: dict[str, list[float]] = {}
    for p in pairs:
        shape = _shape(p)
        key = _class_of(p, set(doc["points"]))
        key = key if p["compute"] == "plain" else f"{key} ({p['compute']})"
        errs.setdefault(key, []).append(curve.time_ns(shape) / p["ns"] - 1.0)
    return {c: {"n": len(v), "median_abs": median(abs(e) for e in v), "max_abs": max(abs(e) for e in v)}
            for c, v in errs.items()}
