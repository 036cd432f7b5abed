"""What a run leaves behind: per-rank Kineto traces, one Perfetto trace of all ranks, the
per-rank summary rows, and the optional report. Traces are built one rank at a time and
streamed to the writers, so memory stays bounded by one rank's trace."""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Callable, Iterator

from phantora_prof.protocol import ORIGIN_NS
from tracing.kineto import write_kineto
from tracing.model import RankTrace

log = logging.getLogger(__name__)

TRACE_FORMATS = ("kineto", "perfetto", "both")
PERFETTO_ENCODER_SOURCE = "native/perfetto/perfetto_events.c"
ENV_PYTHON_PERFETTO = "PHANTORA_PYTHON_PERFETTO"  # =1: encode the .pftrace in Python (same bytes, slower)
KINETO_RENDERER_SOURCE = "native/kineto/kineto_events.c"
ENV_PYTHON_KINETO = "PHANTORA_PYTHON_KINETO"  # =1: render the Kineto JSON's events in Python (same bytes, slower)


def _use_native(source: str, module_name: str, env: str, install: Callable[[Any], None]) -> bool:
    """Hand `install` the compiled extension of `source` (built with the C compiler on first
    use, phantora_prof/c_extensions.py), or None where `env`=1 asks for Python or it cannot be
    built (the Python path writes the same bytes). Returns whether it is in use."""
    import os

    from phantora_prof import c_extensions

    module = c_extensions.load(source, module_name) if os.environ.get(env) != "1" else None
    install(module)
    return module is not None


def use_native_perfetto_encoder() -> bool:
    """Encode Perfetto events with the compiled encoder (~1 s to build; ~3x faster over a whole
    trace) unless PHANTORA_PYTHON_PERFETTO=1 or it cannot be built."""
    from tracing.perfetto import use_native_encoder

    return _use_native(PERFETTO_ENCODER_SOURCE, "phantora_perfetto", ENV_PYTHON_PERFETTO, use_native_encoder)


def use_native_kineto_renderer() -> bool:
    """Render the Kineto files' events with the compiled renderer (~3x faster over a whole file)
    unless PHANTORA_PYTHON_KINETO=1 or it cannot be built. Set before the forked writers start
    (forked_writes.py): they inherit it."""
    from tracing.kineto import use_native_renderer

    return _use_native(KINETO_RENDERER_SOURCE, "phantora_kineto", ENV_PYTHON_KINETO, use_native_renderer)


def check_output_paths(out_dir: Path | None, report_dir: Path | None, summary_json: Path | None) -> None:
    """Before the script starts: every output can be written (directories are created), so a
    bad `--out`, `--report` or `--summary-json` is a one-line error now, not after the run."""
    from phantora_prof.errors import ConfigError

    if out_dir is not None:
        _check_dir(Path(out_dir), "--out")
    if report_dir is not None:
        _check_dir(Path(report_dir), "--report")
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise ConfigError("--report draws its plots with matplotlib, which is not installed: "
                              "pip install matplotlib (or phantora-prof[plot])")
    if summary_json is not None:
        path = Path(summary_json)
        if path.is_dir():
            raise ConfigError(f"--summary-json {path}: is a directory; give a file name (e.g. {path / 'summary.json'})")
        _check_dir(path.parent if str(path.parent) else Path("."), "--summary-json", of=path)


_OUR_TRACE = re.compile(r"rank\d+\.pt\.trace\.json\.gz")


def clear_previous_outputs(out_dir: Path) -> list[Path]:
    """Remove what an earlier run wrote in `out_dir` (`rank{R}.pt.trace.json.gz`, `run.pftrace`),
    so that the directory holds this run's traces only: a larger earlier run's extra ranks
    would otherwise stay, and `phantora-prof merge` would combine them with this run's."""
    removed = []
    if not out_dir.is_dir():
        return removed
    for p in sorted(out_dir.iterdir()):
        if (p.name == "run.pftrace" or _OUR_TRACE.fullmatch(p.name)) and p.is_file():
            try:
                p.unlink()
                removed.append(p)
            except OSError as exc:
                log.warning("could not remove %s of an earlier run: %s", p, exc)
    if removed:
        log.info("removed %d trace file(s) of an earlier run from %s", len(removed), out_dir)
    return removed


def _check_dir(path: Path, option: str, of: Path | None = None) -> None:
    import tempfile

    from phantora_prof.errors import ConfigError

    what = f"{option} {of if of is not None else path}"
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what}: {path} is a file, not a directory"
                          + ("" if of is not None else "; give a directory (it is created if missing)"))
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ConfigError(f"{what}: cannot write in {path}: {exc.strerror or exc}; "
                          "choose a directory you can write to") from None


def _rank_traces(coord: Any, world: int, epoch_ns: int) -> Iterator[tuple[int, RankTrace]]:
    from phantora_prof.engine.process_groups import distributed_info

    for rank in range(world):
        res = coord.ranks.get(rank)
        if res is None:
            continue
        trace = res.timeline.finish(base_time_ns=epoch_ns - ORIGIN_NS, trace_name=f"rank{rank}")
        info = distributed_info(res.timeline, world)
        if info is not None:
            trace.distributed_info = info
        yield rank, trace


def write_traces(coord: Any, world: int, epoch_ns: int, out_dir: Path, trace_format: str,
                 keep: bool = False) -> tuple[dict[int, Path], Path | None, dict[int, RankTrace]]:
    """Write the run's traces; returns (Kineto path per rank, Perfetto path, kept traces). The
    Kineto files are written by forked children while this process goes on with the Perfetto
    file and the next rank (forked_writes.py)."""
    from phantora_prof.forked_writes import ForkedWrites
    from tracing.perfetto import write_perfetto

    out_dir.mkdir(parents=True, exist_ok=True)
    kineto = trace_format in ("kineto", "both")
    if kineto:
        use_native_kineto_renderer()
    paths: dict[int, Path] = {}
    kept: dict[int, RankTrace] = {}

    with ForkedWrites() as kineto_writes:
        def traces() -> Iterator[RankTrace]:
            for rank, trace in _rank_traces(coord, world, epoch_ns):
                if kineto:
                    path = paths[rank] = out_dir / f"rank{rank}.pt.trace.json.gz"
                    kineto_writes.submit(write_kineto, path, trace, path)
                if keep:
                    kept[rank] = trace
                yield trace

        perfetto_path = None
        if trace_format in ("perfetto", "both"):
            use_native_perfetto_encoder()
            perfetto_path = write_perfetto(traces(), out_dir / "run.pftrace")
        else:
            for _ in traces():
                pass
    return paths, perfetto_path, kept


def kept_traces(coord: Any, world: int, epoch_ns: int) -> dict[int, RankTrace]:
    """The traces in memory, for a report of a run whose traces are not written."""
    return dict(_rank_traces(coord, world, epoch_ns))
