"""What a run leaves behind: per-rank Kineto traces, one Perfetto trace of all ranks, the
per-rank summary rows, and the optional report. Traces are built one rank at a time and
streamed to the writers, so memory stays bounded by one rank's trace."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator

from phantora_prof.runtime.clock import ORIGIN_NS
from tracing.kineto import write_kineto
from tracing.model import RankTrace

log = logging.getLogger(__name__)

TRACE_FORMATS = ("kineto", "perfetto", "both")


def _rank_traces(coord: Any, world: int, epoch_ns: int) -> Iterator[tuple[int, RankTrace]]:
    from phantora_prof.engine.collectives import distributed_info

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
    """Write the run's traces; returns (Kineto path per rank, Perfetto path, kept traces)."""
    from tracing.perfetto import write_perfetto

    out_dir.mkdir(parents=True, exist_ok=True)
    kineto = trace_format in ("kineto", "both")
    paths: dict[int, Path] = {}
    kept: dict[int, RankTrace] = {}

    def traces() -> Iterator[RankTrace]:
        for rank, trace in _rank_traces(coord, world, epoch_ns):
            if kineto:
                paths[rank] = write_kineto(trace, out_dir / f"rank{rank}.pt.trace.json.gz")
            if keep:
                kept[rank] = trace
            yield trace

    perfetto_path = None
    if trace_format in ("perfetto", "both"):
        perfetto_path = write_perfetto(traces(), out_dir / "run.pftrace")
    else:
        for _ in traces():
            pass
    return paths, perfetto_path, kept


def kept_traces(coord: Any, world: int, epoch_ns: int) -> dict[int, RankTrace]:
    """The traces in memory, for a report of a run whose traces are not written."""
    return dict(_rank_traces(coord, world, epoch_ns))
