"""`phantora-prof diff BASE OTHER`: where two runs' traces differ (see tracing/diff)."""
from __future__ import annotations

import json
from pathlib import Path

import click

__all__ = ["diff_cmd"]


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


@click.command("diff")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("other", type=click.Path(path_type=Path))
@click.option("--rank", type=int, default=None, help="Compare only this rank (of per-rank trace directories).")
@click.option("--steps", default=None, metavar="SPEC",
              help="Steps to compare: '3-5', '3,4', or BASE/OTHER ('3-5/0-2'). Numbers are ProfilerStep#N, "
                   "or the index of a detected step. Default: every (regular) step of each side.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every figure as JSON to FILE ('-' for stdout).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a PNG with a per-category bar chart and a step-time comparison (needs matplotlib).")
@click.option("--top", type=int, default=25, show_default=True, help="Rows per op table in the report.")
@click.option("--quiet", "-q", is_flag=True, help="No terminal report (with --json / --plot).")
def diff_cmd(base: Path, other: Path, rank: int | None, steps: str | None, json_path: Path | None,
             plot_path: Path | None, top: int, quiet: bool) -> None:
    """Compare two runs' traces: BASE and OTHER are Kineto traces (.json / .json.gz, from
    torch.profiler or phantora-prof) or directories of per-rank traces (paired by
    distributedInfo.rank).

    Steps are aligned (ProfilerStep#N, else detected from the repeated op structure) and
    compared per step: wall time, GPU time and busy time, GPU time by category (GEMM,
    attention, elementwise, reduction, normalization, optimizer, memcpy, memset,
    communication exposed / overlapped), and per op that launches GPU work (matched by op
    name and input shapes; kernel names may differ). Exit status 0 whether or not the
    traces differ, 1 for unreadable or mismatched inputs.
    """
    from tracing.diff import DiffError, diff_traces
    from tracing.kineto import TraceFormatError

    try:
        result = diff_traces(base, other, rank=rank, steps=steps)
    except (TraceFormatError, DiffError) as e:
        raise click.ClickException(_one_line(e)) from None
    except OSError as e:
        raise click.ClickException(_one_line(f"{e.filename}: {e.strerror}" if e.filename else e)) from None
    if plot_path is not None:
        from tracing.diff.plot import PlotUnavailable, write_plot

        try:
            write_plot(result, plot_path)
        except PlotUnavailable as e:
            raise click.ClickException(_one_line(e)) from None
    if json_path is not None:
        text = json.dumps(result.to_json(), indent=1)
        if str(json_path) == "-":
            click.echo(text)
            quiet = True
        else:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(text + "\n")
    if not quiet:
        from rich.console import Console

        from tracing.diff.report import render_report

        render_report(result, Console(highlight=False), top=top)
