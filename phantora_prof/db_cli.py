"""`phantora-prof db build|show`: kernel databases measured on a real GPU."""
from __future__ import annotations

import sys
from pathlib import Path

import click

__all__ = ["db_group"]


@click.group("db")
def db_group() -> None:
    """Kernel databases: the script's own ops timed on a real GPU.

    \b
    phantora-prof db build --out h200.db.json.gz python train.py ...   (on a machine with one GPU)
    phantora-prof db show h200.db.json.gz
    phantora-prof --kernel-db h200.db.json.gz --nproc-per-node 8 python train.py ...   (anywhere)
    """


@db_group.command("build", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The database file (.json, or .json.gz to compress); an existing one is extended.")
@click.option("--trace/--no-trace", "with_trace", default=False, show_default=True,
              help="Also write the simulated traces of this run.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@click.pass_context
def build_cmd(ctx: click.Context, out: Path, with_trace: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND under the simulator and time each distinct op on this machine's GPU.

    The script runs as it would under `phantora-prof` (its CUDA is simulated, so a model
    larger than this GPU's memory is fine, and the global options such as --nproc-per-node
    apply); every op signature it issues (op, shapes, dtypes, strides, flags) is replayed
    on the real GPU with fresh random inputs, warm-up and repeats under torch.profiler, and
    its kernels (names, grid, block, registers, shared memory, duration) are kept in OUT.
    """
    from phantora_prof.cost.kernel_db import KernelDB
    from phantora_prof.execute import execute, run_config

    config = run_config(ctx.find_root().obj, command)
    config = config.with_changes(kernel_times={"mode": "measure", "db": out},
                                 outputs={"trace": config.outputs.trace and with_trace})
    before = len(KernelDB.load_or_empty(out)) if out.exists() else 0
    result = execute(config)
    if out.exists():
        db = KernelDB.load(out)
        cov = db.coverage()
        click.echo(f"{out}: {len(db)} op signatures ({len(db) - before} new): {cov.measured} measured, "
                   f"{cov.failed} could not be replayed (their times come from the models); "
                   f"device {db.device.get('name', '?')}", err=True)
    sys.exit(result.exit_code)


@db_group.command("show")
@click.argument("db_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--top", default=40, show_default=True, help="Ops to list (by summed GPU time).")
def show_cmd(db_path: Path, top: int) -> None:
    """List what DB covers: device, ops, signatures, measured GPU time, failures."""
    from rich.console import Console
    from rich.table import Table

    from phantora_prof.cost.kernel_db import KernelDB

    db = KernelDB.load(db_path)
    cov = db.coverage()
    console = Console()
    dev = db.device
    console.print(f"{db_path}: {len(db)} op signatures, {cov.measured} measured, {cov.failed} failed")
    console.print(f"device: {dev.get('name', '?')} (simulator GPU {db.gpu or 'unknown'}), torch {dev.get('torch', '?')},"
                  f" CUDA {dev.get('cuda', '?')}, compute capability {'.'.join(map(str, dev.get('capability', [])))}")
    table = Table(title="coverage by op (one call of each signature)", title_justify="left")
    for col in ("op", "signatures", "failed", "GPU time"):
        table.add_column(col, justify="left" if col == "op" else "right")
    rows = sorted(cov.by_op.items(), key=lambda kv: (-kv[1][2], kv[0]))
    for op, (ok, bad, ns) in rows[:top]:
        table.add_row(op, str(ok), str(bad) if bad else "", f"{ns / 1000:,.1f} us")
    if len(rows) > top:
        table.add_row(f"... {len(rows) - top} more ops", "", "", "")
    console.print(table)
    if cov.errors:
        console.print("could not be replayed (the models time these):")
        for msg, n in cov.errors.most_common(10):
            console.print(f"  {n} x {msg}")
