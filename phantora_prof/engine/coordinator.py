"""The coordinator: owns simulated time for all ranks and answers their sync requests.

Rank processes connect over a local stream socket (the framing in `protocol` works over TCP
too) and send batches of messages in their own non-decreasing virtual host time. A rank
blocks only on requests (synchronize, `.item()`, event queries), which the coordinator
answers from its timelines.

Messages go into one queue per rank and are processed in each rank's own order. The ranks'
timelines are independent except through collectives: a rank's queue stops ("parks") at a
collective until every member of the group has launched it; then the collective is
resolved from the members' readiness alone (`engine.collectives`) and their queues go on.
So every rank's timeline is a function of the ranks' message sequences only, never of the
order in which the operating system delivered them: the same inputs give the same traces.
A request behind a parked collective is answered when its queue reaches it (the rank
stays blocked meanwhile, as a real `synchronize()` waits for the all-reduce before it).

Failures never hang: mismatched collectives, ranks that exit without joining a collective,
wait cycles between groups, and (after `collective_timeout_s` in which a missing rank sent
nothing: a rank still busy simulating is not stuck) ranks that never arrive are
reported with the group, the sequence numbers and the ranks involved.
"""
from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from phantora_prof import protocol
from phantora_prof.engine import collectives as _coll
from phantora_prof.engine import collector as _collector
from phantora_prof.engine import contention as _contention
from phantora_prof.engine import representatives as _reps
from phantora_prof.engine.host_exchange import HostExchanges
from phantora_prof.engine.rank_timeline import RankTimeline
from phantora_prof.errors import ProtocolError
from phantora_prof.protocol import (Annotation, AutogradSpan, CollectiveCall, CollectiveWait, EventRecord, Goodbye,
                                    GroupCreated, GroupDeclared, Hello, HostExchange, HostOps, HostRecv, HostSend,
                                    INTERNAL_GROUP_PREFIX, MemoryCounters, MemoryEvent, OpCall, StreamCreated, StreamWaitEvent, SyncRequest)

log = logging.getLogger(__name__)


@dataclass
class RankResult:
    rank: int
    timeline: RankTimeline
    pid: int = 0
    goodbye: Goodbye | None = None
    connected: bool = False


# how long a SIGINT the CLI got waits for the ranks to note that they got it too (a Ctrl-C in a
# terminal) before it is passed on to them: a rank notes it as soon as its main thread runs
# Python again, and one busy in C for longer gets both SIGINTs folded into one
SIGINT_NOTE_WAIT_S = 0.5

_NEEDS_OTHERS = (CollectiveCall, HostExchange, HostRecv, HostSend, Goodbye)
# messages that go to their rank's queue as they are and that its timeline handles (nothing in
# `_read` or `_dispatch` applies to them): a step of a GPT-2 sends ~1,500, so they skip the
# chains of isinstance checks (issue #18)
_PLAIN = frozenset({OpCall, HostOps, Annotation, MemoryCounters, MemoryEvent, AutogradSpan, EventRecord,
                    StreamWaitEvent, StreamCreated, SyncRequest})


@dataclass
class Coordinator:
    world_size: int
    socket_dir: str
    timeline_factory: Callable[[int], RankTimeline]
    ranks: dict[int, RankResult] = field(default_factory=dict)
    collective_model: Any = None  # engine.collectives.CollectiveModel; built lazily when None
    collective_timeout_s: float = 300.0
    model_factory: Callable[[], Any] | None = None
    # representative ranks (engine/representatives.py): rank 0 runs alone until it needs another
    # rank; then the layout is planned and `spawn` starts the other live ranks
    representative: bool = False
    requested: tuple[int, ...] = ()  # ranks live on request (--trace-ranks)
    class_check: bool = True  # a second live set checks the classes (--no-class-check: none)
    spawn: Callable[[list[int]], None] | None = None
    # freeze what survives each round of messages (engine/collector.py): the cyclic collector
    # walked the run's spans over and over (20-35% of the coordinator's time); False leaves it be
    freeze_rounds: bool = True

    def __post_init__(self) -> None:
        self.address = os.path.join(self.socket_dir, "coordinator.sock")  # launcher._socket_dir keeps it short
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.address)
        self._server.listen(max(16, self.world_size))
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._server, selectors.EVENT_READ, None)
        self._conn_rank: dict[socket.socket, int | None] = {}
        self._queues: dict[int, deque] = {}
        self._parked: dict[int, set[tuple[str, int]]] = {}  # rank -> unresolved collectives it waits for
        self._groups: dict[int, dict] = {}  # rank -> its coalesced group in progress
        self._pending: dict[tuple[str, int], _coll.PendingCollective] = {}
        self._exited: set[int] = set()  # ranks whose process has exited
        self.error: Exception | None = None
        self.failed_rank: int | None = None
        self.collectives_resolved = 0
        self._close_order: dict[int, int] = {}
        self.stop_signal: int | None = None  # set by request_stop: the run is being interrupted
        self._stop_deadline: float | None = None
        self._stop_started = 0.0
        self._signalled: set[int] = set()  # indices of the processes the stop was passed on to
        self._stop_now = False
        self._members: dict[str, tuple] = {}  # process group -> (its global ranks, description), from GroupCreated
        self.layout = None  # engine.representatives.Layout when some ranks are mirrored; None: all live
        self._declared: list[tuple[tuple[int, ...], str]] = []  # the probe's new_group calls
        self._live_members: dict[str, tuple[int, ...]] = {}
        self._host = HostExchanges(self._members.get, lambda: self.layout)
        self._last_heard: dict[int, float] = {}  # rank -> when its last batch arrived (real time)
        self._freeze: bool | None = None  # _settle freezes survivors (None: not decided yet)

    def request_stop(self, signum: int) -> None:
        """Interrupt the run (called from a signal handler, so it only sets flags): `serve`
        passes the signal on to the rank processes still running (see `_stopping`), goes on
        receiving what they flush until they are gone, and kills those still there after the
        grace period (at once on a second request)."""
        if self.stop_signal is None:
            self.stop_signal = signum
            self._stop_started = time.monotonic()
        else:
            self._stop_now = True

    def _stopping(self, procs: list[subprocess.Popen], rank_of: list[int], grace_s: float) -> None:
        """Pass the CLI's signal on to the ranks, as torchrun does: SIGINT as SIGINT (the script
        sees KeyboardInterrupt), any other as SIGTERM. A rank that got the SIGINT itself (a
        Ctrl-C in a terminal reaches the whole job) noted it (runtime/process/interrupts.py) and
        is left alone, as `python` leaves a script to its `except KeyboardInterrupt:`; the
        others get it after SIGINT_NOTE_WAIT_S. After `grace_s`, or on a second signal, the
        ranks still running are killed."""
        now = time.monotonic()
        if self._stop_deadline is None:
            self._stop_deadline = now + grace_s
        interrupt = self.stop_signal == signal.SIGINT
        if not interrupt or now - self._stop_started >= SIGINT_NOTE_WAIT_S:
            for i, p in enumerate(procs):
                if i in self._signalled or p.poll() is not None:
                    continue
                self._signalled.add(i)
                if interrupt and os.path.exists(protocol.sigint_note_path(self.socket_dir, rank_of[i])):
                    continue  # it got the SIGINT itself
                try:
                    p.send_signal(signal.SIGINT if interrupt else signal.SIGTERM)  # the rank flushes and ends
                except OSError:
                    pass
        if self._stop_now or now > self._stop_deadline:
            for p in procs:
                if p.poll() is None:
                    try:
                        p.kill()
                    except OSError:
                        pass

    def serve(self, procs: list[subprocess.Popen], on_progress: Callable[[dict[int, int]], None] | None = None,
              poll_s: float = 0.2, rank_of_proc: list[int] | None = None, stop_grace_s: float = 3.0) -> None:
        """Run until every rank process has exited and every connection is drained; stops
        early (setting `error` / `failed_rank`) when the simulation cannot go on, or when
        `request_stop` was called (the ranks are stopped first, see there)."""
        last_progress = time.monotonic()
        rank_of = rank_of_proc or list(range(len(procs)))
        while True:
            if self.stop_signal is not None:
                self._stopping(procs, rank_of, stop_grace_s)
            events = self._sel.select(timeout=poll_s if self.stop_signal is None else min(poll_s, 0.05))
            for key, _ in events:
                if key.data is None:
                    conn, _ = self._server.accept()
                    self._sel.register(conn, selectors.EVENT_READ, "rank")
                    self._conn_rank[conn] = None
                else:
                    self._read(key.fileobj)
                if self.error is not None:
                    break
            if events:
                self._settle()
            if self.error is not None:
                break
            failed = []
            for i, p in enumerate(procs):
                code = p.poll()
                if code is not None:
                    self._exited.add(rank_of[i])
                    if code != 0 and len(procs) > 1:
                        failed.append(rank_of[i])
            if failed and self.stop_signal is None:
                # blame the rank that went first (the others often fail because of it): the one
                # whose connection closed first
                self.failed_rank = min(failed, key=lambda r: (self._close_order.get(r, 1 << 30), r))
                break
            try:
                if self.stop_signal is None:
                    self._check_stuck()
                    self._host.check(self._gone, self.collective_timeout_s, self.waited_since)
            except _coll.CollectiveError as exc:
                self.error = exc
                break
            alive = [p for p in procs if p.poll() is None]
            if not alive and not self._conn_rank:
                break
            if not alive and not events:
                # processes are gone; drain whatever is still readable, then stop
                for conn in list(self._conn_rank):
                    self._close(conn)
                break
            if on_progress is not None and time.monotonic() - last_progress > 1.0:
                last_progress = time.monotonic()
                on_progress({r.rank: r.timeline.stats.host_end_ns for r in self.ranks.values()})
        if self.error is None and self.failed_rank is None and self.stop_signal is None:
            try:
                if self._pending:
                    self._check_stuck(final=True)
                self._host.check(self._gone, self.collective_timeout_s, self.waited_since, final=True)
            except _coll.CollectiveError as exc:
                self.error = exc
        self._sel.close()
        self._server.close()
        try:
            os.unlink(self.address)
        except OSError:
            pass

    def _settle(self) -> None:
        """After a round of messages: what they left is the run's record (spans, GPU work),
        alive until the traces are written; out of the cyclic collector's walks with it."""
        if self._freeze is None:  # decided once per run
            self._freeze = self.freeze_rounds and _collector.freezing()
        if self._freeze:
            _collector.freeze_survivors()

    def _read(self, conn: socket.socket) -> None:
        try:
            batch = protocol.recv_batch(conn)
        except (ProtocolError, ConnectionError, OSError) as exc:
            log.warning("lost a rank connection: %s", exc)
            batch = None
        if batch is None:
            self._close(conn)
            return
        heard = time.monotonic()
        needs_reply = isinstance(batch[-1], protocol.REQUESTS)
        last = len(batch) - 1
        touched = set()
        replies = []
        queues = self._queues
        try:
            for i, msg in enumerate(batch):
                plain = type(msg) in _PLAIN  # most messages: none of the cases below applies
                if not plain and isinstance(msg, Hello):
                    self._hello(conn, msg)
                    continue
                rank = msg.rank
                if rank not in self.ranks:
                    raise ProtocolError(f"message from rank {rank} before its Hello")
                self._last_heard[rank] = heard
                if not plain and not self._on_arrival(msg, conn, replies):
                    continue
                q = queues.get(rank)
                if q is None:
                    q = queues[rank] = deque()
                q.append((msg, conn if needs_reply and i == last else None))
                touched.add(rank)
            self._pump(sorted(touched))
        except _coll.CollectiveError as exc:
            self.error = exc
        for reply_conn, reply in replies:
            try:
                protocol.send_batch(reply_conn, [reply])
            except OSError as exc:
                log.warning("could not answer a host exchange: %s", exc)

    def _on_arrival(self, msg: Any, conn: socket.socket, replies: list) -> bool:
        """What a message that is not plain does as soon as it arrives; whether it then goes to
        its rank's queue. Host exchanges are answered on arrival, not in queue order
        (engine/host_exchange.py); their replies are added to `replies`."""
        if isinstance(msg, GroupDeclared):
            if self.layout is None:  # after planning they change nothing
                self._declared.append((tuple(msg.ranks), msg.group_desc))
            return False
        if self.representative and self.layout is None and isinstance(msg, _NEEDS_OTHERS):
            self._plan_layout()
        if isinstance(msg, HostExchange):
            replies += self._host.exchange(msg, conn)
            return False
        if isinstance(msg, HostRecv):
            replies += self._host.recv(msg, conn)
            return False
        if isinstance(msg, HostSend):
            replies += self._host.send(msg)
            return False
        if isinstance(msg, GroupCreated):
            known = self._members.get(msg.group)
            if known is None or (known[1] in ("", "undefined") and msg.group_desc not in ("", "undefined")):
                self._members[msg.group] = (tuple(msg.ranks), msg.group_desc)
            return not msg.group.startswith(INTERNAL_GROUP_PREFIX)  # the simulator's own: not in pg_config
        return True

    def _plan_layout(self) -> None:
        """The probe (rank 0) needs another rank for the first time: plan which ranks are live
        from the groups it declared, and start them."""
        self.layout = _reps.plan(self.world_size, self._declared, self.requested, self.class_check)
        self._declared = []
        log.info("representative ranks: %s; live ranks %s", self.layout.reason, list(self.layout.live))
        others = [r for r in self.layout.live if r != 0]
        if others and self.spawn is not None:
            self.spawn(others)

    def _resolve_ranks(self, call: CollectiveCall) -> None:
        """A rank sends a group's member list with its first collective in the group only
        (O(1) per later call at any group size): the group's GroupCreated has it, one shared
        tuple per group."""
        known = self._members.get(call.group)
        if not call.ranks:
            if known is None:
                raise ProtocolError(f"rank {call.rank}: collective #{call.seq} of process group {call.group!r} came "
                                    "without its member list, and the group was never announced")
            call.ranks = known[0]
        elif known is not None and known[0] == call.ranks:
            call.ranks = known[0]

    def live_members(self, group: str, ranks: tuple[int, ...]) -> tuple[int, ...]:
        """The members of a group that run a process (all of them unless ranks are mirrored)."""
        if self.layout is None:
            return ranks
        live = self._live_members.get(group)
        if live is None:
            live = self._live_members[group] = tuple(r for r in ranks if self.layout.is_live(r))
        return live

    def _hello(self, conn: socket.socket, msg: Hello) -> None:
        self._conn_rank[conn] = msg.rank
        res = self.ranks.get(msg.rank)
        if res is None:
            res = RankResult(msg.rank, self.timeline_factory(msg.rank))
            self.ranks[msg.rank] = res
        res.pid = msg.pid
        res.connected = True

    def _pump(self, ranks: list[int]) -> None:
        """Process queued messages of `ranks` (and of ranks a resolved collective unparks)."""
        todo = deque(ranks)
        while todo:
            rank = todo.popleft()
            q = self._queues.get(rank)
            parked = self._parked
            while q and rank not in parked:
                msg, reply_conn = q.popleft()
                if type(msg) in _PLAIN:  # what _dispatch would do with it
                    reply = self.ranks[rank].timeline.handle(msg)
                elif isinstance(msg, CollectiveCall):
                    woken = self._collective(msg)
                    todo.extend(r for r in woken if r != rank)
                    continue
                else:
                    reply = self._dispatch(msg)
                if reply_conn is not None:
                    try:
                        protocol.send_batch(reply_conn, [reply])
                    except OSError as exc:
                        log.warning("rank %d: could not send a reply: %s", rank, exc)

    def _collective(self, call: CollectiveCall) -> list[int]:
        """A member launched a collective: record its readiness; resolve when all are in.

        A coalesced group (NCCL group: batch_isend_irecv) is one unit on its rank: every call
        of it is ready when the first was, the rank's queue stops at its last call until all
        are resolved, and their results go on the rank's timeline together, in call order,
        so that the outcome does not depend on which rank's messages came first."""
        key = (call.group, call.seq)
        rank = call.rank
        self._resolve_ranks(call)
        tl = self.ranks[rank].timeline
        pend = self._pending.get(key)
        if pend is None:
            members = self.live_members(call.group, tuple(call.ranks))
            if call.peer >= 0 and len(members) < 2:
                other = call.peer
                raise _coll.CollectiveError(
                    f"rank {rank} {call.coll_name}s to/from rank {other}, which is simulated by its representative "
                    f"(rank {self.layout.rep_of(other)}) and runs no program ({self.layout.reason}): point-to-point "
                    "transfers need both sides live. Run with --live-ranks all, or build the pipeline stages "
                    "with a device mesh dimension named 'pp' so that every stage gets a live rank (before the "
                    "first collective: the layout is planned from the groups rank 0 created until then)")
            pend = _coll.PendingCollective(key, members, first_arrival_s=time.monotonic())
            self._pending[key] = pend
        if rank in pend.calls:
            raise _coll.CollectiveError(
                f"rank {rank} launched collective #{call.seq} of process group {call.group!r} twice")
        pend.check(call)
        grp = self._groups.get(rank)
        if grp is None and getattr(call, "coalesced", False):
            grp = self._groups[rank] = {"keys": [], "ready": _coll.readiness(tl, call), "done": {},
                                        "closed": False}
        if grp is not None:
            grp["keys"].append(key)
            ready = max(grp["ready"], call.host_ns + tl.profile.launch_latency_ns)
        else:
            ready = _coll.readiness(tl, call)
        pend.calls[rank] = call
        pend.ready[rank] = ready
        woken = self._resolve(key, pend) if not pend.missing() else []
        if not getattr(call, "coalesced", False):
            if grp is not None:
                grp["closed"] = True
                unresolved = {k for k in grp["keys"] if k not in grp["done"]}
                if unresolved:
                    self._parked[rank] = unresolved
                else:
                    self._flush_group(rank)
            elif key in self._pending:
                self._parked[rank] = {key}
        return woken

    def _resolve(self, key: tuple[str, int], pend: _coll.PendingCollective) -> list[int]:
        del self._pending[key]
        start = max(pend.ready.values())
        call = pend.calls[pend.ranks[0]]
        dur, algo, proto = self._duration(call, pend, start)
        woken = []
        for r in pend.ranks:
            c = pend.calls[r]
            grp = self._groups.get(r)
            if grp is not None and key in grp["keys"]:
                grp["done"][key] = (c, start, start + dur, algo, proto)
                waits = self._parked.get(r)
                if waits is not None:
                    waits.discard(key)
                if grp["closed"] and len(grp["done"]) == len(grp["keys"]):
                    self._flush_group(r)
                    if self._parked.pop(r, None) is not None:
                        woken.append(r)
            else:
                tl = self.ranks[r].timeline
                _coll.complete(tl, c, start, start + dur, algo, proto, ready_ns=pend.ready[r])
                self._in_flight(tl, c, start, start + dur)
                waits = self._parked.get(r)
                if waits is not None:
                    waits.discard(key)
                    if not waits:
                        del self._parked[r]
                        woken.append(r)
        self.collectives_resolved += 1
        return woken

    def _flush_group(self, rank: int) -> None:
        """Put a coalesced group on the rank's timeline. NCCL runs a group (e.g. the sends and
        receives of batch_isend_irecv) as one kernel on the communicator's stream: the first
        call's kernel spans the whole group, from the earliest start to the latest end; the
        others are zero-length markers at its end, so kernels on the stream never overlap."""
        grp = self._groups.pop(rank)
        tl = self.ranks[rank].timeline
        done = [grp["done"][k] for k in grp["keys"]]
        first_start = min(d[1] for d in done)
        last_end = max(d[2] for d in done)
        for i, (c, start, end, algo, proto) in enumerate(done):
            self._in_flight(tl, c, start, end)
            ready = min(grp["ready"], first_start) if i == 0 else None
            if len(done) > 1:
                start, end = (first_start, last_end) if i == 0 else (last_end, last_end)
            _coll.complete(tl, c, start, end, algo, proto, ready_ns=ready if i == 0 else end)

    def _duration(self, call: Any, pend: _coll.PendingCollective, start: int) -> tuple[int, str, str]:
        """The collective's time: alone, or shared with the collectives of its members still in
        flight at `start` (engine.contention; deterministic: see there)."""
        model = self._model()
        shared = getattr(model, "shared_duration", None)
        if shared is not None:
            running = _contention.background([self.ranks[r].timeline for r in pend.ranks], start,
                                             [pend.calls[r].host_ns for r in pend.ranks])
            if running:
                return shared(call.op, tuple(call.ranks), call.nbytes, call.root, start, running)
        return model.duration(call.op, tuple(call.ranks), call.nbytes, call.root, call.peer)

    @staticmethod
    def _in_flight(tl: RankTimeline, call: Any, start: int, end: int) -> None:
        fl = getattr(tl, "in_flight", None)
        if fl is not None:
            fl.add(_contention.InFlightCollective((call.group, call.seq), call.op, tuple(call.ranks), call.nbytes,
                                                  call.root, call.peer, start, end))

    def _model(self) -> Any:
        if self.collective_model is None:
            if self.model_factory is not None:
                self.collective_model = self.model_factory()
            else:
                self.collective_model = _coll.NetsimModel("h200", 1, max(1, self.world_size))
        return self.collective_model

    def waited_since(self, first_arrival_s: float, missing: list[int]) -> float:
        """When a wait for `missing` ranks last made progress: the first member's arrival, or
        the last time one of the missing ranks sent something (it is busy, not stuck: a
        16,384-rank layout can keep a rank in its initialisation for minutes)."""
        return max([first_arrival_s] + [self._last_heard.get(r, 0.0) for r in missing])

    def _gone(self, rank: int) -> bool:
        """The rank's process ended and everything it sent was read."""
        return rank in self._exited and (rank not in self.ranks or not self.ranks[rank].connected)

    def _check_stuck(self, final: bool = False) -> None:
        """Raise for collectives that can never complete (or waited too long)."""
        if not self._pending:
            return
        now = time.monotonic()
        for key, pend in sorted(self._pending.items()):
            missing = pend.missing()
            gone = [r for r in missing if r in self._exited and not self._queues.get(r) and r not in self._parked
                    and (r not in self.ranks or not self.ranks[r].connected)]
            waiting = sorted(pend.calls)
            what = (f"collective #{key[1]} of process group {key[0]!r} (ranks {list(pend.ranks)}): "
                    f"{next(iter(pend.calls.values())).coll_name} launched by rank(s) {waiting}")
            if gone or final:
                raise _coll.CollectiveError(
                    f"{what}, but rank(s) {gone or missing} finished without launching it: the ranks issue "
                    "different collectives (a missing or extra collective on some ranks)")
            # wait cycles: a missing member parked on another collective that waits for us
            for r in missing:
                for other in sorted(self._parked.get(r, ())):
                    if other == key:
                        continue
                    opend = self._pending.get(other)
                    if opend is not None and any(w in opend.missing() and w in self._parked for w in waiting):
                        oc = next(iter(opend.calls.values()))
                        raise _coll.CollectiveError(
                            f"deadlock: {what}, while rank {r} waits in collective #{other[1]} of process "
                            f"group {other[0]!r} ({oc.coll_name}), which rank(s) "
                            f"{[w for w in waiting if w in opend.missing()]} have not launched: the ranks issue "
                            "collectives of different groups in different orders")
            if now - self.waited_since(pend.first_arrival_s, missing) > self.collective_timeout_s:
                raise _coll.CollectiveError(
                    f"{what}; rank(s) {missing} did not launch it within {self.collective_timeout_s:g} s "
                    "(--collective-timeout)")

    def _dispatch(self, msg: Any) -> Any:
        rank = msg.rank
        res = self.ranks[rank]
        if isinstance(msg, Goodbye):
            res.goodbye = msg
            res.timeline.stats.host_end_ns = max(res.timeline.stats.host_end_ns, msg.host_ns)
            return None
        if isinstance(msg, CollectiveWait):
            _coll.wait(res.timeline, (msg.group, msg.seq), msg.stream, msg.device)
            return None
        if isinstance(msg, GroupCreated):
            info = getattr(res.timeline, "pg_info", None)
            if info is None:
                info = res.timeline.pg_info = {}
            if msg.group not in info or info[msg.group][0] == "undefined":  # named after creation
                info[msg.group] = (msg.group_desc, tuple(msg.ranks))
            return None
        return res.timeline.handle(msg)

    def _close(self, conn: socket.socket) -> None:
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        rank = self._conn_rank.pop(conn, None)
        if rank is not None and rank in self.ranks:
            self.ranks[rank].connected = False
            self._close_order.setdefault(rank, len(self._close_order))
        try:
            conn.close()
        except OSError:
            pass
