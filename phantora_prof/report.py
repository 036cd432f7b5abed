"""`--report DIR`: the end-of-run figures per rank as summary.json, plus PNG plots.

`write_report(run_result, traces, out_dir)` measures every rank's trace with the step
detection and GPU-time analysis of `tracing.diff` (ProfilerStep#N spans, else steps found
from the repeated op structure / synchronize calls) and writes:

- `summary.json`: per rank, the mean over regular steps of step time, GPU compute time
  (union of compute kernels), exposed communication (communication kernels not overlapped
  by compute), other GPU time (memcpy, memset), GPU idle (step time minus GPU busy), the
  per-step figures, peak allocated/reserved memory (the run's allocator model when the
  run result has it, else the `[memory]` events), and the run result's counters. MFU is
  null: the traces do not carry kernel FLOPs (see `notes`);
  Also per rank: `whole_trace` (the same figures from the first to the last event) and
  `step_coverage` (the steps' share of it; below 0.5 a note says the detected steps may
  be a repeated setup phase, not training steps, unless they are ProfilerStep#N spans or
  were detected from the optimizer's steps: `steps_reliable`);
- `step_breakdown.png`: a stacked bar per rank (compute, exposed comm., other GPU, idle),
  per step, or over the whole trace when the steps cover less than half of it;
- `memory.png`: allocated (and reserved, dashed) GPU memory over simulated time per rank,
  from the traces' `[memory]` events (profile_memory=True), else from the simulator's own
  samples of the run (`memory`);
- `link_utilization.png`: only when `link_utilization` is given ({link name: [(t_ns,
  fraction 0..1), ...]}, e.g. the most loaded netsim links).

`traces` is {rank: RankTrace}, a list of Kineto trace paths, a directory of them, or None
(the run result's `trace_path`s). matplotlib is imported only to draw (with `plots=True`)
and a missing install raises `ReportError` saying how to install it.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["ReportError", "write_report", "rank_figures", "print_report_table"]


class ReportError(RuntimeError):
    """The report cannot be written (no traces, matplotlib missing); one-line message."""


def _ms(ns: float) -> float:
    return round(ns / 1e6, 4)


def _memory_series(doc: dict) -> list[tuple[float, int, int]]:
    """(ts in ms since the trace base, total allocated, total reserved) of GPU [memory] events."""
    out = []
    for e in doc["traceEvents"]:
        if isinstance(e, dict) and e.get("ph") == "i" and e.get("name") == "[memory]":
            a = e.get("args") or {}
            if a.get("Device Type", 1) != 1:
                continue
            alloc, res = a.get("Total Allocated"), a.get("Total Reserved")
            ts = e.get("ts")
            if isinstance(alloc, (int, float)) and isinstance(ts, (int, float)):
                out.append((ts / 1000.0, int(alloc), int(res) if isinstance(res, (int, float)) else 0))
    out.sort()
    return out


def _whole_trace(tr: Any) -> dict:
    """Compute / exposed communication / other GPU / idle over the whole trace (first to last event)."""
    from tracing.diff.intervals import measure, merge, overlap
    from tracing.diff.categories import COMPUTE_CATEGORIES, categorize

    starts = tr.op_start + tr.rt_start + tr.g_start
    ends = tr.op_end + tr.rt_end + tr.g_end
    if not starts:
        return {"wall_ms": 0.0, "compute_ms": 0.0, "comm_exposed_ms": 0.0, "other_gpu_ms": 0.0, "idle_ms": 0.0}
    wall = max(ends) - min(starts)
    every: dict[int, list] = {}
    comp: dict[int, list] = {}
    comm: dict[int, list] = {}
    names = tr.names
    for i in range(len(tr.g_name)):
        o = tr.g_op[i]
        c = categorize(tr.g_cat[i], names[tr.g_name[i]], names[tr.op_name[o]] if o >= 0 else "",
                       tr.op_in_opt[o] if o >= 0 else False)
        iv = (tr.g_start[i], tr.g_end[i])
        d = tr.g_device[i]
        every.setdefault(d, []).append(iv)
        if c in COMPUTE_CATEGORIES:
            comp.setdefault(d, []).append(iv)
        elif c == "communication":
            comm.setdefault(d, []).append(iv)
    busy = sum(measure(merge(v)) for v in every.values())
    compute = 0
    exposed = 0
    for d in every:
        cu = merge(comp.get(d, []))
        compute += measure(cu)
        m = merge(comm.get(d, []))
        exposed += measure(m) - overlap(m, [a for a, _ in cu], [b for _, b in cu])
    return {"wall_ms": _ms(wall), "compute_ms": _ms(compute), "comm_exposed_ms": _ms(exposed),
            "other_gpu_ms": _ms(max(0, busy - compute - exposed)), "idle_ms": _ms(max(0, wall - busy))}


def rank_figures(doc: dict, path: str | Path) -> tuple[dict, list[tuple[float, int, int]]]:
    """The summary figures of one loaded Kineto document, and its memory series."""
    from tracing.diff.analyze import analyze
    from tracing.diff.events import extract

    tr = extract(doc, path)
    s = analyze(tr)
    steps = []
    for st in s.steps:
        other = max(0, st.busy_ns - st.compute_busy_ns - st.comm_exposed_ns)
        steps.append({"step": st.number, "regular": st.regular, "step_time_ms": _ms(st.wall_ns),
                      "compute_ms": _ms(st.compute_busy_ns), "comm_exposed_ms": _ms(st.comm_exposed_ns),
                      "comm_overlapped_ms": _ms(st.comm_overlapped_ns), "other_gpu_ms": _ms(other),
                      "idle_ms": _ms(max(0, st.wall_ns - st.busy_ns)), "gpu_busy_ms": _ms(st.busy_ns)})
    regular = [x for x in steps if x["regular"]] or steps
    mean = {k: round(sum(x[k] for x in regular) / len(regular), 4) if regular else None
            for k in ("step_time_ms", "compute_ms", "comm_exposed_ms", "comm_overlapped_ms", "other_gpu_ms",
                      "idle_ms", "gpu_busy_ms")}
    mem = _memory_series(doc)
    whole = _whole_trace(tr)
    covered = sum(st.wall_ns for st in s.steps) / 1e6
    coverage = round(covered / whole["wall_ms"], 3) if whole["wall_ms"] else None
    notes = list(s.notes)
    reliable = s.plan.source == "ProfilerStep" or s.plan.training  # steps of the training loop
    if coverage is not None and coverage < 0.5 and not reliable:
        notes.append(f"the detected steps cover only {100 * coverage:.0f}% of the trace: they may be a repeated "
                     "setup phase, not training steps (record ProfilerStep#N with prof.step() for exact steps); "
                     "see whole_trace")
    fig = {"rank": tr.rank if tr.rank is not None else None, "trace": str(path), "step_source": s.plan.source,
           "steps_found": len(s.steps), "step_coverage": coverage, "steps_reliable": reliable, **mean, "steps": steps, "whole_trace": whole,
           "peak_allocated_bytes": max((m[1] for m in mem), default=None),
           "peak_reserved_bytes": max((m[2] for m in mem), default=None),
           "mfu": None, "notes": notes}
    return fig, mem


def _inputs(run_result: Any, traces: Any) -> Iterable[tuple[int | None, Any, str]]:
    """(rank or None, document loader, label) per trace."""
    import orjson

    from tracing.kineto import load_trace, render_kineto

    if traces is None:
        paths = [r.trace_path for r in (run_result.ranks if run_result is not None else []) if r.trace_path]
        if not paths:
            raise ReportError("no traces to report on (the run wrote none: --no-trace?)")
        traces = paths
    if isinstance(traces, Mapping):
        for rank in sorted(traces):
            tr = traces[rank]
            yield rank, (lambda tr=tr: orjson.loads(render_kineto(tr))), tr.trace_name or f"rank{rank}"
        return
    if isinstance(traces, (str, Path)):
        traces = [traces]
    from tracing.merge import trace_files

    for p in trace_files(traces):
        yield None, (lambda p=p: load_trace(p)), str(p)


def write_report(run_result: Any, traces: Any, out_dir: str | Path, *, plots: bool = True,
                 link_utilization: Mapping[str, list[tuple[int, float]]] | None = None,
                 gpu: str | None = None,
                 memory: Mapping[int, list[tuple[float, int, int]]] | None = None) -> dict:
    """Write summary.json (and the PNG plots) under `out_dir`; returns the summary. `memory`:
    per rank, (ms, allocated, reserved) samples of the whole run (the simulator's), drawn in
    memory.png where a trace has no `[memory]` events."""
    out_dir = Path(out_dir)
    ranks: list[dict] = []
    series: dict[int, list[tuple[float, int, int]]] = {}
    by_rank = {r.rank: r for r in (run_result.ranks if run_result is not None else [])}
    for i, (rank, load, label) in enumerate(_inputs(run_result, traces)):
        doc = load()
        fig, mem = rank_figures(doc, label)
        del doc
        if rank is not None:
            fig["rank"] = rank
        elif fig["rank"] is None:
            fig["rank"] = i
        rs = by_rank.get(fig["rank"])
        if rs is not None:
            if rs.peak_allocated:
                fig["peak_allocated_bytes"] = rs.peak_allocated
            if rs.peak_reserved:
                fig["peak_reserved_bytes"] = rs.peak_reserved
            fig["run"] = {"exit_code": rs.exit_code, "sim_time_ms": _ms(rs.sim_time_ns),
                          "gpu_busy_ms": _ms(rs.gpu_busy_ns), "ops": rs.ops, "kernels": rs.kernels,
                          "memcpys": rs.memcpys, "memsets": rs.memsets, "placeholders": rs.placeholders}
        if not mem and memory and memory.get(fig["rank"]):
            mem = list(memory[fig["rank"]])
            if fig["peak_allocated_bytes"] is None:
                fig["peak_allocated_bytes"] = max(m[1] for m in mem)
                fig["peak_reserved_bytes"] = max(m[2] for m in mem)
        ranks.append(fig)
        series[fig["rank"]] = mem
    if not ranks:
        raise ReportError("no traces to report on")
    ranks.sort(key=lambda f: f["rank"])
    times = [f["step_time_ms"] for f in ranks if f["step_time_ms"] is not None]
    summary: dict[str, Any] = {
        "gpu": gpu, "ranks": ranks,
        "step_time_ms": {"mean": round(sum(times) / len(times), 4), "min": min(times), "max": max(times)}
        if times else None,
        "notes": ["mfu is null: kernel FLOPs are not recorded in the traces",
                  "step figures are means over the regular steps of each rank; idle = step time - GPU busy"],
        "plots": [],
    }
    if run_result is not None:
        summary["run"] = {"exit_code": run_result.exit_code, "wall_s": round(run_result.wall_s, 3),
                          "error": run_result.error}
    out_dir.mkdir(parents=True, exist_ok=True)
    if plots:
        summary["plots"] = _plots(ranks, series, link_utilization, out_dir)
    tmp = out_dir / f".summary.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    os.replace(tmp, out_dir / "summary.json")
    return summary


def _plots(ranks: list[dict], series: dict, links: Mapping | None, out_dir: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        raise ReportError("--report plots need matplotlib: pip install matplotlib "
                          "(or pip install 'phantora-prof[plot]')") from None
    written = []
    # per-rank step breakdown
    fig, ax = plt.subplots(figsize=(max(6, min(24, 0.35 * len(ranks) + 4)), 4.5))
    x = [f["rank"] for f in ranks]
    whole = any((f.get("step_coverage") or 0) < 0.5 and not f.get("steps_reliable") for f in ranks)
    rows = [f["whole_trace"] for f in ranks] if whole else ranks
    bottom = [0.0] * len(ranks)
    for key, label, color in (("compute_ms", "compute", "#4c72b0"), ("comm_exposed_ms", "exposed comm.", "#c44e52"),
                              ("other_gpu_ms", "other GPU (memcpy, memset)", "#8172b2"),
                              ("idle_ms", "GPU idle", "#cccccc")):
        vals = [f[key] or 0.0 for f in rows]
        ax.bar(x, vals, bottom=bottom, label=label, color=color, width=0.8)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("rank")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("ms over the whole trace" if whole else "ms per step (mean of regular steps)")
    ax.set_title("Simulated time by rank (whole trace: no reliable steps found)" if whole
                 else "Simulated step time by rank")
    ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(out_dir / "step_breakdown.png", dpi=110)
    plt.close(fig)
    written.append("step_breakdown.png")
    # memory over time
    if any(series.values()):
        fig, ax = plt.subplots(figsize=(10, 4.5))
        for rank in sorted(series):
            mem = series[rank]
            if not mem:
                continue
            stride = max(1, len(mem) // 4000)
            pts = mem[::stride]
            line, = ax.step([p[0] for p in pts], [p[1] / 2**30 for p in pts], where="post", lw=1,
                            label=f"rank {rank}" if len(series) <= 16 else None)
            ax.step([p[0] for p in pts], [p[2] / 2**30 for p in pts], where="post", lw=0.8, ls="--",
                    color=line.get_color(), alpha=0.6)
        ax.set_xlabel("simulated time (ms)")
        ax.set_ylabel("GPU memory (GiB): allocated, reserved dashed")
        ax.set_title("Simulated GPU memory")
        if len(series) <= 16:
            ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(out_dir / "memory.png", dpi=110)
        plt.close(fig)
        written.append("memory.png")
    if links:
        fig, ax = plt.subplots(figsize=(10, 4.5))
        for name, pts in links.items():
            pts = sorted(pts)
            ax.step([t / 1e6 for t, _ in pts], [100.0 * u for _, u in pts], where="post", lw=1, label=str(name))
        ax.set_xlabel("simulated time (ms)")
        ax.set_ylabel("utilization (%)")
        ax.set_title("Most loaded network links")
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(out_dir / "link_utilization.png", dpi=110)
        plt.close(fig)
        written.append("link_utilization.png")
    return written


def print_report_table(summary: dict, console: Any) -> None:
    """The report's per-rank figures as a rich table (ms per step, mean of regular steps)."""
    from rich.table import Table

    table = Table(title="per-rank step breakdown (mean over regular steps)", title_justify="left")
    for col in ("rank", "steps", "step", "compute", "exposed comm.", "other GPU", "idle", "peak mem", "MFU"):
        table.add_column(col, justify="right", no_wrap=True)

    def ms(v: Any) -> str:
        return "-" if v is None else f"{v:,.2f} ms"

    for r in summary["ranks"]:
        peak = r.get("peak_allocated_bytes")
        table.add_row(str(r["rank"]), f"{r['steps_found']} ({r['step_source']})", ms(r["step_time_ms"]),
                      ms(r["compute_ms"]), ms(r["comm_exposed_ms"]), ms(r["other_gpu_ms"]), ms(r["idle_ms"]),
                      "-" if peak is None else f"{peak / 2**30:.2f} GiB",
                      "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%")
    console.print(table)
