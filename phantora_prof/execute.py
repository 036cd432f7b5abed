"""Run the user's command under the simulator: the `phantora-prof python ...` path of the CLI.

Apart from cli.py (the option parsing) so that other commands that run a script (the kernel
database's `db build`) call the same code without importing the CLI module.
"""
from __future__ import annotations

import os

import click


TORCHRUN_HELP = """\
Usage: phantora-prof [OPTIONS] torchrun [TORCHRUN OPTIONS] SCRIPT [ARGS]...
       phantora-prof [OPTIONS] torchrun [TORCHRUN OPTIONS] -m MODULE [ARGS]...

Runs SCRIPT as `torchrun` would, on simulated GPUs: `--nproc-per-node N` and `--nnodes M`
set the simulated cluster (as phantora-prof's own options do; `--nnodes MIN:MAX` takes MAX),
`-m/--module` runs a module; --standalone, --no-python, --run-path and the rendezvous,
restart, logging and address options are accepted and ignored (there is one simulated
rendezvous on this machine). phantora-prof's own options (--gpu, --out, ...) go before
`torchrun`.

Example:
  phantora-prof --gpu h100 torchrun --standalone --nproc-per-node=8 train.py --lr 3e-4
"""


def console(stderr: bool = True):
    from rich.console import Console

    c = Console(stderr=stderr)
    if not c.is_terminal and not os.environ.get("COLUMNS"):
        # a log file or a pipe: rich would wrap tables and lines at 80 columns
        c = Console(stderr=stderr, width=200)
    return c


def parse_rank_list(spec: str, option: str) -> tuple[int, ...]:
    """"0,5,17" -> (0, 5, 17); a clear error for anything else."""
    from phantora_prof.errors import ConfigError

    ranks = []
    for part in (spec or "").replace(" ", "").split(","):
        if not part:
            continue
        if not part.isdigit():
            raise ConfigError(f"{option} {spec!r}: give rank numbers separated by commas, e.g. {option} 0,17")
        ranks.append(int(part))
    return tuple(dict.fromkeys(ranks))


def _torchrun_spelled_as_module(command: list[str]) -> list[str]:
    """`python [-u ...] -m torch.distributed.run ARGS` is torchrun: `torchrun ARGS`."""
    if not command or not os.path.basename(command[0]).startswith("python"):
        return command
    i = 1
    while i < len(command) and command[i].startswith("-") and command[i] != "-m":
        i += 2 if command[i] in ("-X", "-W") else 1  # the interpreter's own options (-u, -O, -X importtime)
    if command[i:i + 2] == ["-m", "torch.distributed.run"]:
        return ["torchrun", *command[i + 2:]]
    return command


def run_config(options: dict, command: tuple[str, ...]):
    """The validated RunConfig of the CLI's options (`cli.py`'s group options, as click parsed
    them) and the user's command (`torchrun ...` sets the nodes and GPUs per node)."""
    from phantora_prof.config import ClusterConfig, HostConfig, KernelTimesConfig, OutputConfig, RunConfig
    from phantora_prof.launcher import parse_op_cost

    command = _torchrun_spelled_as_module(list(command))
    nproc, nnodes = options["nproc_per_node"], options["nnodes"]
    is_torchrun = bool(command) and os.path.basename(command[0]) == "torchrun"
    torchrun = is_torchrun or bool(options.get("distributed_launch"))
    env: tuple = ()
    if command and os.path.basename(command[0]) == "accelerate":  # `phantora-prof accelerate launch x.py`
        from phantora_prof.accelerate_launch import accelerate_command

        launch = accelerate_command(command)
        command, env = list(launch.command), launch.env
        if launch.distributed:
            nproc, nnodes, torchrun = launch.nproc_per_node, launch.nnodes, True
    if is_torchrun:  # `phantora-prof torchrun --nproc-per-node 8 x.py`
        from phantora_prof.launcher import TorchrunHelp, torchrun_command

        try:
            nproc, nnodes, command = torchrun_command(command)
        except TorchrunHelp:
            click.echo(TORCHRUN_HELP, nl=False)
            raise click.exceptions.Exit(0) from None
    return RunConfig(
        command=tuple(command),
        cluster=ClusterConfig(gpu=options["gpu"], nnodes=nnodes, nproc_per_node=nproc,
                              gpus_per_node=options.get("gpus_per_node"), network=options.get("cluster"),
                              live_ranks=options.get("live_ranks", "auto"),
                              trace_ranks=parse_rank_list(options.get("trace_ranks", ""), "--trace-ranks"),
                              class_check=options.get("class_check", True)),
        kernel_times=KernelTimesConfig(mode=options["kernel_times"], db=options["kernel_db"],
                                       op_costs=dict(parse_op_cost(spec) for spec in options["op_costs"])),
        host=HostConfig(profile=options.get("host_profile", "h200"), count_python=options.get("host_python", True)),
        outputs=OutputConfig(out_dir=options["out_dir"], trace=options["trace"], trace_format=options["trace_format"],
                             report_dir=options["report_dir"], summary_json=options["summary_json"]),
        collective_timeout_s=options["collective_timeout"], log_level=options["log_level"], torchrun=torchrun,
        env=env)


def execute(config):
    """Run the user's command under the simulator (a RunConfig), print the summary, and return
    the RunResult with the exit status the CLI ends with."""
    from phantora_prof.launcher import run
    from phantora_prof.outputs import check_output_paths
    from phantora_prof.summary import print_summary, write_summary_json

    outputs = config.outputs
    check_output_paths(outputs.out_dir if outputs.trace else None, outputs.report_dir, outputs.summary_json)
    out = console(stderr=True)
    if out.is_terminal and not _stdout_is_a_terminal():
        # Progress on long runs: simulated time reached so far, on a status line that goes away.
        # Only where the script's output goes elsewhere: the ranks write to the terminal
        # directly, past rich's live display, which would leave the spinner in front of their
        # lines.
        from phantora_prof.protocol import ORIGIN_NS

        with out.status("simulating...") as status:
            def progress(host_ns: dict[int, int]) -> None:
                if host_ns:
                    sim_s = max(0, min(host_ns.values()) - ORIGIN_NS) / 1e9
                    status.update(f"simulating... {sim_s:,.3f} s of simulated time on {len(host_ns)} rank(s)")

            result = run(config, on_progress=progress)
    else:
        result = run(config)
    print_summary(result, config, out)
    if result.report is not None:
        from phantora_prof.report import print_report_table

        print_report_table(result.report, out)
        out.print(f"report: {outputs.report_dir}")
    output_errors = list(result.output_errors)
    if result.report_error:
        output_errors.append(f"the report could not be written: {result.report_error}")
    if result.error:
        click.echo(f"phantora-prof: error: {result.error}", err=True)
    if outputs.summary_json:
        try:
            write_summary_json(result, config, outputs.summary_json)
        except OSError as exc:
            output_errors.append(f"--summary-json {outputs.summary_json} could not be written: {exc}")
    for err in output_errors:
        click.echo(f"phantora-prof: error: {err}", err=True)
    if output_errors and result.exit_code == 0:
        # never silently: the script succeeded, its outputs did not
        click.echo("phantora-prof: exit status 1 because outputs are missing (the script itself exited 0)",
                   err=True)
        result.exit_code = 1
    if result.interrupted is not None:
        click.echo(_interrupted_line(result, config), err=True)
    elif result.killed_by is not None:
        click.echo(f"phantora-prof: the script was ended by {_signal_name(result.killed_by)} "
                   f"(exit status {result.exit_code}, as `python` would give)", err=True)
    return result


def _stdout_is_a_terminal() -> bool:
    import os

    try:
        return os.isatty(1)
    except OSError:
        return False


def _signal_name(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _interrupted_line(result, config) -> str:
    name = _signal_name(result.interrupted)
    sim_ms = max((r.sim_time_ns for r in result.ranks), default=0) / 1e6
    where = (f"traces of the run until then in {config.outputs.out_dir}/" if config.outputs.trace
             else "no traces (--no-trace)")
    if result.handled:
        what = f"the script exited with status {result.exit_code}"
    else:
        what = f"stopped {len(result.ranks)} rank(s)"
    return (f"phantora-prof: interrupted by {name} after {result.wall_s:.1f} s ({sim_ms:,.2f} ms simulated): "
            f"{what}; {where}")
