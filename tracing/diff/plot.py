"""`--plot`: a PNG with a per-category bar chart and a step-time comparison (matplotlib).

matplotlib is optional (the `plot` extra); it is imported only here, when a plot is asked
for, and a missing install raises `PlotUnavailable` saying how to install it.
"""
from __future__ import annotations

from pathlib import Path

from tracing.diff.categories import CATEGORIES
from tracing.diff.result import DiffResult

__all__ = ["write_plot", "PlotUnavailable"]


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _label(path: str) -> str:
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def write_plot(result: DiffResult, path: str | Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install matplotlib "
                              "(or pip install 'phantora-prof[plot]')") from None
    j = result.to_json()
    b, o = j["base"], j["other"]
    cats = [c for c in CATEGORIES if b["categories"][c] or o["categories"][c]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    x = range(len(cats))
    w = 0.4
    ax1.bar([i - w / 2 for i in x], [b["categories"][c] for c in cats], w, label="base", color="#4c72b0")
    ax1.bar([i + w / 2 for i in x], [o["categories"][c] for c in cats], w, label="other", color="#dd8452")
    ax1.set_xticks(list(x))
    ax1.set_xticklabels(cats, rotation=30, ha="right")
    ax1.set_ylabel("GPU time per step (ms)")
    ax1.set_title("GPU time by category")
    ax1.legend()

    sb = [s["step_time_ms"] for s in b["per_step"]]
    so = [s["step_time_ms"] for s in o["per_step"]]
    gb = [s["gpu_time_ms"] for s in b["per_step"]]
    go = [s["gpu_time_ms"] for s in o["per_step"]]
    ax2.plot(range(len(sb)), sb, "o-", color="#4c72b0", label="base step time")
    ax2.plot(range(len(so)), so, "o-", color="#dd8452", label="other step time")
    ax2.plot(range(len(gb)), gb, "s--", color="#4c72b0", alpha=0.6, label="base GPU time")
    ax2.plot(range(len(go)), go, "s--", color="#dd8452", alpha=0.6, label="other GPU time")
    n = max(len(sb), len(so))
    labels = []
    for i in range(n):
        lb = str(b["per_step"][i]["step"]) if i < len(sb) else "-"
        lo = str(o["per_step"][i]["step"]) if i < len(so) else "-"
        labels.append(lb if lb == lo else f"{lb}/{lo}")
    ax2.set_xticks(list(range(n)))
    ax2.set_xticklabels(labels)
    ax2.set_xlabel("step (base/other, paired in order)")
    ax2.set_ylabel("ms")
    ax2.set_ylim(bottom=0)
    ax2.set_title(f"Step time: base {b['step_time_ms']:.2f} ms, other {o['step_time_ms']:.2f} ms")
    ax2.legend(fontsize="small")
    fig.suptitle(f"base: {_label(b['path'])}    other: {_label(o['path'])}", fontsize="medium")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
