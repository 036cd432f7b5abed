"""Whether cuBLAS splits a 16-bit GEMM's K dimension on Hopper, read from a sweep (issue #14).

A split-K GEMM runs its nvjet kernel over K slices, then `cublasLt::splitKreduce_kernel`: one
more kernel in the trace, and another wave shape. cuBLAS decides by heuristics that are not
published and not smooth (on the H200, A^T B with A 12,608 x 3,072 and B 12,608 x 768 splits,
3,072 x 1,024 outputs never do at these K). data/h200_split_k.json.gz records the choice for
13,224 `torch.mm` calls on the H200 (`python -m phantora_prof.measure.split_k_sweep`, torch 2.11,
CUDA 13): bf16 over m, n in 128..8192 and K in 1,024..65,536 (quarter octaves), layouts NN /
TN / NT, fp16 over a quarter of that grid, outputs under 400 128x128 tiles (the earlier GEMM
sweep, data/h200_measured.json, never saw a larger one split: 0 of 49; larger outputs are
taken not to split). A GEMM takes the choice of its nearest swept call of the same dtype and
layout in (log2 m, log2 n, log2 K). Before the sweep, the exact shapes seen in real training
profiles answer for their GPU (data/split_k_observed.json, `phantora-prof calibrate
split-k-observed`): the grid holds no round sizes, and the ViT-style weight gradients
(768 x 3,072 outputs over K = 12,608) that cuBLAS splits fall between grid points that do not.

Measured: against the 909 16-bit calls of the earlier sweep (another run, other shapes), 99.0%
right (9 wrong); the rule this replaces (K >= 16,384 and fewer tiles than twice the SMs) was
91.7% right (75 wrong). Held out one call at a time within this sweep, 94.7%: the wrong ones
sit on the boundaries between grid points. Not covered, and left to that rule: batched GEMMs
(bmm), both operands transposed, other GPUs than Hopper (an H100 takes the H200's answers).
"""
from __future__ import annotations

import bisect
import gzip
import json
import math
from functools import lru_cache
from importlib import resources

import numpy as np

_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}


def output_tiles(m: int, n: int, batch: int = 1) -> int:
    """128x128 output tiles of the GEMM."""
    return max(1, -(-m // 128) * -(-n // 128) * batch)


class _Group:
    """The swept calls of one dtype and layout. Most of the grid is complete, where the nearest
    call is the nearest grid value on each axis (a dict lookup); elsewhere (the fp16 quarter
    grid, shapes next to the excluded large outputs) all calls are searched."""

    def __init__(self, calls: list[dict]) -> None:
        self.axes = [sorted({c[a] for c in calls}) for a in ("m", "n", "k")]
        self.logs = [[math.log2(v) for v in vals] for vals in self.axes]
        self.at = {(c["m"], c["n"], c["k"]): bool(c["split"]) for c in calls}
        self._all: tuple[np.ndarray, np.ndarray] | None = None

    @staticmethod
    def _closest(vals: list[int], logs: list[float], x: float) -> int:
        i = bisect.bisect_left(logs, x)
        if i == 0:
            return vals[0]
        if i == len(logs) or x - logs[i - 1] <= logs[i] - x:
            return vals[i - 1]
        return vals[i]

    def nearest(self, m: int, n: int, k: int) -> bool:
        q = (math.log2(m), math.log2(n), math.log2(k))
        hit = self.at.get(tuple(self._closest(v, lg, x) for v, lg, x in zip(self.axes, self.logs, q)))
        if hit is not None:
            return hit
        if self._all is None:
            keys = list(self.at)
            self._all = (np.log2(np.array(keys, dtype=float)), np.array([self.at[key] for key in keys], dtype=bool))
        features, split = self._all
        return bool(split[int(np.argmin(((features - np.array(q)) ** 2).sum(axis=1)))])


@lru_cache(maxsize=1)
def _sweep() -> tuple[dict[tuple[str, str], _Group], int]:
    """((dtype, layout) -> its swept calls, the most output tiles swept: larger outputs are taken
    not to split, as in both sweeps). Read from the derived-model cache when this machine built
    it before (~0.15 s of a rank's first GEMM otherwise: 13,224 calls parsed and grouped)."""
    from phantora_prof.cost import derived_cache

    return derived_cache.load_or_build("split_k", _read_sweep)


def preload() -> None:
    """Read the sweep and the observed choices now (CostModel.load_tables)."""
    _sweep()
    _observed()


def _read_sweep() -> tuple[dict[tuple[str, str], _Group], int]:
    ref = resources.files("phantora_prof.cost").joinpath("data", "h200_split_k.json.gz")
    if not ref.is_file():
        return {}, 0
    with ref.open("rb") as f:
        doc = json.loads(gzip.decompress(f.read()))
    groups: dict[tuple[str, str], list[dict]] = {}
    for c in doc["calls"]:
        groups.setdefault((c["dtype"], c["layout"]), []).append(c)
    most_tiles = max((output_tiles(c["m"], c["n"]) for c in doc["calls"]), default=0)
    return {key: _Group(calls) for key, calls in groups.items()}, most_tiles


@lru_cache(maxsize=1)
def _observed() -> dict[str, dict[tuple[str, str, int, int, int], bool]]:
    """{gpu key: {(dtype, layout, m, n, k): split}} seen in real training profiles."""
    ref = resources.files("phantora_prof.cost").joinpath("data", "split_k_observed.json")
    if not ref.is_file():
        return {}
    doc = json.loads(ref.read_text())
    return {gpu: {(e["dtype"], e["layout"], e["m"], e["n"], e["k"]): bool(e["split"]) for e in t["entries"]}
            for gpu, t in doc.items()}


@lru_cache(maxsize=4096)
def splits(m: int, n: int, k: int, batch: int, dtype: str, a_transposed: bool, b_transposed: bool,
           gpu_key: str = "") -> bool | None:
    """Whether C[m,n] = A[m,k] @ B[k,n] runs split-K on Hopper (`dtype` torch's name): the choice
    seen on `gpu_key` at this exact shape in a real profile, else the H200 sweep's; None where
    neither says (batched, both operands transposed, another dtype, no data)."""
    short = _DTYPES.get(dtype)
    if short is None or batch != 1 or (a_transposed and b_transposed) or min(m, n, k) < 1:
        return None
    layout = "TN" if a_transposed else "NT" if b_transposed else "NN"
    seen = _observed().get(gpu_key, {}).get((short, layout, m, n, k))
    if seen is not None:
        return seen
    table, most_tiles = _sweep()
    if not table:
        return None
    if output_tiles(m, n) > most_tiles:
        return False
    group = table.get((short, layout))
    return None if group is None else group.nearest(m, n, k)
