"""`phantora-prof plot`: draw a simulated multi-rank timeline (the README's picture) from per-rank Kineto traces.

    phantora-prof plot TRACE_DIR OUT.png [--window-ms START END]

One row per rank and track: host ops, the compute stream, the NCCL stream. It shows what
ui.perfetto.dev shows when the traces are opened there, in a picture that can be made offline
(needs matplotlib: `pip install phantora-prof[plot]`).
"""
from __future__ import annotations

from pathlib import Path

import click

COLORS = {"cpu_op": "#8fb4d9", "kernel": "#4c9a5b", "nccl": "#d9822b", "gpu_memcpy": "#a05195",
          "gpu_memset": "#999999"}


@click.command("plot")
@click.argument("trace_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--window-ms", nargs=2, type=float, metavar="START END",
              help="Time window in ms from the first event (default: the last 40% of the run).")
def plot_cmd(trace_dir: Path, out: Path, window_ms: tuple[float, float] | None) -> None:
    """Draw TRACE_DIR's rank*.pt.trace.json[.gz] as one timeline picture OUT (host, compute, NCCL per rank)."""
    try:
        import matplotlib
    except ImportError:
        raise click.ClickException("phantora-prof plot needs matplotlib (pip install matplotlib)") from None
    from tracing.kineto import load_trace

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = sorted(trace_dir.glob("rank*.pt.trace.json*"))
    if not files:
        raise click.ClickException(f"no rank*.pt.trace.json[.gz] in {trace_dir}")
    docs = [load_trace(f) for f in files]
    t0 = min(e["ts"] for d in docs for e in d["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("pid"), int))
    t1 = max(e["ts"] + e["dur"] for d in docs for e in d["traceEvents"] if e.get("ph") == "X"
             and isinstance(e.get("pid"), int))
    lo, hi = (window_ms[0] * 1e3, window_ms[1] * 1e3) if window_ms else (0.6 * (t1 - t0), t1 - t0)
    rows: list[tuple[str, list[tuple[float, float, str]]]] = []
    for d in docs:
        rank = d.get("distributedInfo", {}).get("rank", len(rows) // 3)
        host, compute, nccl = [], [], []
        main_tid = None
        for e in d["traceEvents"]:
            if e.get("ph") != "X" or not isinstance(e.get("pid"), int):
                continue
            s, w = e["ts"] - t0, e["dur"]
            if s + w < lo or s > hi:
                continue
            cat = e.get("cat")
            if cat == "cpu_op":
                main_tid = main_tid or e["pid"]
                if e["tid"] == e["pid"]:
                    host.append((s, w, COLORS["cpu_op"]))
            elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
                if e["name"].startswith("nccl"):
                    nccl.append((s, w, COLORS["nccl"]))
                else:
                    compute.append((s, w, COLORS.get(cat, COLORS["kernel"])))
        rows += [(f"rank {rank} host", host), (f"rank {rank} GPU compute", compute), (f"rank {rank} GPU NCCL", nccl)]
    fig, ax = plt.subplots(figsize=(12, 0.42 * len(rows) + 1.2))
    for i, (_, bars) in enumerate(rows):
        y = len(rows) - 1 - i
        ax.broken_barh([((s - lo) / 1e3, max(w / 1e3, 0.002)) for s, w, _ in bars], (y - 0.35, 0.7),
                       facecolors=[c for _, _, c in bars], linewidth=0)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([name for name, _ in reversed(rows)], fontsize=8)
    ax.set_xlabel("simulated time (ms)")
    ax.set_xlim(0, (hi - lo) / 1e3)
    ax.set_title(f"phantora-prof: {len(docs)}-rank simulated timeline ({trace_dir.name})", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    click.echo(f"wrote {out}")
