"""`diff_traces`: load both sides, pair ranks, analyze, match ops.

Each side is a Kineto trace file (.json / .json.gz) or a directory of per-rank traces,
paired by `distributedInfo.rank`. Files are loaded one at a time with
`tracing.kineto.load_trace`, reduced to columns and then to per-rank figures, and the
parsed document is dropped before the next file is read, so memory peaks at one parsed
file. Mismatches are errors (`DiffError`), never silent guesses: rank sets that differ,
a requested step or rank that a side lacks, a directory file without a rank, two files
with one rank. Differences worth knowing that do not stop the diff (step counts that
differ, two single files of different ranks, GPU work outside the compared steps) are
returned as warnings.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from pathlib import Path

from tracing.diff.align import _ranges, parse_steps_spec
from tracing.diff.analyze import RankSummary, analyze
from tracing.diff.categories import CATEGORIES
from tracing.diff.events import DiffError, extract
from tracing.diff.ops import OpRow, match_ops
from tracing.diff.result import DiffResult, Side
from tracing.kineto import load_trace

__all__ = ["diff_traces", "load_side"]

_SUFFIXES = (".json", ".json.gz")


@contextmanager
def _no_gc():
    """Cyclic GC off while millions of acyclic objects are made (a 200 MB trace: 6 s of
    collections in orjson.loads alone, 1.8 s without); the JSON document and the columns
    hold no cycles, and reference counting still frees them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(f for f in path.iterdir() if f.is_file() and f.name.endswith(_SUFFIXES))
        if not files:
            raise DiffError(f"{path}: directory holds no .json or .json.gz trace")
        return files
    if not path.exists():
        raise DiffError(f"{path}: no such file or directory")
    return [path]


def load_side(path: str | Path, select: set[int] | None, rank: int | None = None
              ) -> dict[int, RankSummary | None]:
    """Per-rank summaries of one side by rank; with `rank`, other ranks map to None."""
    path = Path(path)
    files = _files(path)
    out: dict[int, RankSummary | None] = {}
    where: dict[int, Path] = {}
    for f in files:
        with _no_gc():
            doc = load_trace(f)
            tr = extract(doc, f)
            del doc
        if len(files) > 1 and tr.rank is None:
            raise DiffError(f"{f}: no distributedInfo.rank, so it cannot be paired with the other side's "
                            f"per-rank traces (directory {path} has {len(files)} traces)")
        r = tr.rank if tr.rank is not None else 0
        if r in out:
            raise DiffError(f"{path}: rank {r} appears twice ({where[r]} and {f})")
        where[r] = f
        if rank is not None and len(files) > 1 and r != rank:
            out[r] = None  # present, not analyzed
            continue
        with _no_gc():
            s = analyze(tr, select)
        s.rank_known = tr.rank is not None
        out[r] = s
        del tr
    return out


def _pick(by_rank: dict[int, RankSummary | None], rank: int, path, is_dir: bool,
          warnings: list[str]) -> RankSummary:
    if is_dir:
        s = by_rank.get(rank)
        if s is None:
            raise DiffError(f"--rank {rank}: {path} has no rank {rank} (it has ranks {_ranges(list(by_rank))})")
        return s
    s = next(iter(by_rank.values()))
    if s.rank_known and s.rank != rank:
        raise DiffError(f"--rank {rank}: {path} is rank {s.rank}")
    if not s.rank_known:
        warnings.append(f"{path} has no distributedInfo.rank; compared as rank {rank}")
    return s


def _op_table(ranks: list[RankSummary]) -> dict[tuple[str, str], OpRow]:
    """Mean per step (per rank) of every launching-op key, averaged over ranks."""
    acc: dict[tuple[str, str], list] = {}
    nr = len(ranks)
    for s in ranks:
        ns = max(1, len(s.steps))
        for key, op in s.ops.items():
            a = acc.get(key)
            if a is None:
                a = acc[key] = [0.0, 0.0, 0.0, op.order, [0] * len(op.cat_ns)]
            a[0] += op.count / ns
            a[1] += op.gpu_ns / 1e6 / ns
            a[2] += op.activities / ns
            a[3] = min(a[3], op.order)
            a[4] = [x + y for x, y in zip(a[4], op.cat_ns)]
    out = {}
    for key, (cnt, ms, acts, order, cat_ns) in acc.items():
        cat = CATEGORIES[max(range(len(cat_ns)), key=lambda i: cat_ns[i])]
        out[key] = OpRow(key[0], key[1], cat, round(cnt / nr, 6), round(ms / nr, 6), round(acts / nr, 6), order)
    return out


def _strip_shapes(table: dict[tuple[str, str], OpRow]) -> dict[tuple[str, str], OpRow]:
    out: dict[tuple[str, str], OpRow] = {}
    for (name, _dims), r in sorted(table.items(), key=lambda kv: kv[1].order):
        o = out.get((name, ""))
        if o is None:
            out[(name, "")] = OpRow(name, "", r.category, r.count, r.gpu_ms, r.activities, r.order)
        else:
            o.count = round(o.count + r.count, 6)
            o.gpu_ms = round(o.gpu_ms + r.gpu_ms, 6)
            o.activities = round(o.activities + r.activities, 6)
    return out


def diff_traces(base_path: str | Path, other_path: str | Path, rank: int | None = None,
                steps: str | tuple | None = None) -> DiffResult:
    """Compare two runs' traces (files or directories of per-rank traces).

    rank: compare only this rank (both sides must have it). steps: which steps to
    compare, as a spec string for both sides ('3-5', '3,4') or 'BASE/OTHER' ('3-5/0-2'),
    or a (base set, other set) pair; default: every (regular) step of each side.
    Raises `TraceFormatError` (unreadable file) or `DiffError` (nothing sensible to
    compare), both ValueErrors whose one-line message names the file.
    """
    if isinstance(steps, tuple):
        sel_b, sel_o = steps
    else:
        try:
            sel_b, sel_o = parse_steps_spec(steps)
        except ValueError as e:
            raise DiffError(str(e)) from None
    warnings: list[str] = []
    by_b = load_side(base_path, sel_b, rank)
    by_o = load_side(other_path, sel_o, rank)
    dir_b, dir_o = Path(base_path).is_dir(), Path(other_path).is_dir()
    if rank is not None:
        side_b = [_pick(by_b, rank, base_path, dir_b, warnings)]
        side_o = [_pick(by_o, rank, other_path, dir_o, warnings)]
    elif not dir_b and not dir_o:
        side_b, side_o = list(by_b.values()), list(by_o.values())
        if side_b[0].rank_known and side_o[0].rank_known and side_b[0].rank != side_o[0].rank:
            warnings.append(f"comparing rank {side_b[0].rank} ({base_path}) with rank {side_o[0].rank} "
                            f"({other_path})")
    elif dir_b != dir_o:
        d_path, d_ranks = (base_path, by_b) if dir_b else (other_path, by_o)
        if len(d_ranks) != 1:
            f_path = other_path if dir_b else base_path
            raise DiffError(f"ranks differ: {d_path} has ranks {_ranges(list(d_ranks))}, {f_path} is one "
                            "trace; pass --rank R to compare one rank")
        side_b, side_o = list(by_b.values()), list(by_o.values())
    else:
        if sorted(by_b) != sorted(by_o):
            raise DiffError(f"ranks differ: {base_path} has ranks {_ranges(list(by_b))}, {other_path} has "
                            f"ranks {_ranges(list(by_o))}; pass --rank R to compare one rank")
        side_b = [by_b[r] for r in sorted(by_b)]
        side_o = [by_o[r] for r in sorted(by_o)]
    for sb, so in zip(side_b, side_o):
        if sb.device and so.device and sb.device != so.device:
            # kernel times are a GPU's own: a real H100 profile against a simulated H200 run
            # differs by the GPUs before anything else (phantora-prof --gpu picks the simulated one)
            warnings.append(f"the traces ran on different GPUs: {sb.device} ({sb.path}) and {so.device} "
                            f"({so.path}); GPU times differ by the hardware first (simulate the real "
                            "run's GPU with phantora-prof --gpu)")
        for s in (sb, so):
            warnings.extend(s.notes)
            if not s.steps:
                raise DiffError(f"{s.path}: no steps to compare ({s.plan.description})")
            if s.unassigned_gpu_ns:
                what = ("setup, partial first/last iterations, steps not compared"
                        if s.plan.source == "detected" else "steps not compared")
                what += ", or work whose launch and op the trace does not hold"
                warnings.append(f"{s.path}: {s.unassigned_gpu_ns / 1e6:.3f} ms of GPU work was launched outside "
                                f"the compared steps ({what}) and is not counted")
        nb, no = [st.number for st in sb.steps], [st.number for st in so.steps]
        where = f"rank {sb.rank}: " if len(side_b) > 1 else ""
        if len(nb) != len(no):
            warnings.append(f"{where}base has {len(nb)} steps ({sb.plan.source} {_ranges(nb)}), other has "
                            f"{len(no)} ({so.plan.source} {_ranges(no)}): figures are means over each side's "
                            f"steps; per-step rows pair the first {min(len(nb), len(no))} in order")
        elif nb != no:
            warnings.append(f"{where}step numbers differ: base {sb.plan.source} {_ranges(nb)}, other "
                            f"{so.plan.source} {_ranges(no)}; paired in order")
    tb = _op_table(side_b)
    to = _op_table(side_o)
    if not all(s.has_shapes for s in side_b + side_o):
        warnings.append("a side was recorded without input shapes (record_shapes=False): ops are matched by "
                        "name only")
        tb, to = _strip_shapes(tb), _strip_shapes(to)
    matches, only_b, only_o = match_ops(tb, to)
    # keep the order of first appearance stable for the JSON
    seen = set()
    warnings = [w for w in warnings if not (w in seen or seen.add(w))]
    return DiffResult(Side("base", str(base_path), side_b), Side("other", str(other_path), side_o),
                      matches, only_b, only_o, warnings)
