"""Representative ranks: which ranks run a live process, and whom each other rank mirrors.

Most ranks of a data-, fully-sharded-, tensor-, context- or expert-parallel job run the same
program up to their coordinates: the same ops on the same shapes, the same collectives on
groups of the same size. Simulating one of them stands for all of them. Pipeline stages
differ (their layers, their sends and receives), so each stage needs its own.

The layout comes from the script itself: the first rank runs alone (the *probe*) until it
first needs another rank (a collective, a message, its end); by then it has created its
process groups, and a `new_group` call is made on every rank for every group, member or
not, so rank 0 alone reveals the whole layout (`GroupDeclared`). Groups whose description
marks pipeline stages (DeviceMesh's `mesh_pp`, Megatron's `PIPELINE_MODEL_PARALLEL_GROUP`)
make rank 0's pipeline group live, one rank per stage; every other rank mirrors the live
rank of its own stage. Without pipeline groups, rank 0 stands for every rank.

A second set of live ranks checks the first: the pipeline group of the world's last rank
(or the last rank alone). Its ranks run as themselves and belong to the classes of the
first set's ranks; at the end their op and kernel counts are compared with their
representatives' (`check`), so a program that is not the same on every rank (a rank-0-only
evaluation, uneven shards) is reported rather than silently mirrored.

Mirrored ranks send nothing: a collective starts when its live members are ready (a mirrored
member is assumed ready when its representative is), and is timed by netsim over the whole
group and topology. A host collective gives a mirrored member its representative's part.
Approximation: ranks of one class are assumed to reach each collective at the same time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from phantora_prof.errors import ConfigError

# group descriptions that mark pipeline-parallel groups (members are different stages)
PIPELINE_DESCS = ("mesh_pp", "mesh_pipeline", "mesh_pipeline_parallel", "pipeline_model_parallel_group",
                  "pipe_parallel_group")

# `--live-ranks auto` keeps every rank live up to this many ranks (small jobs: full fidelity is cheap)
AUTO_ALL_LIVE_UP_TO = 8

LIVE_RANKS_CHOICES = ("auto", "all", "representative")


def is_pipeline(desc: str) -> bool:
    d = (desc or "").lower()
    return d in PIPELINE_DESCS or d.startswith("mesh_pp") or ("pipeline" in d and "expert" not in d)


def representative_mode(choice: str, world_size: int) -> bool:
    """Whether a run uses representative ranks (`--live-ranks`)."""
    if choice not in LIVE_RANKS_CHOICES:
        raise ConfigError(f"--live-ranks {choice!r}: choose one of {', '.join(LIVE_RANKS_CHOICES)}")
    if world_size < 2 or choice == "all":
        return False
    return choice == "representative" or world_size > AUTO_ALL_LIVE_UP_TO


@dataclass(frozen=True)
class Layout:
    """The live ranks of a run and the representative of every rank."""

    world_size: int
    primary: tuple[int, ...]  # the representatives, one per class (stage order)
    checkers: tuple[int, ...]  # live ranks that check their class (same stage order), may be empty
    stage_of: tuple[int, ...] | None  # each rank's stage (index into `primary`); None: one class
    reason: str
    declared: tuple = ()  # the probe's groups: (global ranks, description) each, in creation order
    requested: tuple[int, ...] = ()  # live on request (--trace-ranks), with their pipeline peers
    _live: frozenset = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_live", frozenset(self.primary) | frozenset(self.checkers)
                           | frozenset(self.requested))

    @property
    def live(self) -> tuple[int, ...]:
        return tuple(sorted(self._live))

    def is_live(self, rank: int) -> bool:
        return rank in self._live

    def rep_of(self, rank: int) -> int:
        """The live rank whose simulation stands for `rank` (itself when live)."""
        if rank in self._live:
            return rank
        return self.stage_rep(rank)

    def stage_rep(self, rank: int) -> int:
        """The representative of `rank`'s class (its stage's primary rank)."""
        if self.stage_of is None:
            return self.primary[0]
        return self.primary[self.stage_of[rank]]

    def class_sizes(self) -> dict[int, int]:
        """Representative -> how many ranks its class has (itself, its checker, its mirrors)."""
        sizes = {r: 0 for r in self.primary}
        for rank in range(self.world_size):
            cls = self.class_of_checker(rank)
            rep = cls if cls is not None else self.rep_of(rank)
            sizes[rep] = sizes.get(rep, 0) + 1
        return sizes

    def counterpart(self, ranks: tuple[int, ...], desc: str, rep: int) -> tuple[int, ...] | None:
        """The group that plays, for `rep`, the role a group (`ranks`, `desc`) plays for a rank
        that `rep` stands for: the declared group of the same description and size that holds
        `rep` (a checker's tensor-parallel group -> rank 0's). None when there is not exactly one."""
        by_rank = self._index().get((desc, len(ranks)), {})
        found = by_rank.get(rep)
        return found if found is not None and found != ranks else None

    def _index(self) -> dict:
        """(description, size) -> {rank: the one declared group of that kind holding it}; a rank in
        two different groups of one kind maps to None (ambiguous). Built once: a 16,384-rank
        layout declares tens of thousands of groups."""
        idx = getattr(self, "_by_kind", None)
        if idx is None:
            idx = {}
            for g, d in self.declared:
                kind = idx.setdefault((d, len(g)), {})
                for r in g:
                    prev = kind.get(r, g)
                    kind[r] = g if prev == g else None
            object.__setattr__(self, "_by_kind", idx)
        return idx

    def class_of_checker(self, rank: int) -> int | None:
        """The representative whose class a live non-primary rank (a checker, a rank live on
        request) belongs to; None for any other rank."""
        if rank in self.primary or rank not in self._live:
            return None
        if rank in self.checkers and len(self.checkers) != len(self.primary):
            return None
        return self.stage_rep(rank)

    @property
    def checked(self) -> tuple[int, ...]:
        """Every live rank that runs as itself inside another's class (checkers, then requested;
        `plan` keeps the two apart)."""
        return self.checkers + self.requested


def plan(world_size: int, declared: list[tuple[tuple[int, ...], str]], requested: tuple[int, ...] = (),
         check: bool = True) -> Layout:
    """The layout from the groups the probe declared: (global ranks, description) per group.
    `requested` ranks (--trace-ranks) are live too, each with its pipeline group (its stage
    neighbours must be live for its sends and receives). `check`: a second live set checks the
    classes (--no-class-check leaves it out: half the live processes, nothing checked)."""
    declared = list(dict.fromkeys((tuple(r), d) for r, d in declared))  # a mesh re-creates its groups
    pipelines = [tuple(r) for r, desc in declared if is_pipeline(desc) and len(r) > 1]
    if pipelines:
        stage_of = [-1] * world_size
        group_of: dict[int, tuple[int, ...]] = {}
        for group in pipelines:
            for i, r in enumerate(group):
                if 0 <= r < world_size and stage_of[r] < 0:
                    stage_of[r] = i
                    group_of[r] = group
        first = next((g for g in pipelines if 0 in g), None)
        if first is not None and all(s >= 0 for s in stage_of):
            last = next((g for g in pipelines if world_size - 1 in g), first)
            checkers = () if set(last) & set(first) or not check else last
            live = set(first) | set(checkers)
            extra = tuple(dict.fromkeys(m for r in requested if r not in live for m in group_of[r] if m not in live))
            return Layout(world_size, first, checkers, tuple(stage_of),
                          f"{len(first)} pipeline stages ({len(pipelines)} pipeline groups): one live rank per stage",
                          tuple(declared), extra)
    checkers = (world_size - 1,) if world_size > 1 and check else ()
    extra = tuple(dict.fromkeys(r for r in requested if r != 0 and r not in checkers))
    return Layout(world_size, (0,), checkers, None, "no pipeline stages: rank 0 stands for every rank",
                  tuple(declared), extra)


def check(layout: Layout, counts: dict[int, tuple[int, int]]) -> list[str]:
    """Compare each checker's (ops, kernels) with its representative's; the differences, as
    sentences for the summary."""
    out = []
    for rank in layout.checked:
        rep = layout.class_of_checker(rank)
        if rep is None or rank not in counts or rep not in counts:
            continue
        if counts[rank] != counts[rep]:
            (o1, k1), (o2, k2) = counts[rep], counts[rank]
            out.append(f"rank {rank} ran {o2:,} ops / {k2:,} kernels, but rank {rep}, whose simulation stands for "
                       f"its class, ran {o1:,} / {k1:,}: the ranks' programs differ, so the mirrored ranks of this "
                       "class may be off (--live-ranks all simulates every rank)")
    return out
