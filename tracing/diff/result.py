"""The result of a diff: both sides' figures, the op matches, warnings; `to_json()`."""
from __future__ import annotations

from dataclasses import dataclass, field

from tracing.diff.analyze import RankSummary, StepStats
from tracing.diff.categories import CATEGORIES
from tracing.diff.host import HostStep
from tracing.diff.ops import OpMatch, OpRow

__all__ = ["DiffResult", "Side", "SCHEMA"]

SCHEMA = "phantora-prof.diff/1"
# the per-step figures compared, in report order: JSON key -> label
FIGURES = {
    "step_time_ms": "step time (host, ProfilerStep span)",
    "gpu_time_ms": "GPU time (kernel + memcpy + memset)",
    "gpu_busy_ms": "GPU busy (union over streams)",
    "compute_busy_ms": "compute busy (union, compute kernels)",
}
COMM_FIGURES = ("total_ms", "exposed_ms", "overlapped_ms")
# host figures per step (tracing/diff/host.py): JSON key -> label
HOST_FIGURES = {
    "script_busy_ms": "script thread in ops",
    "script_sync_ms": "script thread in synchronize (waiting for the GPU)",
    "script_outside_ops_ms": "script thread outside ops (Python, other waits)",
    "script_outside_beside_others_ms": "  of it while other threads run ops (the backward)",
    "other_threads_busy_ms": "other threads in ops (autograd, loaders)",
    "script_ops": "script thread: outermost host events",
    "other_threads_ops": "other threads: outermost host events",
}


def _ms(ns: float) -> float:
    return round(ns / 1e6, 6)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _host_json(h: HostStep) -> dict:
    return {"script_busy_ms": _ms(h.script_busy_ns), "script_sync_ms": _ms(h.script_sync_ns),
            "script_outside_ops_ms": _ms(h.script_outside_ns),
            "script_outside_beside_others_ms": _ms(h.script_outside_beside_others_ns),
            "other_threads_busy_ms": _ms(h.other_busy_ns), "script_ops": h.script_ops,
            "other_threads_ops": h.other_ops}


def _step_json(st: StepStats, host: HostStep) -> dict:
    return {
        "step": st.number, "regular": st.regular,
        "step_time_ms": _ms(st.wall_ns), "gpu_time_ms": _ms(st.gpu_ns),
        "gpu_busy_ms": _ms(st.busy_ns), "compute_busy_ms": _ms(st.compute_busy_ns),
        "categories": {c: _ms(v) for c, v in zip(CATEGORIES, st.cat_ns)},
        "communication": {"total_ms": _ms(st.cat_ns[CATEGORIES.index("communication")]),
                          "exposed_ms": _ms(st.comm_exposed_ns),
                          "overlapped_ms": _ms(st.comm_overlapped_ns)},
        "kernels": st.activities,
        "host": _host_json(host),
    }


def _rank_json(s: RankSummary) -> dict:
    steps = [_step_json(st, h) for st, h in zip(s.steps, s.host_steps, strict=True)]
    out = {"rank": s.rank, "path": s.path, "world_size": s.world_size,
           "step_source": s.plan.source, "step_detection": s.plan.description,
           "steps": [st.number for st in s.steps], "n_steps": len(s.steps)}
    out.update(_means(steps))
    out["gpu_time_outside_steps_ms"] = _ms(s.unassigned_gpu_ns)
    n = max(1, len(steps))
    out["host_ops"] = sorted(({"thread": r.thread, "name": r.name, "count": round(r.count / n, 6),
                               "time_ms": round(_ms(r.ns) / n, 6)} for r in s.host_ops.values()),
                             key=lambda r: (-r["time_ms"], r["thread"], r["name"]))
    out["per_step"] = steps
    return out


def _means(steps: list[dict]) -> dict:
    out: dict = {k: round(_mean([st[k] for st in steps]), 6) for k in FIGURES}
    out["categories"] = {c: round(_mean([st["categories"][c] for st in steps]), 6) for c in CATEGORIES}
    out["communication"] = {k: round(_mean([st["communication"][k] for st in steps]), 6) for k in COMM_FIGURES}
    out["kernels"] = round(_mean([st["kernels"] for st in steps]), 6)
    out["host"] = {k: round(_mean([st["host"][k] for st in steps]), 6) for k in HOST_FIGURES}
    return out


def _mean_host_ops(per_rank: list[list[dict]]) -> list[dict]:
    """Each rank's host-op rows (per step) averaged over ranks (a rank without the row: 0)."""
    acc: dict[tuple[str, str], list[float]] = {}
    for rows in per_rank:
        for r in rows:
            a = acc.setdefault((r["thread"], r["name"]), [0.0, 0.0])
            a[0] += r["count"]
            a[1] += r["time_ms"]
    n = max(1, len(per_rank))
    out = [{"thread": t, "name": nm, "count": round(c / n, 6), "time_ms": round(ms / n, 6)}
           for (t, nm), (c, ms) in acc.items()]
    return sorted(out, key=lambda r: (-r["time_ms"], r["thread"], r["name"]))


def match_host_ops(base: list[dict], other: list[dict]) -> list[dict]:
    """Host-op rows of both sides paired by (thread, name), largest time difference first."""
    b = {(r["thread"], r["name"]): r for r in base}
    o = {(r["thread"], r["name"]): r for r in other}
    rows = []
    for key in sorted(set(b) | set(o)):
        rb, ro = b.get(key), o.get(key)
        cb, co = (rb["count"] if rb else 0), (ro["count"] if ro else 0)
        tb, to = (rb["time_ms"] if rb else 0.0), (ro["time_ms"] if ro else 0.0)
        rows.append({"thread": key[0], "name": key[1], "base": {"count": cb, "time_ms": tb},
                     "other": {"count": co, "time_ms": to}, "diff_time_ms": round(to - tb, 6)})
    rows.sort(key=lambda r: (-abs(r["diff_time_ms"]), -r["base"]["time_ms"], r["thread"], r["name"]))
    return rows


@dataclass
class Side:
    """One side of the diff (one file, or a directory of per-rank files)."""

    label: str  # "base" / "other"
    path: str
    ranks: list[RankSummary]

    def to_json(self) -> dict:
        per_rank = [_rank_json(r) for r in self.ranks]
        out: dict = {"path": self.path, "ranks": [r.rank for r in self.ranks]}
        first = per_rank[0]
        out["step_source"] = first["step_source"]
        out["step_detection"] = first["step_detection"]
        out["steps"] = first["steps"]
        out["n_steps"] = first["n_steps"]
        # means over ranks of each rank's mean per step
        for k in FIGURES:
            out[k] = round(_mean([r[k] for r in per_rank]), 6)
        out["categories"] = {c: round(_mean([r["categories"][c] for r in per_rank]), 6) for c in CATEGORIES}
        out["communication"] = {k: round(_mean([r["communication"][k] for r in per_rank]), 6)
                                for k in COMM_FIGURES}
        out["kernels"] = round(_mean([r["kernels"] for r in per_rank]), 6)
        out["host"] = {k: round(_mean([r["host"][k] for r in per_rank]), 6) for k in HOST_FIGURES}
        out["host_ops"] = _mean_host_ops([r["host_ops"] for r in per_rank])
        # per step position: mean over ranks (positions all ranks have)
        n = min(len(r["per_step"]) for r in per_rank)
        out["per_step"] = []
        for i in range(n):
            rows = [r["per_step"][i] for r in per_rank]
            row = {"step": rows[0]["step"]}
            row.update(_means(rows))
            out["per_step"].append(row)
        out["per_rank"] = per_rank
        return out


@dataclass
class DiffResult:
    base: Side
    other: Side
    ops: list[OpMatch]
    only_base: list[OpRow]
    only_other: list[OpRow]
    warnings: list[str] = field(default_factory=list)
    _json: dict | None = field(default=None, init=False, repr=False, compare=False)

    def to_json(self) -> dict:
        """Every figure of the diff as plain JSON types (ms per step, means over steps and ranks)."""
        if self._json is not None:
            return self._json
        b = self.base.to_json()
        o = self.other.to_json()
        delta = {k: round(o[k] - b[k], 6) for k in FIGURES}
        delta["categories"] = {c: round(o["categories"][c] - b["categories"][c], 6) for c in CATEGORIES}
        delta["communication"] = {k: round(o["communication"][k] - b["communication"][k], 6)
                                  for k in COMM_FIGURES}
        delta["host"] = {k: round(o["host"][k] - b["host"][k], 6) for k in HOST_FIGURES}
        steps = []
        for i in range(min(len(b["per_step"]), len(o["per_step"]))):
            sb, so = b["per_step"][i], o["per_step"][i]
            steps.append({"base_step": sb["step"], "other_step": so["step"],
                          **{f"{k}": {"base": sb[k], "other": so[k], "diff": round(so[k] - sb[k], 6)}
                             for k in FIGURES}})
        out = {
            "schema": SCHEMA,
            "units": "ms per step: means over the compared steps, then over the compared ranks",
            "base": b,
            "other": o,
            "delta": delta,
            "steps": steps,
            "ops": [m.to_json() for m in self.ops],
            "host_ops": match_host_ops(b["host_ops"], o["host_ops"]),
            "only_base": [r.to_json() for r in self.only_base],
            "only_other": [r.to_json() for r in self.only_other],
            "warnings": list(self.warnings),
        }
        out["differences"] = _count_differences(out)
        self._json = out
        return out

    @property
    def differences(self) -> int:
        """How many compared figures differ (0: the two sides agree exactly)."""
        return self.to_json()["differences"]


def _count_differences(out: dict) -> int:
    d = out["delta"]
    n = sum(1 for k in FIGURES if d[k] != 0)
    n += sum(1 for v in d["categories"].values() if v != 0)
    n += sum(1 for v in d["communication"].values() if v != 0)
    n += sum(1 for v in d["host"].values() if v != 0)
    if out["base"]["kernels"] != out["other"]["kernels"]:
        n += 1
    for m in out["ops"]:
        if m["diff_gpu_time_ms"] != 0 or m["diff_count"] != 0 or m["match"] != "exact":
            n += 1
    n += len(out["only_base"]) + len(out["only_other"])
    return n
