"""`phantora-prof merge DIR -o merged.json`: per-rank Kineto traces into one timeline."""
from __future__ import annotations

from pathlib import Path

import click

__all__ = ["merge_cmd"]


def _one_line(e: BaseException | str) -> str:
    return " ".join(str(e).split())


@click.command("merge")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The merged trace: .json (.json.gz to compress) for Chrome JSON, or .pftrace for one "
                   "Perfetto protobuf trace.")
def merge_cmd(inputs: tuple[Path, ...], output: Path) -> None:
    """Merge per-rank Kineto traces into one Chrome JSON timeline.

    INPUTS are directories of per-rank traces (*.json / *.json.gz, e.g. a phantora-prof
    --out directory) or trace files. Each rank (from distributedInfo.rank, else the file
    order) becomes its own processes, "rank N CPU" and "rank N GPU d", with flow ids made
    unique per rank, for tools that take one file (chrome://tracing, ui.perfetto.dev).
    With an output ending in .pftrace, writes a native Perfetto trace instead (each rank a
    process, GPU streams as tracks, kernels of one collective linked across ranks).
    """
    from tracing.kineto import TraceFormatError
    from tracing.merge import MergeError, merge_kineto, merge_to_perfetto, trace_files

    try:
        files = trace_files(inputs)
        if any(f.resolve() == output.resolve() for f in files):
            raise MergeError(f"{output}: the output is also one of the inputs; write it elsewhere")
        if output.name.endswith((".pftrace", ".perfetto-trace")):
            from phantora_prof.outputs import use_native_perfetto_encoder

            use_native_perfetto_encoder()
            path = merge_to_perfetto(files, output)
        else:
            path = merge_kineto(files, output)
    except (TraceFormatError, MergeError) as e:
        raise click.ClickException(_one_line(e)) from None
    except OSError as e:
        raise click.ClickException(_one_line(f"{e.filename}: {e.strerror}" if e.filename else e)) from None
    click.echo(f"merged {len(files)} trace(s) into {path}", err=True)
