"""Native Perfetto output: every rank of a run in one TrackEvent protobuf (.pftrace).

`write_perfetto(traces, path)` writes the same slices as `tracing.kineto.write_kineto`,
for all ranks, into one file that ui.perfetto.dev opens directly:

- one process per rank, named "rank N" (pid = the rank's host pid, or a synthetic one
  when two ranks share it); its host threads are thread tracks (tids made unique across
  the file); each GPU stream is a child track "GPU d stream s" of the rank's process,
  listed after the host threads. Spans that do not nest on their track (partial overlap)
  go to an extra child track "... (overlap k)" instead of corrupting the nesting;
- slices are SLICE_BEGIN/SLICE_END pairs with the Kineto category (interned) and the
  args as debug annotations (ints, floats, strings, bools and non-empty lists/dicts of
  them natively; empty lists, None and anything else as `legacy_json_value`, the JSON the
  Kineto writer prints). Times are absolute ns: `base_time_ns + ts_ns`, which equals
  Kineto's `baseTimeNanoseconds + ts * 1000`; `gpu_user_annotation` spans are 1 ns
  earlier and 2 ns longer, as in the Kineto file;
- instants (`[memory]`) are TYPE_INSTANT events on their thread (scope 'p'/'g': on the
  process track), with their args;
- Kineto flows (`ac2g` launch -> kernel, `fwdbwd`) become TrackEvent flows: the slice
  that encloses the start point gets `flow_ids`, the one at the end point
  `terminating_flow_ids`; ids are 64-bit values derived from (rank, category, id), so
  they are unique across ranks;
- kernels of one collective (args "Collective name" and "Process Group Name"; the
  collective's identity is (process group name, group ranks, occurrence index of that
  group on the rank), since the traces carry no sequence number) share one flow id, so
  the UI draws arrows linking the collective's kernels across all participating ranks;
- counter tracks per GPU, "GPU d memory allocated" / "GPU d memory reserved" (bytes),
  from the rank's whole-run memory samples (`RankTrace.memory_counters`), else from
  `[memory]` instants (args Total Allocated / Total Reserved, Device Type 1).

The encoder writes the protobuf wire format directly (the perfetto package's generated
classes cost ~20 us per event; these bytes decode with them, see tests/test_perfetto.py).
Packets are written to the file as each rank is processed (by default deflated in ~1 MiB
chunks as `compressed_packets`, about 5x smaller): memory holds one rank's sorted events
and the interning tables, never the whole trace. Each rank is one packet
sequence (trusted_packet_sequence_id = rank + 1) with its own interning state. The same
input gives the same bytes; the file is written to a temporary name and renamed.
"""
from __future__ import annotations

import hashlib
import heapq
import struct
import zlib
from bisect import bisect_right
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable

from tracing.kineto import _dumps, _dumps_bytes, _json_default
from tracing.atomic import atomic_file
from tracing.model import RankTrace

__all__ = ["write_perfetto", "use_native_encoder", "PerfettoStats", "flow_id", "collective_flow_id", "MEMORY_COUNTERS"]

# TrackEvent.Type
_BEGIN, _END, _INSTANT, _COUNTER = 1, 2, 3, 4
# TracePacket.SequenceFlags
_SEQ_CLEARED, _SEQ_NEEDS = 1, 2
_UNIT_SIZE_BYTES = 3
_EXPLICIT = 3  # TrackDescriptor.ChildTracksOrdering
MEMORY_COUNTERS = (("Total Allocated", "allocated"), ("Total Reserved", "reserved"))
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_ANN_CACHE_MAX = 200_000
# zlib level of compressed_packets: on a GPT-2 trace's 1 MiB chunks level 2 compresses 2.4x
# faster than level 6 for 18% more bytes (5.7x smaller than the packets, against 6.7x)
_DEFLATE_LEVEL = 2
_CONTAIN_SCAN = 256  # spans looked back at when a flow point falls inside (not at the start of) a slice


# ------------------------------------------------------------------ wire format

def _varint_slow(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_varint_slow(i) for i in range(1 << 14)]
# the first two bytes of the varint of any n >= 2**14: its low 14 bits, both with the continuation bit
_LOW14 = [bytes(((i & 0x7F) | 0x80, ((i >> 7) & 0x7F) | 0x80)) for i in range(1 << 14)]
_TOP: dict[int, bytes] = {}  # varints of n >> 28: timestamps in ns share them for ~268 ms


def _varint(n: int) -> bytes:
    """Protobuf varint of `n` (negative: two's complement, 10 bytes). Absolute timestamps (~2**60
    ns) are most of a trace's large varints: their low 28 bits come from two table lookups and the
    rest from a cache, byte for byte what `_varint_slow` writes, ~4x faster."""
    if 0 <= n < 16384:
        return _SMALL[n]
    if n < 0:
        return _varint_slow(n)
    if n < 1 << 28:
        return _LOW14[n & 0x3FFF] + _SMALL[n >> 14]
    top = n >> 28
    b = _TOP.get(top)
    if b is None:
        if len(_TOP) >= 4096:
            _TOP.clear()
        b = _TOP[top] = _varint_slow(top)
    return _LOW14[n & 0x3FFF] + _LOW14[(n >> 14) & 0x3FFF] + b


def _tag(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def _vf(field: int, n: int) -> bytes:
    return _tag(field, 0) + _varint(n)


def _ld(field: int, payload: bytes) -> bytes:
    return _tag(field, 2) + _varint(len(payload)) + payload


def _sf(field: int, s: str) -> bytes:
    return _ld(field, s.encode("utf-8", "surrogatepass"))


def _fixed64(field: int, n: int) -> bytes:
    return _tag(field, 1) + struct.pack("<Q", n & 0xFFFFFFFFFFFFFFFF)


_T_PACKET = _tag(1, 2)  # Trace.packet
_ANN_FIELD = _tag(4, 2)  # TrackEvent.debug_annotations
_TS = _tag(8, 0)  # TracePacket.timestamp
_SEQ_ID = 10
_TE = 11
_INTERNED = 12
_FLAGS = 13
_TD = 60


def _hash64(*parts: Any) -> int:
    """A stable non-zero 63-bit id from `parts`."""
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return (int.from_bytes(h, "little") & ((1 << 63) - 1)) or 1


def flow_id(rank: int, cat: str, fid: int) -> int:
    """The TrackEvent flow id of Kineto flow (`cat`, `fid`) of `rank`."""
    if 0 <= fid < (1 << 40) and 0 <= rank < (1 << 20):
        c = 1 if cat == "ac2g" else 2 if cat == "fwdbwd" else 3
        if c < 3:
            return (rank << 42) | (c << 40) | fid | (1 << 62)
    return _hash64("flow", rank, cat, fid)


def collective_flow_id(pg_name: str, pg_ranks: str, index: int) -> int:
    """The flow id shared by the kernels of one collective on all its ranks."""
    return _hash64("coll", pg_name, pg_ranks, index)


# ------------------------------------------------------------------ debug annotations

def _native(v: Any) -> bool:
    if isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return bool(v) and all(_native(x) for x in v)
    if isinstance(v, dict):
        return bool(v) and all(isinstance(k, str) and _native(x) for k, x in v.items())
    return False


def _value(v: Any) -> bytes:
    """DebugAnnotation value fields of a value `_native` accepts."""
    if isinstance(v, bool):
        return _vf(2, int(v))
    if isinstance(v, int):
        if _INT64_MIN <= v <= _INT64_MAX:
            return _vf(4, v)
        if 0 <= v < (1 << 64):
            return _vf(3, v)
        return _sf(9, str(v))
    if isinstance(v, float):
        return _tag(5, 1) + struct.pack("<d", v)
    if isinstance(v, str):
        return _sf(6, v)
    if isinstance(v, (list, tuple)):
        return b"".join(_ld(12, _value(x)) for x in v)
    # dict
    return b"".join(_ld(11, _sf(10, k) + _value(x)) for k, x in v.items())


def _annotation_value(v: Any) -> bytes:
    if v is not None and not isinstance(v, (bool, int, float, str, list, tuple, dict)):
        v = _json_default(v)
    if _native(v):
        return _value(v)
    return _sf(9, _dumps(v))  # legacy_json_value: the JSON text the Kineto writer prints


# ------------------------------------------------------------------ the writer

class PerfettoStats:
    """What `write_perfetto` wrote (returned through `stats=`)."""

    def __init__(self) -> None:
        self.ranks = 0
        self.packets = 0
        self.slices = 0
        self.instants = 0
        self.counter_values = 0
        self.flows = 0
        self.flows_unbound = 0  # Kineto flows whose end points enclose no slice
        self.collectives = 0  # kernels that carry a cross-rank collective flow
        self.overlap_tracks = 0
        self.bytes = 0

    def to_json(self) -> dict:
        return dict(vars(self))


class _Writer:
    def __init__(self, f: _Packets, stats: PerfettoStats, emit_events: EmitEvents) -> None:
        self.f = f
        self.stats = stats
        self.emit_events = emit_events
        # Global interning ids (stable over the file); emitted per sequence on first use.
        self.iids: list[dict[str, int]] = [{}, {}, {}]  # categories, event names, annotation names
        self.ann_cache: dict[tuple, bytes] = {}
        self.used_pids: set[int] = set()
        self.used_tids: set[int] = set()
        self.next_synthetic = 1 << 22

    # -- packets
    def packet(self, body: bytes) -> None:
        self.f.write(_T_PACKET + _varint(len(body)) + body)
        self.stats.packets += 1

    def _unique(self, used: set[int], want: int) -> int:
        if want not in used:
            used.add(want)
            return want
        while self.next_synthetic in used:
            self.next_synthetic += 1
        used.add(self.next_synthetic)
        return self.next_synthetic

    # -- one rank
    def rank(self, tr: RankTrace) -> None:
        st = self.stats
        st.ranks += 1
        seq_hdr = _vf(_SEQ_ID, tr.rank + 1 if tr.rank >= 0 else (_hash64("seq", tr.rank) & 0x7FFFFFFF) or 1)
        base_uuid = (tr.rank + 1) << 32 if 0 <= tr.rank < (1 << 30) else _hash64("rank", tr.rank) & ~0xFFFFFFFF
        uuid_n = [0]

        def new_uuid() -> int:
            uuid_n[0] += 1
            return base_uuid | uuid_n[0]

        abs_base = tr.base_time_ns
        pid = self._unique(self.used_pids, tr.host_pid)
        proc_uuid = base_uuid
        self.packet(seq_hdr + _ld(_TD, _vf(1, proc_uuid) + _ld(3, _vf(1, pid) + _sf(6, f"rank {tr.rank}"))
                                  + _vf(11, _EXPLICIT)))

        # -- tracks: host threads (sorted by tid), then GPU streams (sorted by device, stream)
        spans = tr.spans
        ts_of: list[int] = []
        dur_of: list[int] = []
        key_of: list[tuple] = []
        host_tids: set[int] = set(tr.host_threads)
        streams: set[tuple[int, int]] = {(d, s) for d, ss in tr.gpu_streams.items() for s in ss}
        for s in spans:
            ts, dur = s.ts_ns, (s.dur_ns if s.dur_ns > 0 else 0)
            if s.on_gpu:
                if s.cat == "gpu_user_annotation":
                    ts -= 1
                    dur += 2
                k = (1, s.device, s.tid)
                streams.add((s.device, s.tid))
            else:
                k = (0, 0, s.tid)
                host_tids.add(s.tid)
            ts_of.append(ts)
            dur_of.append(dur)
            key_of.append(k)
        for i in tr.instants:
            host_tids.add(i.tid)
        for fl in tr.flows:
            for e in (fl.start, fl.end):
                if e is None:
                    continue
                if e.on_gpu:
                    streams.add((e.device, e.tid))
                else:
                    host_tids.add(e.tid)

        order_rank = [0]
        track_uuid: dict[tuple, int] = {}
        track_name: dict[tuple, str] = {}

        def sibling() -> bytes:
            order_rank[0] += 1
            return _vf(12, order_rank[0])

        pname = tr.process_name
        for tid in sorted(host_tids):
            u = new_uuid()
            k = (0, 0, tid)
            track_uuid[(k, 0)] = u
            name = tr.host_threads.get(tid) or f"thread {tid} ({pname})"
            track_name[k] = name
            out_tid = self._unique(self.used_tids, tid)
            self.packet(seq_hdr + _ld(_TD, _vf(1, u) + _ld(4, _vf(1, pid) + _vf(2, out_tid) + _sf(5, name))
                                      + sibling()))
        for d, s in sorted(streams):
            u = new_uuid()
            k = (1, d, s)
            track_uuid[(k, 0)] = u
            name = track_name[k] = f"GPU {d} stream {s}"
            self.packet(seq_hdr + _ld(_TD, _vf(1, u) + _vf(5, proc_uuid) + _sf(2, name) + sibling()))

        # -- lanes: spans that do not nest on their track move to overlap tracks
        by_track: dict[tuple, list[int]] = {}
        for idx, k in enumerate(key_of):
            by_track.setdefault(k, []).append(idx)
        lane_of = [0] * len(spans)
        sorted_tracks: dict[tuple, tuple[list[int], list[int]]] = {}
        for k, idxs in by_track.items():
            idxs.sort(key=lambda i: (ts_of[i], -dur_of[i], i))
            stacks: list[list[int]] = []
            for i in idxs:
                ts, end = ts_of[i], ts_of[i] + dur_of[i]
                for lane, stack in enumerate(stacks):
                    while stack and stack[-1] <= ts:
                        stack.pop()
                    if not stack or stack[-1] >= end:
                        stack.append(end)
                        lane_of[i] = lane
                        break
                else:
                    stacks.append([end])
                    lane_of[i] = len(stacks) - 1
            sorted_tracks[k] = (idxs, [ts_of[i] for i in idxs])
            for lane in range(1, len(stacks)):
                u = new_uuid()
                track_uuid[(k, lane)] = u
                st.overlap_tracks += 1
                self.packet(seq_hdr + _ld(_TD, _vf(1, u) + _vf(5, proc_uuid)
                                          + _sf(2, f"{track_name[k]} (overlap {lane})") + sibling()))

        # -- memory counter tracks
        counter_uuid: dict[tuple[int, int], int] = {}
        mem_devices: set[int] = set()
        samples = tr.memory_counters
        if samples:
            mem_devices = {d for _, d, _, _ in samples if d >= 0}
        for ins in tr.instants if not samples else ():
            a = ins.args
            if ins.name == "[memory]" and a.get("Device Type", 1) == 1 and isinstance(a.get("Device Id"), int) \
                    and a["Device Id"] >= 0 and any(key in a for key, _ in MEMORY_COUNTERS):
                mem_devices.add(a["Device Id"])
        for d in sorted(mem_devices):
            for j, (_, label) in enumerate(MEMORY_COUNTERS):
                u = new_uuid()
                counter_uuid[(d, j)] = u
                self.packet(seq_hdr + _ld(_TD, _vf(1, u) + _vf(5, proc_uuid) + _sf(2, f"GPU {d} memory {label}")
                                          + _ld(8, _vf(3, _UNIT_SIZE_BYTES)) + sibling()))

        # -- flows: bind each end point to the deepest slice that encloses it
        flows_out: dict[int, list[int]] = {}
        flows_in: dict[int, list[int]] = {}

        def bind(on_gpu: bool, device: int, tid: int, t: int) -> int | None:
            k = (1, device, tid) if on_gpu else (0, 0, tid)
            entry = sorted_tracks.get(k)
            if entry is None:
                return None
            idxs, starts = entry
            j = bisect_right(starts, t) - 1
            lo = max(-1, j - _CONTAIN_SCAN)
            while j > lo:  # sorted by (start, -dur): the first enclosing one is the deepest
                i = idxs[j]
                if ts_of[i] + dur_of[i] >= t:
                    return i
                j -= 1
            return None

        for fl in tr.flows:
            if fl.start is None:  # more ends of a flow drawn once (a CUDA graph launch -> its first kernel)
                continue
            a = bind(fl.start.on_gpu, fl.start.device, fl.start.tid, fl.start.ts_ns)
            b = bind(fl.end.on_gpu, fl.end.device, fl.end.tid, fl.end.ts_ns)
            if a is None or b is None:
                st.flows_unbound += 1
                continue
            fid = flow_id(tr.rank, fl.cat, fl.id)
            flows_out.setdefault(a, []).append(fid)
            flows_in.setdefault(b, []).append(fid)
            st.flows += 1

        # -- collectives across ranks
        occurrence: dict[tuple[str, str], int] = {}
        coll = [i for i, s in enumerate(spans) if s.on_gpu and s.cat == "kernel" and "Collective name" in s.args
                and "Process Group Name" in s.args]
        coll.sort(key=lambda i: (ts_of[i], i))
        for i in coll:
            a = spans[i].args
            g = (str(a["Process Group Name"]), str(a.get("Process Group Ranks", "")))
            n = occurrence.get(g, 0)
            occurrence[g] = n + 1
            flows_out.setdefault(i, []).append(collective_flow_id(g[0], g[1], n))
            st.collectives += 1

        # -- events in time order: ends (inner first), then begins (longer first), then instants
        items: list[tuple] = [(ts_of[i], 1, -dur_of[i], i) for i in range(len(spans))]
        items.extend((ins.ts_ns, 2, 0, j) for j, ins in enumerate(tr.instants))
        items.extend((sample[0], 3, 0, j) for j, sample in enumerate(samples))
        items.sort()
        span_uuid = [track_uuid[(key_of[i], lane_of[i])] for i in range(len(spans))]
        instant_uuid = [proc_uuid if ins.scope in ("p", "g") else track_uuid[((0, 0, ins.tid), 0)]
                        for ins in tr.instants]
        # memory counters drawn from [memory] instants (a trace without whole-run samples)
        instant_counters: dict[int, list[bytes]] = {}
        for j, ins in enumerate(tr.instants if not samples else ()):
            a = ins.args
            d = a.get("Device Id")
            if ins.name == "[memory]" and isinstance(d, int) and d in mem_devices and a.get("Device Type", 1) == 1:
                for k, (key, _) in enumerate(MEMORY_COUNTERS):
                    v = a.get(key)
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        instant_counters.setdefault(j, []).append(_counter_event(counter_uuid[(d, k)], v))
        sample_uuids = {d: (counter_uuid[(d, 0)], counter_uuid[(d, 1)]) for d in mem_devices}
        seq_hdr_first = seq_hdr + _vf(_FLAGS, _SEQ_CLEARED | _SEQ_NEEDS)
        seq_hdr_next = seq_hdr + _vf(_FLAGS, _SEQ_NEEDS)
        n_packets, counter_values, n_instants = self.emit_events(
            items, spans, span_uuid, dur_of, flows_out, flows_in, tr.instants, instant_uuid, instant_counters,
            samples, sample_uuids, abs_base, seq_hdr_first, seq_hdr_next, self.iids, self.ann_cache,
            _annotation_entry, _dumps_bytes, _ANN_CACHE_MAX, self.f.buf, self.f.chunk, self.f.flush)
        st.counter_values += counter_values
        st.instants += n_instants
        st.slices += len(spans)
        st.packets += n_packets


def _counter_event(uuid: int, v: Any) -> bytes:
    """TrackEvent fields of a counter value on track `uuid`."""
    return _vf(9, _COUNTER) + _vf(11, uuid) + _vf(30, int(v))


def _annotation_entry(n_iid: int, v: Any) -> bytes:
    """TrackEvent.debug_annotations field of (interned name `n_iid`, value `v`)."""
    return _ld(4, _vf(1, n_iid) + _annotation_value(v))


def _emit_events_py(items: list[tuple], spans: list, span_uuid: list[int], dur_of: list[int],
                    flows_out: dict[int, list[int]], flows_in: dict[int, list[int]], instants: list,
                    instant_uuid: list[int], instant_counters: dict[int, list[bytes]], samples: list,
                    sample_uuids: dict[int, tuple[int, int]], abs_base: int, head_first: bytes, head_next: bytes,
                    tables: list[dict[str, int]], ann_cache: dict, annotation_entry: Callable[[int, Any], bytes],
                    annotation_json: Callable[[Any], bytes], ann_cache_max: int,
                    buf: bytearray, chunk: int, flush: Callable[[], None]) -> tuple[int, int, int]:
    """Every TrackEvent packet of one rank's sequence, in time order, appended to `buf` (`flush()`
    whenever it holds `chunk` bytes or more). `items` are (ts, kind, -dur, index) sorted: kind 1 a
    span (its end follows when the time reaches it: inner ends first), 2 an instant, 3 a memory
    sample. The reference for the native encoder (native/perfetto/perfetto_events.c), which writes
    the same bytes; returns (packets, counter values, instants)."""
    pending_ends: list[tuple[int, int, int]] = []  # (end, -order, uuid)
    heads = [head_first]
    # per-sequence caches: interned field bytes (emitted on this sequence already)
    cat_b: dict[str, bytes] = {}
    name_b: dict[str, bytes] = {}
    ann_iid: dict[str, int] = {}
    begin_b: dict[int, bytes] = {}
    end_b: dict[int, bytes] = {}
    n_packets = 0
    counter_values = 0
    n_instants = 0

    def intern(kind: int, name: str, pending: list[bytes]) -> int:
        table = tables[kind]
        iid = table.get(name)
        if iid is None:
            iid = table[name] = len(table) + 1
        pending.append(_ld(kind + 1, _vf(1, iid) + _sf(2, name)))
        return iid

    def emit(ts_abs: int, te: bytes, interned: bytes = b"") -> None:
        nonlocal n_packets
        head = heads[0]
        if n_packets == 0:
            heads[0] = head_next
        n_packets += 1
        body = b"".join((_TS, _varint(ts_abs if ts_abs > 0 else 0), head,
                         _ld(_INTERNED, interned) if interned else b"", _ld(_TE, te)))
        buf.extend(b"".join((_T_PACKET, _varint(len(body)), body)))
        if len(buf) >= chunk:
            flush()

    def end_event(u: int) -> bytes:
        b = end_b.get(u)
        if b is None:
            b = end_b[u] = _vf(9, _END) + _vf(11, u)
        return b

    int_head: dict[int, bytes] = {}  # annotation name iid -> the bytes before an int value

    def annotations(args: dict, pending: list[bytes]) -> bytes:
        out = []
        for name, v in args.items():
            n_iid = ann_iid.get(name)
            if n_iid is None:
                n_iid = ann_iid[name] = intern(2, name, pending)
            if type(v) is int and 0 <= v <= _INT64_MAX:
                # most values are ids and counters, each seen once: encoded directly, not cached
                # (DebugAnnotation{name_iid, int_value}, the bytes `_value` gives)
                head = int_head.get(n_iid)
                if head is None:
                    head = int_head[n_iid] = _vf(1, n_iid) + _tag(4, 0)
                vb = _varint(v)
                out.append(_ANN_FIELD + _SMALL[len(head) + len(vb)] + head + vb)
                continue
            tv = type(v)
            if v is None or tv is bool or tv is int or tv is float or tv is str:
                key = (n_iid, tv, v)
            else:
                key = (n_iid, annotation_json(v))
            b = ann_cache.get(key)
            if b is None:
                if len(ann_cache) >= ann_cache_max:
                    ann_cache.clear()
                b = ann_cache[key] = annotation_entry(n_iid, v)
            out.append(b)
        return b"".join(out)

    def cat_name(cat: str, name: str, pending: list[bytes]) -> bytes:
        c = cat_b.get(cat)
        if c is None:
            c = cat_b[cat] = _vf(3, intern(0, cat, pending))
        n = name_b.get(name)
        if n is None:
            n = name_b[name] = _vf(10, intern(1, name, pending))
        return c + n

    for order, (ts, kind, _, i) in enumerate(items):
        while pending_ends and pending_ends[0][0] <= ts:
            end, _, u = heapq.heappop(pending_ends)
            emit(abs_base + end, end_event(u))
        pending: list[bytes] = []
        if kind == 1:
            s = spans[i]
            u = span_uuid[i]
            b = begin_b.get(u)
            if b is None:
                b = begin_b[u] = _vf(9, _BEGIN) + _vf(11, u)
            te = [b, cat_name(s.cat, s.name, pending)]
            if s.args:
                te.append(annotations(s.args, pending))
            if i in flows_out:
                te.extend(_fixed64(47, fid) for fid in flows_out[i])
            if i in flows_in:
                te.extend(_fixed64(48, fid) for fid in flows_in[i])
            emit(abs_base + ts, b"".join(te), b"".join(pending) if pending else b"")
            if dur_of[i] == 0:
                emit(abs_base + ts, end_event(u))
            else:
                heapq.heappush(pending_ends, (ts + dur_of[i], -order, u))
        elif kind == 3:
            _, d, allocated, reserved = samples[i]
            uuids = sample_uuids.get(d)
            if uuids is not None:
                for u, v in zip(uuids, (allocated, reserved)):
                    emit(abs_base + ts, _counter_event(u, v))
                    counter_values += 1
        else:
            ins = instants[i]
            te = [_vf(9, _INSTANT), _vf(11, instant_uuid[i])]
            if ins.cat:
                te.append(cat_name(ins.cat, ins.name, pending))
            else:
                n = name_b.get(ins.name)
                if n is None:
                    n = name_b[ins.name] = _vf(10, intern(1, ins.name, pending))
                te.append(n)
            if ins.args:
                te.append(annotations(ins.args, pending))
            emit(abs_base + ts, b"".join(te), b"".join(pending) if pending else b"")
            n_instants += 1
            for te_counter in instant_counters.get(i, ()):
                emit(abs_base + ts, te_counter)
                counter_values += 1
    while pending_ends:
        end, _, u = heapq.heappop(pending_ends)
        emit(abs_base + end, end_event(u))
    return n_packets, counter_values, n_instants


class _Packets:
    """Serialized packets gathered in `buf` and written out in ~1 MiB chunks (`flush()` once
    `buf` holds `chunk` bytes or more: the event encoders append to `buf` and call it)."""

    def __init__(self, f, chunk: int = 1 << 20) -> None:
        self.f = f
        self.chunk = chunk
        self.buf = bytearray()

    def write(self, b: bytes) -> None:
        self.buf += b
        if len(self.buf) >= self.chunk:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.f.write(self.buf)
            self.buf.clear()


class _Deflate(_Packets):
    """Each chunk written as one `compressed_packets` packet (zlib deflate of the serialized
    packets, as perfetto's own DEFLATE compression does)."""

    def flush(self) -> None:
        if self.buf:
            data = zlib.compress(bytes(self.buf), _DEFLATE_LEVEL)
            self.buf.clear()
            body = _ld(50, data)
            self.f.write(_T_PACKET + _varint(len(body)) + body)


EmitEvents = Callable[..., tuple[int, int, int]]
_native_emit: EmitEvents | None = None


def use_native_encoder(module: Any | None) -> None:
    """Encode events with `module.emit_events` (the compiled native/perfetto/perfetto_events.c,
    which writes the same bytes as `_emit_events_py` ~10x faster), or in Python when None. The
    caller builds the module: this library compiles nothing."""
    global _native_emit
    _native_emit = getattr(module, "emit_events", None) if module is not None else None


def write_perfetto(traces: Iterable[RankTrace], path: str | Path, *, stats: PerfettoStats | None = None,
                   compress: bool = True, native: bool = True) -> Path:
    """Write all ranks of `traces` (an iterable; a generator keeps one rank in memory at a
    time) as one Perfetto TrackEvent trace at `path`. Atomic (temporary file + rename);
    the same input always gives the same bytes. With `compress` (default) the packets
    are zlib-deflated in ~1 MiB chunks (`TracePacket.compressed_packets`, which
    ui.perfetto.dev and trace_processor read); `compress=False` writes plain packets.
    `native=False` encodes in Python even where `use_native_encoder` gave a native encoder
    (the same bytes). Returns the path."""
    path = Path(path)
    stats = stats if stats is not None else PerfettoStats()
    emit_events = _native_emit if native and _native_emit is not None else _emit_events_py
    with atomic_file(path, buffering=1 << 20) as f:
        sink = _Deflate(f) if compress else _Packets(f)
        w = _Writer(sink, stats, emit_events)
        for tr in traces:
            w.rank(tr)
        sink.flush()
        stats.bytes = f.tell()
    return path


# ------------------------------------------------------------------ Kineto JSON -> RankTrace

_GPU_CATS = frozenset(("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"))


def rank_trace_from_kineto(doc: dict, default_rank: int = 0) -> RankTrace:
    """A `RankTrace` from a loaded Kineto document (`tracing.kineto.load_trace`), so that
    torch.profiler traces and per-rank files on disk can be written as a .pftrace.

    Complete events on integer pids are spans (GPU categories on their GPU pid/stream;
    `gpu_user_annotation` un-shifted, the writers shift it again), `s`/`f` pairs are flows,
    `i` events on integer pids are instants; times become integer ns relative to
    `baseTimeNanoseconds`. The profiler's own markers (pids "Spans", "Traces", "") are left
    out, as the Kineto writer adds them itself."""
    from tracing.model import Flow, FlowEnd, Instant, Span

    info = doc.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if not isinstance(rank, int) or isinstance(rank, bool):
        rank = default_rank
    base = doc.get("baseTimeNanoseconds")
    base = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else 0
    events = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and isinstance(e.get("pid"), int)
              and not isinstance(e.get("pid"), bool)]
    gpu_pids: set[int] = set()
    host_pids: list[int] = []
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_labels":
            lab = str((e.get("args") or {}).get("labels", ""))
            if lab.startswith("GPU"):
                gpu_pids.add(e["pid"])
            elif lab == "CPU":
                host_pids.append(e["pid"])
        elif e.get("ph") == "X" and e.get("cat") in _GPU_CATS:
            gpu_pids.add(e["pid"])
    host_pid = next(iter(host_pids), None)
    if host_pid is None:
        host_pid = next((e["pid"] for e in events if e.get("ph") == "X" and e["pid"] not in gpu_pids), 0)

    def ns(v: Any) -> int:
        return round(float(v) * 1000) if isinstance(v, (int, float)) else 0

    tr = RankTrace(rank=rank, host_pid=host_pid, base_time_ns=base,
                   device_properties=list(doc.get("deviceProperties") or []),
                   distributed_info=info if isinstance(info, dict) else None,
                   trace_name=str(doc.get("traceName", "")), trace_id=str(doc.get("trace_id", "")))
    flow_ends: dict[tuple, list] = {}
    for e in events:
        ph, pid = e.get("ph"), e["pid"]
        tid = e.get("tid")
        if not isinstance(tid, int):
            continue
        on_gpu = pid in gpu_pids
        if ph == "X":
            cat = str(e.get("cat", ""))
            ts, dur = ns(e.get("ts")), ns(e.get("dur"))
            if cat == "gpu_user_annotation" and on_gpu:
                ts, dur = ts + 1, max(0, dur - 2)
            tr.spans.append(Span(cat, str(e.get("name", "")), tid, ts, dur, dict(e.get("args") or {}),
                                 on_gpu=on_gpu, device=pid if on_gpu else 0))
            if on_gpu:
                tr.gpu_streams.setdefault(pid, [])
                if tid not in tr.gpu_streams[pid]:
                    tr.gpu_streams[pid].append(tid)
        elif ph in ("s", "f") and "id" in e:
            key = (str(e.get("cat", "")), e["id"])
            pair = flow_ends.setdefault(key, [None, None])
            pair[0 if ph == "s" else 1] = FlowEnd(on_gpu, tid, ns(e.get("ts")), pid if on_gpu else 0)
        elif ph == "i" and not on_gpu:
            tr.instants.append(Instant(str(e.get("cat", "")), str(e.get("name", "")), tid, ns(e.get("ts")),
                                       dict(e.get("args") or {}), str(e.get("s", "t"))))
        elif ph == "M" and e.get("name") == "thread_name" and pid == host_pid:
            tr.host_threads[tid] = str((e.get("args") or {}).get("name", ""))
        elif ph == "M" and e.get("name") == "process_name" and pid == host_pid:
            tr.process_name = str((e.get("args") or {}).get("name", tr.process_name))
    for (cat, fid), (start, end) in flow_ends.items():
        if start is not None and end is not None and isinstance(fid, int):
            tr.flows.append(Flow(cat, fid, start, end))
    tr.profile_memory = bool(doc.get("profile_memory"))
    tr.record_shapes = bool(doc.get("record_shapes"))
    return tr
