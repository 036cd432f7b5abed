"""The terminal report of a diff (rich tables, largest differences first)."""
from __future__ import annotations

from typing import Any

from tracing.diff.categories import CATEGORIES
from tracing.diff.result import FIGURES, HOST_FIGURES, DiffResult

__all__ = ["render_report"]

_DIM_WIDTH = 32


def _fmt(x: float) -> str:
    return f"{x:,.3f}"


def _signed(x: float) -> str:
    if x == 0:
        return "0"
    return f"{x:+,.3f}"


def _pct(diff: float, base: float) -> str:
    if diff == 0:
        return "0%"
    if not base:
        return "new"
    return f"{diff / base * 100:+.1f}%"


def _style(diff: float, base: float) -> str:
    if diff == 0:
        return "dim"
    rel = abs(diff) / base if base else 1.0
    if rel >= 0.10:
        return "bold red" if diff > 0 else "bold green"
    return "red" if diff > 0 else "green"


def _short(dims: str) -> str:
    """'[[8192,768],[768,2304],[],[]]' -> '8192x768 768x2304' (scalars and empty inputs left out)."""
    if dims.startswith("[") and dims.endswith("]"):
        inner = dims[1:-1]
        parts = []
        depth = 0
        cur = ""
        for ch in inner:
            if ch == "[":
                depth += 1
            elif ch == "]":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        shapes = [p[1:-1].replace(",", "x") if p.startswith("[") and p.count("[") == 1 else p
                  for p in parts if p not in ("[]", "")]
        dims = " ".join(shapes)
    return dims if len(dims) <= _DIM_WIDTH else dims[:_DIM_WIDTH - 1] + "…"


def _op(name: str) -> str:
    return name[6:] if name.startswith("aten::") else name


def _side_line(label: str, side: dict) -> str:
    ranks = side["ranks"]
    rk = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]} ({len(ranks)})"
    return f"[bold]{label}[/]: {side['path']}  [dim]{rk}; {side['n_steps']} steps, {side['step_detection']}[/]"


def render_report(result: DiffResult, console: Any, top: int = 25) -> None:
    """Print the report of `result` on a rich Console."""
    from rich.table import Table

    j = result.to_json()
    b, o, d = j["base"], j["other"], j["delta"]
    console.print("[bold]phantora-prof diff[/]  [dim](ms per step; means over the compared steps"
                  + (" and ranks" if len(b["ranks"]) > 1 else "") + ")[/]")
    console.print(_side_line("base ", b))
    console.print(_side_line("other", o))

    t = Table(title="Per step", title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("figure")
    for c in ("base", "other", "diff", "diff %"):
        t.add_column(c, justify="right")

    def row(label: str, vb: float, vo: float) -> None:
        diff = round(vo - vb, 6)
        st = _style(diff, vb)
        t.add_row(label, _fmt(vb), _fmt(vo), f"[{st}]{_signed(diff)}[/]", f"[{st}]{_pct(diff, vb)}[/]")

    for k, label in FIGURES.items():
        row(label, b[k], o[k])
    t.add_section()
    cats = sorted(CATEGORIES, key=lambda c: (-abs(d["categories"][c]), -b["categories"][c]))
    for c in cats:
        if b["categories"][c] or o["categories"][c]:
            row(c, b["categories"][c], o["categories"][c])
    if b["communication"]["total_ms"] or o["communication"]["total_ms"]:
        t.add_section()
        row("communication exposed", b["communication"]["exposed_ms"], o["communication"]["exposed_ms"])
        row("communication overlapped", b["communication"]["overlapped_ms"], o["communication"]["overlapped_ms"])
    t.add_section()
    row("kernels + memcpys + memsets", b["kernels"], o["kernels"])
    t.add_section()
    for k, label in HOST_FIGURES.items():  # where the host's time went (tracing/diff/host.py)
        row(f"host: {label}", b["host"][k], o["host"][k])
    console.print(t)

    if j["steps"]:
        st = Table(title="Steps (paired in order)", title_justify="left", show_edge=False, pad_edge=False)
        for c in ("base step", "other step", "step base", "step other", "diff", "GPU base", "GPU other",
                  "diff"):
            st.add_column(c, justify="right")
        for s in j["steps"]:
            a, g = s["step_time_ms"], s["gpu_time_ms"]
            st.add_row(str(s["base_step"]), str(s["other_step"]), _fmt(a["base"]), _fmt(a["other"]),
                       f"[{_style(a['diff'], a['base'])}]{_signed(a['diff'])}[/]",
                       _fmt(g["base"]), _fmt(g["other"]), f"[{_style(g['diff'], g['base'])}]{_signed(g['diff'])}[/]")
        console.print(st)

    ops = j["ops"]
    if ops:
        shown = ops[:top]
        ot = Table(title=f"Ops that launch GPU work ({len(shown)} of {len(ops)} matched, largest GPU-time "
                         "difference first)", title_justify="left", show_edge=False, pad_edge=False)
        ot.add_column("op [dim](input shapes)[/]", overflow="fold", ratio=1)
        ot.add_column("match")
        for c in ("count", "ms base", "ms other", "diff", "diff %"):
            ot.add_column(c, justify="right", no_wrap=True)
        for m in shown:
            name = _op(m["name"]) if m["name"] == m["other_name"] else f"{_op(m['name'])} → {_op(m['other_name'])}"
            dims = _short(m["input_dims"])
            if m["other_input_dims"] != m["input_dims"]:
                dims = f"{dims} → {_short(m['other_input_dims'])}"
            gb, go = m["base"]["gpu_time_ms"], m["other"]["gpu_time_ms"]
            diff = m["diff_gpu_time_ms"]
            sty = _style(diff, gb)
            cb, co = m["base"]["count"], m["other"]["count"]
            count = f"{cb:g}" if co == cb else f"[yellow]{cb:g}→{co:g}[/]"
            ot.add_row(f"{name} [dim]{dims}[/]" if dims else name, m["match"], count,
                       _fmt(gb), _fmt(go), f"[{sty}]{_signed(diff)}[/]", f"[{sty}]{_pct(diff, gb)}[/]")
        console.print(ot)

    host_ops = [r for r in j["host_ops"] if r["base"]["time_ms"] or r["other"]["time_ms"]]
    if host_ops:
        shown = host_ops[:top]
        ht = Table(title=f"Host events, outermost per thread ({len(shown)} of {len(host_ops)}, largest host-time "
                         "difference first)", title_justify="left", show_edge=False, pad_edge=False)
        ht.add_column("event", overflow="fold", ratio=1)
        ht.add_column("thread")
        for c in ("count", "ms base", "ms other", "diff", "diff %"):
            ht.add_column(c, justify="right", no_wrap=True)
        for r in shown:
            tb, to, diff = r["base"]["time_ms"], r["other"]["time_ms"], r["diff_time_ms"]
            cb, co = r["base"]["count"], r["other"]["count"]
            count = f"{cb:g}" if co == cb else f"[yellow]{cb:g}→{co:g}[/]"
            sty = _style(diff, tb)
            ht.add_row(_op(r["name"]), r["thread"], count, _fmt(tb), _fmt(to), f"[{sty}]{_signed(diff)}[/]",
                       f"[{sty}]{_pct(diff, tb)}[/]")
        console.print(ht)

    for label, rows in (("base", j["only_base"]), ("other", j["only_other"])):
        if not rows:
            continue
        ut = Table(title=f"Ops only in {label} ({min(top, len(rows))} of {len(rows)}, by GPU time)",
                   title_justify="left", show_edge=False, pad_edge=False)
        ut.add_column("op [dim](input shapes)[/]", overflow="fold", ratio=1)
        ut.add_column("category")
        ut.add_column("count", justify="right")
        ut.add_column("GPU ms", justify="right")
        for r in rows[:top]:
            dims = _short(r["input_dims"])
            name = f"{_op(r['name'])} [dim]{dims}[/]" if dims else _op(r["name"])
            ut.add_row(name, r["category"], f"{r['count']:g}", _fmt(r["gpu_time_ms"]))
        console.print(ut)

    for w in j["warnings"]:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
    n = j["differences"]
    if n == 0:
        console.print("[bold green]No differences:[/] the two traces agree on every figure.")
    else:
        console.print(f"[bold]{n} differing figure(s)[/] (step figures, categories, host figures, ops and one-sided ops).")
