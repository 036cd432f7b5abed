"""Collectives on the host (CPU tensors, Python objects), exchanged through the coordinator.

Frameworks move metadata between ranks on the host: `all_gather_object` of configs and
shapes, a CPU all-reduce of a loss or a flag, pipelining's shape handshakes. These really
travel, with real values: each member sends its part to the coordinator
(`protocol.HostExchange`), which answers every member with all the parts once they are in
(engine/host_exchange.py); the combining (sum, gather, scatter, ...) happens here.

Why not gloo, as before: a gloo group opens a connection between every pair of its members
(quadratic in the cluster), and a rank simulated by its representative (engine/representatives.py)
has no process that could take part. Through the coordinator, a mirrored member's part is
its representative's: the reply holds the distinct parts once and says which member has
which (`HostExchangeReply.index`), so a sum over 16,384 members adds a few distinct parts
times their counts.

Host time: a blocking CPU collective returns when its last member arrived (the reply's
`host_ns`, plus the call's own cost); the values of a device collective's small outputs
(runtime/dispatch/values.py) travel without moving the host clock.
"""
from __future__ import annotations

import contextlib
import pickle
from collections import Counter
from typing import Any, Sequence

import torch
from torch.utils._python_dispatch import _disable_current_modes

from phantora_prof.protocol import HostExchange, HostRecv, HostSend
from phantora_prof.runtime.process import state as _state

CPU_COLLECTIVE_NS = 20_000  # host time of a blocking CPU collective after its last member arrived


@contextlib.contextmanager
def simulator_work():
    """The simulator's own CPU ops (packing, combining): outside the capture mode, and not in
    the trace's op tree (a real gloo or NCCL collective moves its bytes in C++, with no aten
    ops), so the trace does not depend on how many distinct parts an exchange had."""
    from phantora_prof.runtime.dispatch import op_recorder

    rec = op_recorder.get()
    prev = rec.quiet(1) if rec is not None else None
    try:
        with _disable_current_modes():
            yield
    finally:
        if rec is not None:
            rec.quiet(prev)


def encode(tensors: Sequence[torch.Tensor | None]) -> bytes:
    """CPU tensors as (dtype, shape, raw bytes); None stays None."""
    parts = []
    for t in tensors:
        if t is None:
            parts.append(None)
            continue
        c = t.detach().contiguous()
        raw = c.view(-1).view(torch.uint8).numpy().tobytes() if c.numel() else b""
        parts.append((str(c.dtype).replace("torch.", ""), tuple(c.shape), raw))
    return pickle.dumps(parts, protocol=pickle.HIGHEST_PROTOCOL)


def decode(payload: bytes) -> list[torch.Tensor | None]:
    out: list[torch.Tensor | None] = []
    for part in pickle.loads(payload):
        if part is None:
            out.append(None)
            continue
        dtype_name, shape, raw = part
        dtype = getattr(torch, dtype_name)
        if raw:
            t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
        else:
            t = torch.empty(shape, dtype=dtype)
        out.append(t)
    return out


class Parts:
    """The members' parts of one exchange: `of(i)` is member i's (group order); `distinct()`
    gives each different part once with how many members sent it (mirrored members share
    their representative's)."""

    def __init__(self, payloads: tuple, index: tuple | None, size: int):
        self._payloads = payloads
        self._index = index if index is not None else tuple(range(len(payloads)))
        if len(self._index) != size:
            raise RuntimeError(f"phantora-prof: a host exchange returned {len(self._index)} parts for a group of "
                               f"{size} ranks")
        self._decoded: dict[int, list] = {}

    def _get(self, k: int) -> list:
        d = self._decoded.get(k)
        if d is None:
            d = self._decoded[k] = decode(self._payloads[k])
        return d

    def of(self, member: int) -> list:
        return self._get(self._index[member])

    def distinct(self) -> list[tuple[list, int]]:
        counts = Counter(self._index)
        return [(self._get(k), counts[k]) for k in sorted(counts)]

    def __len__(self) -> int:
        return len(self._index)


class HostGroup:
    """A process group's host side: exchanges, and messages between two of its members."""

    def __init__(self, name: str, global_ranks: Sequence[int], index: int):
        self.name = name
        self.global_ranks = tuple(global_ranks)
        self.index = index  # this member's rank in the group
        self._seq = 0
        self._p2p: dict[tuple[int, int, int], int] = {}

    @property
    def size(self) -> int:
        return len(self.global_ranks)

    def exchange(self, what: str, payload: bytes, *, blocking: bool = True) -> Parts:
        """Send this member's part, wait for everyone's. `blocking`: a CPU collective, which
        returns no earlier than its last member arrived (the host clock moves)."""
        st = _state.get()
        seq = self._seq
        self._seq += 1
        reply = st.channel.request(HostExchange(st.config.rank, self.name, seq, what, st.clock.now_ns, payload))
        if blocking:
            st.clock.advance_to(max(st.clock.now_ns, reply.host_ns) + CPU_COLLECTIVE_NS)
        return Parts(reply.payloads, reply.index, self.size)

    def _next(self, src: int, dst: int, tag: int) -> int:
        key = (src, dst, tag)
        seq = self._p2p.get(key, 0)
        self._p2p[key] = seq + 1
        return seq

    def send(self, dst: int, tag: int, payload: bytes) -> None:
        """Post a message to global rank `dst` (returns at once, as a buffered send)."""
        st = _state.get()
        me = st.config.rank
        st.channel.send(HostSend(me, self.name, dst, tag, self._next(me, dst, tag), st.clock.now_ns, payload))
        st.channel.flush()  # the receiver may be waiting for it at the coordinator

    def recv(self, src: int, tag: int, *, blocking: bool = True) -> bytes:
        """The next message from global rank `src` with `tag`; waits for it."""
        st = _state.get()
        me = st.config.rank
        reply = st.channel.request(HostRecv(me, self.name, src, tag, self._next(src, me, tag), st.clock.now_ns))
        if blocking:
            st.clock.advance_to(max(st.clock.now_ns, reply.host_ns) + CPU_COLLECTIVE_NS)
        return reply.payload


# ---- combining parts ----

_REDUCE_NAMES = {"sum": "sum", "avg": "avg", "product": "product", "min": "min", "max": "max", "band": "band",
                 "bor": "bor", "bxor": "bxor", "premul_sum": "sum"}


def reduce_op_name(opts: Any) -> str:
    op = getattr(opts, "reduceOp", None) if opts is not None else None
    if op is None:
        return "sum"
    if isinstance(op, str):
        name = op.lower()
    else:
        name = str(getattr(op, "op", op)).split(".")[-1].lower()
    if name not in _REDUCE_NAMES:
        raise RuntimeError(f"phantora-prof: reduce op {name!r} is not supported on CPU tensors")
    return _REDUCE_NAMES[name]


def combine(op: str, values: list[tuple[torch.Tensor, int]]) -> torch.Tensor:
    """Reduce the distinct values, each standing for `count` members."""
    total = sum(c for _, c in values)
    first = values[0][0]
    if op in ("sum", "avg"):
        if first.dtype == torch.bool:
            acc = torch.zeros_like(first)
            for v, _ in values:
                acc = acc | v
            return acc
        acc = torch.zeros_like(first)
        for v, c in values:
            acc = acc + (v * c if c != 1 else v)
        if op == "avg":
            acc = acc / total if acc.is_floating_point() else torch.div(acc, total, rounding_mode="floor")
        return acc.to(first.dtype)
    if op == "product":
        acc = torch.ones_like(first)
        for v, c in values:
            acc = acc * (v ** c if c != 1 else v)
        return acc.to(first.dtype)
    if op in ("min", "max"):
        acc = first.clone()
        for v, _ in values[1:]:
            acc = torch.minimum(acc, v) if op == "min" else torch.maximum(acc, v)
        return acc
    acc = torch.zeros_like(first) if op in ("bor", "bxor") else ~torch.zeros_like(first)
    for v, c in values:
        if op == "band":
            acc = acc & v
        elif op == "bor":
            acc = acc | v
        elif c % 2:
            acc = acc ^ v
    return acc


def reduced(op: str, parts: Parts, pick) -> torch.Tensor:
    """Reduce `pick(part)` over all members."""
    return combine(op, [(pick(p), c) for p, c in parts.distinct()])
