"""The coordinator: owns simulated time for all ranks and answers their sync requests.

Rank processes connect over a local stream socket (the framing in `protocol` works over TCP
too) and send batches of messages in their own non-decreasing virtual host time. A rank
blocks only on requests (synchronize, `.item()`, event queries), which the coordinator
answers from its timelines.

With one rank the order of processing is the rank's own order, so the result cannot depend
on OS scheduling. (Many ranks, with collectives that couple them, add the conservative
synchronization of DESIGN.md on top of this loop.)
"""
from __future__ import annotations

import logging
import os
import selectors
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from phantora_prof import protocol
from phantora_prof.engine.rank_timeline import RankTimeline
from phantora_prof.errors import ProtocolError
from phantora_prof.protocol import Goodbye, Hello

log = logging.getLogger(__name__)


@dataclass
class RankResult:
    rank: int
    timeline: RankTimeline
    pid: int = 0
    goodbye: Goodbye | None = None
    connected: bool = False


@dataclass
class Coordinator:
    world_size: int
    socket_dir: str
    timeline_factory: Callable[[int], RankTimeline]
    ranks: dict[int, RankResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.address = os.path.join(self.socket_dir, "coordinator.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.address)
        self._server.listen(max(16, self.world_size))
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._server, selectors.EVENT_READ, None)
        self._conn_rank: dict[socket.socket, int | None] = {}

    def serve(self, procs: list[subprocess.Popen], on_progress: Callable[[dict[int, int]], None] | None = None,
              poll_s: float = 0.2) -> None:
        """Run until every rank process has exited and every connection is drained."""
        last_progress = time.monotonic()
        while True:
            events = self._sel.select(timeout=poll_s)
            for key, _ in events:
                if key.data is None:
                    conn, _ = self._server.accept()
                    self._sel.register(conn, selectors.EVENT_READ, "rank")
                    self._conn_rank[conn] = None
                else:
                    self._read(key.fileobj)
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
        self._sel.close()
        self._server.close()
        try:
            os.unlink(self.address)
        except OSError:
            pass

    def _read(self, conn: socket.socket) -> None:
        try:
            batch = protocol.recv_batch(conn)
        except (ProtocolError, ConnectionError, OSError) as exc:
            log.warning("lost a rank connection: %s", exc)
            batch = None
        if batch is None:
            self._close(conn)
            return
        reply: Any = None
        for msg in batch:
            reply = self._dispatch(conn, msg)
        if isinstance(batch[-1], protocol.REQUESTS):
            protocol.send_batch(conn, [reply])

    def _dispatch(self, conn: socket.socket, msg: Any) -> Any:
        if isinstance(msg, Hello):
            self._conn_rank[conn] = msg.rank
            res = self.ranks.get(msg.rank)
            if res is None:
                res = RankResult(msg.rank, self.timeline_factory(msg.rank))
                self.ranks[msg.rank] = res
            res.pid = msg.pid
            res.connected = True
            return None
        rank = msg.rank
        res = self.ranks.get(rank)
        if res is None:
            raise ProtocolError(f"message from rank {rank} before its Hello")
        if isinstance(msg, Goodbye):
            res.goodbye = msg
            res.timeline.stats.host_end_ns = max(res.timeline.stats.host_end_ns, msg.host_ns)
            return None
        return res.timeline.handle(msg)

    def _close(self, conn: socket.socket) -> None:
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        self._conn_rank.pop(conn, None)
        try:
            conn.close()
        except OSError:
            pass
