"""Command line: `phantora-prof [OPTIONS] python train.py ...` and the helper subcommands."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from phantora_prof.errors import PhantoraError
from phantora_prof.execute import console, execute, run_config

log = logging.getLogger("phantora_prof")

EXAMPLES = """
\b
Examples:
  phantora-prof python examples/gpt/train.py --steps 4
  phantora-prof --gpu h100 --out traces python -m mypkg.train --lr 3e-4
  phantora-prof --nproc-per-node 8 python examples/ddp/train.py
  phantora-prof torchrun --standalone --nproc-per-node=8 examples/ddp/train.py
  phantora-prof accelerate launch --multi_gpu --num_processes 4 --mixed_precision bf16 train.py
  phantora-prof validate traces/rank0.pt.trace.json.gz
"""

class _RunOrSubcommand(click.Group):
    """Anything that is not a subcommand name is the user's command (`python ...`)."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] in self.commands:
            return super().resolve_command(ctx, args)
        return "run", _run_command, args

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("phantora-prof", "[OPTIONS] python SCRIPT [ARGS]...  |  phantora-prof [OPTIONS] "
                                               "torchrun [TORCHRUN OPTIONS] SCRIPT [ARGS]...  |  phantora-prof [OPTIONS] "
                                               "accelerate launch [ACCELERATE OPTIONS] SCRIPT [ARGS]...  |  "
                                               "phantora-prof COMMAND ...")


def _setup_logging(level: str) -> None:
    from rich.logging import RichHandler

    logging.basicConfig(level=level.upper(), format="%(message)s", datefmt="[%X]",
                        handlers=[RichHandler(show_path=False, console=console(stderr=True))])


@click.group(cls=_RunOrSubcommand, invoke_without_command=True,
             context_settings={"allow_interspersed_args": False, "help_option_names": ["-h", "--help"]},
             epilog=EXAMPLES)
@click.option("--gpu", default="h200", show_default=True, help="Simulated GPU model (h200, h100, a100).")
@click.option("--out", "out_dir", default="phantora_traces", show_default=True, type=click.Path(path_type=Path),
              help="Directory for the per-rank Kineto traces (rank{R}.pt.trace.json.gz).")
@click.option("--nproc-per-node", default=1, show_default=True, type=int,
              help="Simulated GPUs (one rank process each) per node, as torchrun's option.")
@click.option("--gpus-per-node", default=None, type=int,
              help="GPUs per node, all visible to each rank process (default: --nproc-per-node). More than "
                   "the processes for a script that drives several GPUs from one process (nn.DataParallel).")
@click.option("--nnodes", default=1, show_default=True, type=int,
              help="Simulated nodes; the run has NNODES x NPROC_PER_NODE ranks.")
@click.option("--cluster", default=None, metavar="PRESET|FILE",
              help="The network between the GPUs: a preset (dgx-h200, dgx-h100, dgx-a100) or a TOML cluster "
                   "file (see `phantora-prof collective --help`). Default: the DGX of --gpu.")
@click.option("--live-ranks", type=click.Choice(["auto", "all", "representative"], case_sensitive=False),
              default="auto", show_default=True,
              help="Which ranks run a live process. representative: one per class of ranks that run the same "
                   "program (one per pipeline stage), plus one class checker; the others mirror their class. "
                   "all: every rank. auto: all up to 8 ranks, representative above.")
@click.option("--trace-ranks", default="", metavar="R1,R2,...",
              help="Under representative ranks, also simulate these ranks as themselves (with their pipeline "
                   "stage peers) and write their traces; by default only the live ranks' traces are written.")
@click.option("--class-check/--no-class-check", default=True, show_default=True,
              help="Under representative ranks, run a second set of live ranks (the last rank, or the last "
                   "pipeline group) that checks each class runs one program. --no-class-check halves the live "
                   "processes and checks nothing.")
@click.option("--collective-timeout", default=300.0, show_default=True, type=float, metavar="SECONDS",
              help="Report a collective that some ranks never launch after this many (real) seconds in which "
                   "those ranks sent nothing (a rank still simulating is not stuck).")
@click.option("--no-trace", is_flag=True, help="Do not write trace files (faster).")
@click.option("--format", "trace_format", type=click.Choice(["kineto", "perfetto", "both"], case_sensitive=False),
              default="both", show_default=True,
              help="Per-rank Kineto JSON traces, one Perfetto trace of all ranks (run.pftrace), or both.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write summary.json and PNG plots (step breakdown, memory) to DIR (needs matplotlib).")
@click.option("--summary-json", type=click.Path(path_type=Path), help="Also write the end-of-run summary as JSON.")
@click.option("--op-cost", "op_costs", multiple=True, metavar="NAME=TIME",
              help="GPU time of an op the cost model does not know, e.g. mylib::rope=35us (repeatable).")
@click.option("--kernel-times", type=click.Choice(["model", "measure"], case_sensitive=False), default="model",
              show_default=True,
              help="model: built-in H200 data and models (CPU-only). measure: time every new op on this "
                   "machine's GPU and keep it in the kernel database (needs one GPU of the simulated kind).")
@click.option("--kernel-db", type=click.Path(dir_okay=False, path_type=Path),
              help="A kernel database (`phantora-prof db build`) whose measured times come first; with "
                   "--kernel-times measure, where to keep them (default ~/.cache/phantora-prof/kernels-GPU.json.gz).")
@click.option("--host", "host_profile", default="h200", show_default=True, metavar="PROFILE|FILE",
              help="The host (CPU) whose speed simulated host time stands for: a built-in profile (h200: the "
                   "reference traces' machine; h200-2026-12-01: a 1.18x slower one) or a profile file.")
@click.option("--host-python/--no-host-python", default=True, show_default=True,
              help="Charge the script's Python between ops (framework layers, data loading, callbacks) as host "
                   "time on the reference host, from counted calls (deterministic). Off: only ops cost host time.")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
@click.version_option(package_name="phantora-prof")
@click.pass_context
def cli(ctx: click.Context, gpu: str, out_dir: Path, nproc_per_node: int, gpus_per_node: int | None, nnodes: int,
        collective_timeout: float,
        no_trace: bool, trace_format: str, report_dir: Path | None, summary_json: Path | None,
        op_costs: tuple[str, ...], kernel_times: str, kernel_db: Path | None, host_profile: str,
        host_python: bool, log_level: str, cluster: str | None, live_ranks: str, trace_ranks: str,
        class_check: bool) -> None:
    """Run an unmodified PyTorch training script on a simulated GPU and write
    torch.profiler-format traces of the simulated run.

    The script's own output reports simulated time; at the end a summary shows the
    simulated wall time, GPU busy fraction and where the traces are. Open the traces in
    https://ui.perfetto.dev, chrome://tracing, TensorBoard or HTA.
    """
    _setup_logging(log_level)
    # --nproc-per-node / --nnodes given: a distributed launch, even of one process (its ranks get
    # torchrun's environment, as `torchrun --nproc-per-node 1` gives; launcher.torchrun_env)
    launch = any(ctx.get_parameter_source(p) not in (None, click.core.ParameterSource.DEFAULT)
                 for p in ("nproc_per_node", "nnodes"))
    ctx.obj = {"gpu": gpu, "out_dir": out_dir, "nproc_per_node": nproc_per_node, "gpus_per_node": gpus_per_node,
               "nnodes": nnodes, "distributed_launch": launch,
               "collective_timeout": collective_timeout, "trace": not no_trace,
               "log_level": log_level, "op_costs": op_costs,
               "summary_json": summary_json, "trace_format": trace_format.lower(), "report_dir": report_dir,
               "kernel_times": kernel_times.lower(), "kernel_db": kernel_db, "host_python": host_python,
               "host_profile": host_profile, "cluster": cluster, "live_ranks": live_ranks.lower(),
               "trace_ranks": trace_ranks, "class_check": class_check}
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
        ctx.exit(2)


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@click.pass_obj
def _run_command(obj: dict, command: tuple[str, ...]) -> None:
    result = execute(run_config(obj, command))
    if result.killed_by is not None and not result.output_errors:
        end_by_signal(result.killed_by)
    sys.exit(result.exit_code)


# Signals whose default action ends a process without a core dump: a script ended by one of
# them ends phantora-prof by the same signal, so a parent sees what `python` would have given
# (a shell: 128 + N; subprocess: returncode -N). The others (SIGSEGV, SIGABRT, ...) exit 128 + N
# instead of dumping this process's core.
_REPLAYED_SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGPIPE")


def end_by_signal(signum: int) -> None:
    """End this process by `signum` (after the outputs are written) where that dumps no core."""
    import os
    import signal

    names = {getattr(signal, n) for n in _REPLAYED_SIGNALS if hasattr(signal, n)}
    if signum not in names:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    if signum != signal.SIGKILL:  # SIGKILL's action cannot be set (nor caught)
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@cli.command("validate")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--reference", type=click.Path(exists=True, dir_okay=False),
              help="A real torch.profiler trace to compare key sets with.")
def validate_cmd(traces: tuple[str, ...], reference: str | None) -> None:
    """Check that TRACES follow the torch.profiler (Kineto) trace contract."""
    from tracing.validate import validate_file

    bad = 0
    for path in traces:
        problems = validate_file(path, reference)
        if problems:
            bad += 1
            click.echo(f"{path}: {len(problems)} problem(s)")
            for p in problems[:50]:
                click.echo(f"  - {p}")
            if len(problems) > 50:
                click.echo(f"  ... and {len(problems) - 50} more")
        else:
            click.echo(f"{path}: ok")
    sys.exit(1 if bad else 0)


def _register_subcommands() -> None:
    from phantora_prof.calibrate.cli import calibrate
    from phantora_prof.collective_cli import collective_cmd
    from phantora_prof.diff_cli import diff_cmd
    from phantora_prof.db_cli import db_group
    from phantora_prof.merge_cli import merge_cmd
    from phantora_prof.plot_cli import plot_cmd

    cli.add_command(diff_cmd)
    cli.add_command(merge_cmd)
    cli.add_command(plot_cmd)
    cli.add_command(collective_cmd)
    cli.add_command(db_group)
    cli.add_command(calibrate)


_register_subcommands()


def main() -> None:
    try:
        cli.main(prog_name="phantora-prof", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except PhantoraError as e:
        click.echo(f"phantora-prof: error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
