"""The end-of-run summary printed by the CLI (to stderr, so the script's stdout stays its own)."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.table import Table


# where kernel times come from (cost/__init__.py), most specific first
SOURCE_ORDER = ("measured", "table", "family", "launches", "interpolated", "triton", "triton_scaled", "bandwidth", "roofline", "user")
SOURCE_LABELS = {
    "measured": "measured (your kernel database)",
    "table": "measured (built-in H200 table)",
    "family": "interpolated (in-training family sweep, per GPU)",
    "launches": "multi-tensor launch model (H200 training profiles)",
    "interpolated": "interpolated (H200 sweep)",
    "triton": "Triton kernel curve (torch.compile)",
    "triton_scaled": "Triton kernel curve (H200's, bandwidth-scaled)",
    "bandwidth": "copy model",
    "roofline": "roofline model",
    "user": "--op-cost",
}


def print_summary(result: Any, config: Any, console: Any) -> None:
    table = Table(title=f"phantora-prof: simulated {config.cluster.gpu.upper()} run", title_justify="left")
    for col in ("rank", "exit", "sim. time", "GPU busy", "ops", "kernels", "peak mem", "reserved"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in result.ranks:
        if r.mirror_of is not None:
            continue  # mirrored: the representative's row stands for it (the line below the table)
        busy = f"{100.0 * r.gpu_busy_ns / r.sim_time_ns:.1f}%" if r.sim_time_ns else "-"
        table.add_row(str(r.rank), str(r.exit_code), f"{r.sim_time_ns / 1e6:,.2f} ms", busy, f"{r.ops:,}",
                      f"{r.kernels:,}", f"{r.peak_allocated / 2**30:.2f} GiB", f"{r.peak_reserved / 2**30:.2f} GiB")
    console.print(table)
    layout = getattr(result, "layout", None)
    if layout is not None:
        sizes = layout.class_sizes()
        classes = ", ".join(f"rank {rep}: {n:,} ranks" for rep, n in list(sizes.items())[:6])
        more = f", ... ({len(sizes) - 6} more classes)" if len(sizes) > 6 else ""
        checked = (f"; rank(s) {', '.join(map(str, layout.checkers[:4]))} check their classes" if layout.checkers
                   else "; the classes are not checked")
        if layout.requested:
            checked += f"; rank(s) {', '.join(map(str, layout.requested[:8]))} live on request (--trace-ranks)"
        console.print(f"representative ranks ({layout.reason}): {len(layout.live)} live ranks simulate "
                      f"{layout.world_size:,}; classes: {classes}{more}{checked}. Mirrored ranks report their "
                      "representative's figures (--live-ranks all simulates every rank)")
        for line in getattr(result, "class_checks", []):
            console.print(f"[yellow]warning:[/] {line}")
    sources: dict[str, int] = {}
    # the steps after the first where every rank has them (what the per-step estimate is made of),
    # else the whole run
    per_step = bool(result.ranks) and all(getattr(r, "steady", None) for r in result.ranks)
    for r in result.ranks:
        for k, v in (r.steady["sources"] if per_step else r.kernel_sources).items():
            sources[k] = sources.get(k, 0) + v
    if sources:
        total = sum(sources.values())
        order = {k: i for i, k in enumerate(SOURCE_ORDER)}
        parts = ", ".join(f"{SOURCE_LABELS.get(k, k)} {100.0 * v / total:.1f}%"
                          for k, v in sorted(sources.items(), key=lambda kv: (order.get(kv[0], 99), kv[0])) if v)
        what = "GPU time of the steps after the first" if per_step else "GPU time"
        console.print(f"{what} by source of its kernel times: {parts}", soft_wrap=True)  # one line in a log
        from phantora_prof.cost import errorband

        lead = max(result.ranks, key=lambda r: r.sim_time_ns)
        steady = getattr(lead, "steady", None)
        if steady:
            b = steady_band(steady)
            per, n = steady["per_step_ns"], steady["steps"]
            low, high = b["low_ns"] / b["basis_ns"], b["high_ns"] / b["basis_ns"]  # the band, relative
            uneven = (f"; their mean {steady['mean_step_ns'] / 1e6:,.2f} ms: some steps took longer (an evaluation, "
                      "a checkpoint, a pause)" if _uneven(steady) else "")
            console.print(f"estimate per step: {per / 1e6:,.2f} ms, 90% band {per * low / 1e6:,.2f}-"
                          f"{per * high / 1e6:,.2f} ms ({100.0 * (low - 1):+.1f}% / {100.0 * (high - 1):+.1f}%; the "
                          f"median of the {n} optimizer step(s) after the first{uneven}; the same band applies to "
                          "the script's own step times, see README, Accuracy); "
                          f"whole run {lead.sim_time_ns / 1e6:,.2f} ms with start-up", soft_wrap=True)
            console.print(bound_line(steady), soft_wrap=True)
        else:
            b = errorband.band(lead.sim_time_ns, lead.gpu_busy_ns, lead.kernel_sources, lead.compile_ns)
            console.print(f"estimate: {lead.sim_time_ns / 1e6:,.2f} ms +- {100.0 * b['relative']:.1f}% "
                          f"(90% band: {b['low_ns'] / 1e6:,.2f}-{b['high_ns'] / 1e6:,.2f} ms; the same share applies "
                          "to the script's own step times; see README, Accuracy)")
        share = errorband.roofline_share(sources)
        if share > errorband.ROOFLINE_NOTE_SHARE:
            console.print(f"{100.0 * share:.0f}% of GPU time comes from the roofline model (ops no sweep covers): "
                          "a wider band; `phantora-prof db build` on one GPU measures them")
    placeholders = sum(r.placeholders for r in result.ranks)
    if placeholders:
        console.print(f"{placeholders:,} read(s) of GPU values (.item(), .tolist(), bool()) returned placeholders "
                      "(0.0 / 1 / True): simulated tensors hold no data")
    console.print(f"wall time of the simulation: {result.wall_s:.1f} s")
    paths = [str(r.trace_path) for r in result.ranks if r.trace_path]
    if getattr(result, "perfetto_path", None):
        paths.append(str(result.perfetto_path))
    if paths:
        shown = paths if len(paths) <= 4 else paths[:2] + [f"... ({len(paths) - 3} more)"] + paths[-1:]
        console.print("traces: " + ", ".join(shown), soft_wrap=True)
        console.print("open them at https://ui.perfetto.dev (drag the file in), or with HTA or TensorBoard")


def bound_line(steady: dict) -> str:
    """What bounds a step: the GPU's busy time and the host's own (its waits for the GPU left
    out) per step, and which is longer; where the GPU is, how much slower a host would have to
    be to take over (hosts of one GPU machine differ by up to 1.8x: README, Host time)."""
    n = steady["steps"]
    window = steady["end_ns"] - steady["start_ns"]
    g, h = steady["busy_ns"], steady["host_busy_ns"]
    head = (f"per step: GPU busy {g / n / 1e6:,.2f} ms ({100.0 * g / window:.0f}%), host busy {h / n / 1e6:,.2f} ms "
            f"({100.0 * h / window:.0f}%, the script's threads less their waits for the GPU): ")
    if h >= g and h <= 1.05 * g:
        return head + ("host-bound by a hair: host and GPU within 5% of each other, so a faster GPU or a "
                       "faster host alone would shorten it little")
    if h >= g:
        return head + "host-bound (a faster GPU would not shorten it; fewer, larger ops or less Python would)"
    if h > 0:
        return head + (f"GPU-bound; a host {100.0 * (g / h - 1):.0f}% slower than the simulated one "
                       "(--host) would make it host-bound")
    return head + "GPU-bound"


def _uneven(steady: dict) -> bool:
    """The median step is more than 5% off the window's mean (a pause between steps)."""
    per = steady["per_step_ns"]
    return abs(steady.get("mean_step_ns", per) - per) > 0.05 * per


def steady_band(steady: dict) -> dict:
    """The 90% band of the per-step estimate: the error band of the steps after the first
    (RankTimeline.steady_window), whose kernels and host time are what the script's step times
    are made of; the whole run's band mixes in start-up (model construction on the host, weight
    uploads), which can dominate a short run and say little about a step.

    Its `basis_ns` is the time its ends are of: the window, or, where the steps are uneven (the
    median step more than 5% off the mean: a pause, a sleep, an evaluation between steps), one
    median step with the window's GPU and host work per step (at most the step): a 200 ms sleep
    is exact, and would otherwise narrow the band of 0.5 ms steps to +-1%."""
    from phantora_prof.cost import errorband

    window = steady["end_ns"] - steady["start_ns"]
    if not _uneven(steady):
        b = errorband.step_band(window, steady["busy_ns"], steady["sources"], steady["host_busy_ns"])
        b["basis_ns"] = window
        return b
    n = steady["steps"]
    step = int(steady["per_step_ns"])
    b = errorband.step_band(step, min(steady["busy_ns"] // n, step), steady["sources"],
                            min(steady["host_busy_ns"] // n, step))
    b["basis_ns"] = step
    return b


def write_summary_json(result: Any, config: Any, path: Path) -> None:
    """The same figures as the table, for scripts and CI."""
    ranks = []
    for r in result.ranks:
        d = asdict(r)
        d["trace_path"] = str(r.trace_path) if r.trace_path else None
        ranks.append(d)
    from phantora_prof.cost import errorband

    for d, r in zip(ranks, result.ranks):
        d["error_band_90"] = errorband.band(r.sim_time_ns, r.gpu_busy_ns, r.kernel_sources, r.compile_ns)
        if d.get("steady"):
            d["steady"]["error_band_90"] = steady_band(d["steady"])
    doc = {"gpu": config.cluster.gpu, "exit_code": result.exit_code, "wall_s": result.wall_s, "ranks": ranks,
           "coordinator_max_rss_bytes": getattr(result, "coordinator_max_rss_bytes", 0)}
    layout = getattr(result, "layout", None)
    if layout is not None:
        doc["representative_ranks"] = {
            "reason": layout.reason, "live": list(layout.live), "checkers": list(layout.checkers),
            "requested": list(layout.requested),
            "class_sizes": {str(k): v for k, v in layout.class_sizes().items()},
            "class_checks": list(getattr(result, "class_checks", []))}
    Path(path).write_text(json.dumps(doc, indent=2, sort_keys=True))
