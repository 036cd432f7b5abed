"""Matching the ops of two runs.

Granularity: the op that directly launches GPU work (the innermost host op enclosing each
kernel / memcpy / memset launch), keyed by (op name, tensor input shapes: `Input Dims`
without the `[]` entries of scalars and non-tensor arguments). Matching launching
ops instead of whole cpu_op trees makes the diff robust to how each side recorded the
tree: torch.profiler's `aten::linear -> aten::addmm` and a `__torch_dispatch__`-level
capture's bare `aten::addmm` (or extra `autograd::engine::evaluate_function` spans) both
give `aten::addmm` with the same input shapes; kernel names (nvjet vs cutlass, CUDA 12 vs
13) never enter the key.

Keys are paired in phases; each pair records which phase made it (`match`):

- `exact`: the same op name and the same input shapes on both sides;
- `shape`: the same op name, different shapes (batch 8 vs 32): the unpaired keys of one
  name are paired in order of first launch when both sides have the same number of them;
- `category+shape`: different names, the same category and the same first input shape
  (`aten::_cudnn_attention_forward` vs `aten::_scaled_dot_product_flash_attention` on the
  same q; torch.profiler's `aten::copy_` under `aten::_to_copy` vs a dispatch-level
  capture's bare `aten::_to_copy`), paired in order of first launch when both sides have
  the same number of such keys, else only keys launched equally often per step, the
  closest GPU times first;
- `category`: different names, the same category, paired in order of first launch when
  both sides have the same number of unpaired keys of that category.

Whatever is left is listed as present on one side only. If either side was recorded
without shapes (`record_shapes=False`), keys are op names only.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OpRow", "OpMatch", "match_ops"]


@dataclass
class OpRow:
    """One launching-op key of one side, as means per step (over steps, then ranks)."""

    name: str
    dims: str
    category: str
    count: float  # op instances per step
    gpu_ms: float  # GPU time per step
    activities: float  # kernels + memcpys + memsets per step
    order: int  # first launch (rank within the side)

    def to_json(self) -> dict:
        return {"name": self.name, "input_dims": self.dims, "category": self.category,
                "count": self.count, "gpu_time_ms": self.gpu_ms, "kernels": self.activities}


@dataclass
class OpMatch:
    base: OpRow
    other: OpRow
    match: str

    @property
    def diff_ms(self) -> float:
        return self.other.gpu_ms - self.base.gpu_ms

    @property
    def diff_count(self) -> float:
        return self.other.count - self.base.count

    def to_json(self) -> dict:
        b, o = self.base, self.other
        rel = (self.diff_ms / b.gpu_ms * 100.0) if b.gpu_ms else None
        return {
            "name": b.name, "input_dims": b.dims,
            "other_name": o.name, "other_input_dims": o.dims,
            "match": self.match, "category": b.category,
            "base": {"count": b.count, "gpu_time_ms": b.gpu_ms, "kernels": b.activities},
            "other": {"count": o.count, "gpu_time_ms": o.gpu_ms, "kernels": o.activities},
            "diff_count": _r(self.diff_count), "diff_gpu_time_ms": _r(self.diff_ms),
            "diff_gpu_time_pct": None if rel is None else _r(rel),
        }


def _r(x: float) -> float:
    return round(x, 6)


def _first_dims(dims: str) -> str:
    """'[[8,1024],[768],[]]' -> '[8,1024]' (the first input's shape)."""
    if not dims.startswith("[["):
        return ""
    end = dims.find("]", 2)
    return dims[1:end + 1] if end > 0 else ""


def _time_distance(a: OpRow, b: OpRow) -> float:
    lo, hi = sorted((a.gpu_ms, b.gpu_ms))
    return hi / lo if lo > 0 else (0.0 if hi == 0 else float("inf"))


def match_ops(base: dict[tuple[str, str], OpRow], other: dict[tuple[str, str], OpRow]
              ) -> tuple[list[OpMatch], list[OpRow], list[OpRow]]:
    """Pair the keys of two op tables; returns (matches, only in base, only in other)."""
    matches: list[OpMatch] = []
    left_b = dict(base)
    left_o = dict(other)
    for key in list(left_b):
        if key in left_o:
            matches.append(OpMatch(left_b.pop(key), left_o.pop(key), "exact"))

    def pair_groups(group_of, kind: str, by_count: bool = False) -> None:
        gb: dict = {}
        go: dict = {}
        for k, row in left_b.items():
            g = group_of(row)
            if g is not None:
                gb.setdefault(g, []).append(k)
        for k, row in left_o.items():
            g = group_of(row)
            if g is not None:
                go.setdefault(g, []).append(k)
        for g, kb in gb.items():
            ko = go.get(g)
            if not ko:
                continue
            if len(ko) == len(kb):
                kb.sort(key=lambda k: left_b[k].order)
                ko.sort(key=lambda k: left_o[k].order)
                for a, b in zip(kb, ko):
                    matches.append(OpMatch(left_b.pop(a), left_o.pop(b), kind))
            elif by_count:
                # unequal numbers: pair keys run equally often per step, closest GPU time first
                pairs = sorted((_time_distance(left_b[a], left_o[b]), left_b[a].order, left_o[b].order, a, b)
                               for a in kb for b in ko if left_b[a].count == left_o[b].count)
                for *_, a, b in pairs:
                    if a in left_b and b in left_o:
                        matches.append(OpMatch(left_b.pop(a), left_o.pop(b), kind))

    pair_groups(lambda r: r.name, "shape")
    pair_groups(lambda r: (r.category, _first_dims(r.dims)) if _first_dims(r.dims) else None,
                "category+shape", by_count=True)
    pair_groups(lambda r: r.category, "category")
    only_b = sorted(left_b.values(), key=lambda r: -r.gpu_ms)
    only_o = sorted(left_o.values(), key=lambda r: -r.gpu_ms)
    matches.sort(key=lambda m: (-abs(m.diff_ms), -max(m.base.gpu_ms, m.other.gpu_ms), m.base.order))
    return matches, only_b, only_o
