"""Host collectives and host messages between ranks, served by the coordinator.

A rank's CPU collectives (and the real values of small device collectives) are exchanges:
every live member sends its part (`protocol.HostExchange`), and when all have, each gets all
the parts back (`HostExchangeReply`); the rank combines them (runtime/distributed/
host_collectives.py). Point-to-point messages wait in a mailbox until their receiver asks.

These are answered when they arrive, not in the ranks' queue order: a rank blocked in a
CPU collective may have device collectives still parked in its queue, which wait for ranks
that are themselves about to join this exchange. The answers depend only on what the
members sent (the latest host time, their parts), so the result is the same whatever the
order of arrival.

Mirrored ranks (engine/representatives.py) send nothing: their part is their
representative's, which the reply's `index` says. When the representative is not in the
group (a checker rank's tensor-parallel group holds mirrors of rank 0's peers), the part is
the one the representative sent in the same exchange of its own counterpart group
(`Layout.counterpart`): the mirror plays the representative's role there. Completed
exchanges are kept, by member ranks and sequence number, for that purpose.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from phantora_prof.engine.collectives import CollectiveError
from phantora_prof.protocol import HostExchange, HostExchangeReply, HostRecv, HostRecvReply, HostSend

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    group: str
    seq: int
    members: tuple[int, ...]  # the live members, group order
    parts: dict[int, HostExchange] = field(default_factory=dict)
    conns: dict[int, Any] = field(default_factory=dict)
    first_arrival_s: float = 0.0

    def missing(self) -> list[int]:
        return [r for r in self.members if r not in self.parts]


Reply = tuple[Any, Any]  # (connection, reply message)


def _ranks_text(ranks: tuple[int, ...], shown: int = 8) -> str:
    """A group's ranks for an error message: all of a small group, the ends of a large one."""
    if len(ranks) <= shown:
        return str(list(ranks))
    head = ", ".join(map(str, ranks[:shown // 2]))
    tail = ", ".join(map(str, ranks[-2:]))
    return f"[{head}, ..., {tail}] ({len(ranks)} ranks)"


def _sources(members: tuple[int, ...], desc: str, live: tuple[int, ...], layout: Any) -> list:
    """Where each member's part of an exchange comes from: ("own", rank) for a live member or a
    mirror whose representative is in the group, ("counterpart", group ranks, rank) for a mirror
    whose representative is elsewhere (the same kind of group around it, Layout.counterpart)."""
    member_set = set(members)
    sources = []
    for r in members:
        rep = layout.rep_of(r)
        if rep in member_set:
            sources.append(("own", rep))
            continue
        other = layout.counterpart(members, desc, rep)
        # no counterpart (a group the probe did not declare): the first live member's part
        sources.append(("counterpart", other, rep) if other is not None else ("own", live[0]))
    _follow_the_class(sources, members, layout)
    return sources


def _follow_the_class(sources: list, members: tuple[int, ...], layout: Any) -> None:
    """In a group whose mirrored members take their parts from a counterpart group (a
    checker's group, outside its representative's), the live checker takes its
    representative's part there too: the group's result is then the one the representative's
    group got. Otherwise a value-dependent loop diverges: DTensor's `trunc_normal_` redraws
    until an all-reduced `any()` says no value is out of bounds; the checker's own draws
    differ from its representative's, so its group kept looping after the representative's
    stopped, and from then on took its counterpart's parts from unrelated exchanges."""
    counterparts = {src[1] for src in sources if src[0] == "counterpart"}
    if len(counterparts) != 1:
        return
    other = next(iter(counterparts))
    other_set = set(other)
    for i, r in enumerate(members):
        if sources[i] != ("own", r) or layout.class_of_checker(r) is None:
            continue
        rep = layout.stage_rep(r)
        if rep in other_set:
            sources[i] = ("counterpart", other, rep)


class HostExchanges:
    """The pending exchanges and undelivered messages of a run.

    `members_of(group)`: the group's global ranks in group order and its description (from
    its GroupCreated); `layout()`: the live ranks and each rank's representative (None:
    every rank live)."""

    def __init__(self, members_of: Callable[[str], tuple | None], layout: Callable[[], Any]):
        self._members_of = members_of
        self._layout = layout
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._mail: dict[tuple, HostSend] = {}
        self._waiting: dict[tuple, tuple[HostRecv, Any]] = {}
        self._plan: dict[str, tuple] = {}
        # (sorted members, seq) -> [parts, uses left]: a completed exchange's parts, kept while some
        # group of mirrored ranks still has to take them as its counterpart's (_counterpart_uses)
        self._done: dict[tuple[tuple[int, ...], int], list] = {}
        self._uses: dict[tuple[int, ...], int] | None = None
        self.misaligned = 0  # exchanges whose counterpart was another collective (_lines_up)

    def _group_plan(self, group: str) -> tuple:
        """(members, live members, each member's source (`_sources`); None when all are live)."""
        plan = self._plan.get(group)
        if plan is None:
            found = self._members_of(group)
            if found is None:
                raise CollectiveError(f"a host collective on process group {group!r}, which no rank announced")
            members, desc = tuple(found[0]), found[1]
            layout = self._layout()
            if layout is None:
                plan = (members, members, None)
            else:
                live = tuple(r for r in members if layout.is_live(r))
                plan = (members, live, None if live == members else tuple(_sources(members, desc, live, layout)))
            self._plan[group] = plan
        return plan

    def _lines_up(self, pend: _Pending, done: list, theirs: bytes, mine: bytes) -> bool:
        """Whether the counterpart's exchange at this position is the same collective: a
        checker whose program differs from its representative's (uneven shards: an op more
        or less) shifts its groups' exchanges against the counterparts'. Then its own part
        stands in for the mirrored members' (a device collective's values must at least have
        its shapes), and the run goes on: the class check reports the difference."""
        what = next(iter(pend.parts.values())).what
        same = done[2] == what and (not what.startswith("values:") or len(theirs) == len(mine))
        if not same:
            self.misaligned += 1
            if self.misaligned == 1:
                log.warning("host exchange #%d of process group %r (%s) does not line up with its counterpart's "
                            "(%s): a checker's program differs from its representative's; its own values stand in "
                            "for the mirrored members'", pend.seq, pend.group, what, done[2])
        return same

    def _counterpart_uses(self) -> dict[tuple[int, ...], int]:
        """Sorted members of a group -> how many groups with a live member take its parts for
        their mirrored members (its counterpart, Layout.counterpart). A completed exchange is
        kept until they all have (each does once per exchange, if its program matches its
        representative's), so the coordinator does not keep every small collective's values."""
        uses = self._uses
        if uses is None:
            layout = self._layout()
            uses = {}
            for group, desc in layout.declared:
                live = tuple(r for r in group if layout.is_live(r))
                if not live:
                    continue  # no process: never exchanges
                for other in {src[1] for src in _sources(group, desc, live, layout) if src[0] == "counterpart"}:
                    key = tuple(sorted(other))
                    uses[key] = uses.get(key, 0) + 1
            self._uses = uses
        return uses

    def exchange(self, msg: HostExchange, conn: Any) -> list[Reply]:
        key = (msg.group, msg.seq)
        pend = self._pending.get(key)
        if pend is None:
            _, live, _ = self._group_plan(msg.group)
            pend = self._pending[key] = _Pending(msg.group, msg.seq, live, first_arrival_s=time.monotonic())
        if msg.rank in pend.parts:
            raise CollectiveError(f"rank {msg.rank} joined host collective #{msg.seq} of process group "
                                  f"{msg.group!r} twice")
        if msg.rank not in pend.members:
            raise CollectiveError(f"rank {msg.rank} joined host collective #{msg.seq} of process group "
                                  f"{msg.group!r}, which it is not a live member of")
        other = next(iter(pend.parts.values()), None)
        if other is not None and other.what != msg.what:
            raise CollectiveError(
                f"mismatched host collectives in process group {msg.group!r}: collective #{msg.seq} of the group is "
                f"{other.what} on rank {other.rank} but {msg.what} on rank {msg.rank}. Every member must issue the "
                "same collectives, in the same order")
        pend.parts[msg.rank] = msg
        pend.conns[msg.rank] = conn
        return self._complete_ready()

    def _complete_ready(self) -> list[Reply]:
        """Answer every pending exchange that has all it needs (a completed one may be the
        counterpart another waits for: repeat until none completes)."""
        out: list[Reply] = []
        progress = True
        while progress:
            progress = False
            for key in sorted(self._pending):
                replies = self._try_complete(self._pending[key])
                if replies is not None:
                    del self._pending[key]
                    out += replies
                    progress = True
        return out

    def _try_complete(self, pend: _Pending) -> list[Reply] | None:
        if pend.missing():
            return None
        members, live, sources = self._group_plan(pend.group)
        own = {r: pend.parts[r].payload for r in live}
        if sources is None:
            payloads, index = tuple(own[r] for r in live), None
        else:
            distinct: dict[tuple, int] = {}
            payload_list: list[bytes] = []
            index_list = []
            for src in sources:
                if src[0] == "own":
                    k = ("own", src[1])
                    if k not in distinct:
                        distinct[k] = len(payload_list)
                        payload_list.append(own[src[1]])
                else:
                    k = (src[1], src[2])
                    if k not in distinct:
                        done = self._done.get((src[1], pend.seq))
                        theirs = done[0].get(src[2]) if done is not None else None
                        if theirs is None:
                            return None  # the representative has not reached this exchange yet
                        if not self._lines_up(pend, done, theirs, own[live[0]]):
                            theirs = own[live[0]]
                        distinct[k] = len(payload_list)
                        payload_list.append(theirs)
                index_list.append(distinct[k])
            payloads, index = tuple(payload_list), tuple(index_list)
            for group in {src[1] for src in sources if src[0] == "counterpart"}:
                done = self._done[(group, pend.seq)]
                done[1] -= 1
                if done[1] <= 0:
                    del self._done[(group, pend.seq)]
        if self._layout() is not None:
            key = tuple(sorted(members))
            uses = self._counterpart_uses().get(key, 0)
            if uses:
                self._done[(key, pend.seq)] = [own, uses, next(iter(pend.parts.values())).what]
        reply = HostExchangeReply(max(p.host_ns for p in pend.parts.values()), payloads, index)
        return [(pend.conns[r], reply) for r in pend.members]

    def _counterparts_awaited(self, pend: _Pending) -> list[tuple[tuple[int, ...], int]]:
        """(group ranks, representative) of the counterpart exchanges that `pend`, joined by all
        its live members, still waits for (`_try_complete`)."""
        _, _, sources = self._group_plan(pend.group)
        if sources is None:
            return []
        return sorted({(src[1], src[2]) for src in sources
                       if src[0] == "counterpart" and (src[1], pend.seq) not in self._done})

    def _check_counterparts(self, pend: _Pending, what: str, gone: Callable[[int], bool], timeout_s: float,
                            now: float, waited_since: Callable[[float, list[int]], float] | None,
                            final: bool) -> None:
        """An exchange every live member joined that waits for its counterparts' parts: the
        representatives whose groups should hold the same exchange are named when they end
        without reaching it, or stay silent past the timeout (their programs and the checker's
        diverge; before, this waited for the timeout and named no rank)."""
        awaited = self._counterparts_awaited(pend)
        if not awaited:
            return
        reps = sorted({rep for _, rep in awaited})
        where = "; ".join(f"rank {rep} in the group of ranks {_ranks_text(ranks)}" for ranks, rep in awaited)
        advice = ("the mirrored members' parts come from the same exchange of their representatives' groups, "
                  "so a checker's program went where its representative's did not; --live-ranks all runs every "
                  "rank as itself, --no-class-check runs no checkers")
        ended = [r for r in reps if gone(r)]
        if ended or final:
            raise CollectiveError(f"{what}: waits for the same exchange of {where}, but rank(s) {ended or reps} "
                                  f"finished without reaching it: {advice}")
        since = waited_since(pend.first_arrival_s, reps) if waited_since else pend.first_arrival_s
        if now - since > timeout_s:
            raise CollectiveError(f"{what}: waits for the same exchange of {where}, which rank(s) {reps} did not "
                                  f"reach within {timeout_s:g} s (--collective-timeout): {advice}")

    def send(self, msg: HostSend) -> list[Reply]:
        layout = self._layout()
        if layout is not None and not layout.is_live(msg.dst):
            return []  # to a mirrored rank: its representative received its own copy
        key = (msg.group, msg.rank, msg.dst, msg.tag, msg.seq)
        waiting = self._waiting.pop(key, None)
        if waiting is not None:
            return [(waiting[1], HostRecvReply(msg.host_ns, msg.payload))]
        self._mail[key] = msg
        return []

    def recv(self, msg: HostRecv, conn: Any) -> list[Reply]:
        layout = self._layout()
        if layout is not None and not layout.is_live(msg.src):
            raise CollectiveError(
                f"rank {msg.rank} receives a message from rank {msg.src}, which is simulated by its representative "
                f"(rank {layout.rep_of(msg.src)}) and runs no program: messages between two ranks need both live "
                "(--live-ranks all)")
        key = (msg.group, msg.src, msg.rank, msg.tag, msg.seq)
        sent = self._mail.pop(key, None)
        if sent is not None:
            return [(conn, HostRecvReply(sent.host_ns, sent.payload))]
        self._waiting[key] = (msg, conn)
        return []

    def check(self, gone: Callable[[int], bool], timeout_s: float,
              waited_since: Callable[[float, list[int]], float] | None = None, final: bool = False) -> None:
        """Raise for exchanges or receives that can never complete (a member ended without
        joining), or whose missing members sent nothing for `timeout_s` (`waited_since`: when
        the wait last made progress)."""
        now = time.monotonic()
        for key, pend in sorted(self._pending.items()):
            missing = pend.missing()
            what = (f"host collective #{key[1]} of process group {key[0]!r} "
                    f"({next(iter(pend.parts.values())).what}, joined by rank(s) {sorted(pend.parts)})")
            if not missing:
                self._check_counterparts(pend, what, gone, timeout_s, now, waited_since, final)
                continue
            ended = [r for r in missing if gone(r)]
            if ended or final:
                raise CollectiveError(f"{what}: rank(s) {ended or missing} finished without joining it: the ranks "
                                      "issue different collectives")
            since = waited_since(pend.first_arrival_s, missing) if waited_since else pend.first_arrival_s
            if now - since > timeout_s:
                raise CollectiveError(f"{what}: rank(s) {missing} did not join it within {timeout_s:g} s "
                                      "(--collective-timeout)")
        for key, (msg, _) in sorted(self._waiting.items(), key=lambda kv: kv[0]):
            if gone(msg.src) or final:
                raise CollectiveError(f"rank {msg.rank} waits for message #{msg.seq} (tag {msg.tag}) from rank "
                                      f"{msg.src} in process group {msg.group!r}, but rank {msg.src} finished "
                                      "without sending it")
