"""tracing.perfetto: the .pftrace decodes with perfetto's own protos and holds the same
tracks, slices, args, flows, instants and counters as the Kineto traces of the same ranks."""
from __future__ import annotations

import itertools
import zlib
from collections import Counter

import orjson
import pytest

from conftest import REFERENCE
from synthetic_traces import synthetic_rank, synthetic_run
from tracing.kineto import load_trace, render_kineto
from tracing.model import RankTrace, Span
from tracing.perfetto import PerfettoStats, rank_trace_from_kineto, write_perfetto

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4


def _ann(a) -> object:
    which = a.WhichOneof("value")
    if which is not None:
        v = getattr(a, which)
        return orjson.loads(v) if which == "legacy_json_value" else v
    if a.dict_entries:
        return {e.name: _ann(e) for e in a.dict_entries}
    if a.array_values:
        return [_ann(x) for x in a.array_values]
    raise AssertionError(f"debug annotation without a value: {a}")


class Decoded:
    """Everything a .pftrace holds, rebuilt from its packets as a trace processor would."""

    def __init__(self, data: bytes) -> None:
        self.compressed = False
        trace = pb.Trace.FromString(data)
        packets = []
        for p in trace.packet:  # compressed_packets: deflated serialized Trace messages
            if p.HasField("compressed_packets"):
                packets.extend(pb.Trace.FromString(zlib.decompress(p.compressed_packets)).packet)
                self.compressed = True
            else:
                packets.append(p)
        self.tracks: dict[int, object] = {}
        self.slices: list[dict] = []
        self.instants: list[dict] = []
        self.counters: dict[int, list[tuple[int, int]]] = {}
        interned: dict[int, list[dict[int, str]]] = {}
        stacks: dict[int, list[dict]] = {}
        last_ts: dict[int, int] = {}
        for p in packets:
            seq = p.trusted_packet_sequence_id
            assert seq, "every packet names its sequence"
            if p.HasField("track_descriptor"):
                td = p.track_descriptor
                assert td.uuid not in self.tracks, "track uuids are unique"
                self.tracks[td.uuid] = td
                continue
            assert p.HasField("track_event")
            if p.sequence_flags & 1:
                assert seq not in interned, "incremental state cleared once per sequence"
                interned[seq] = [{}, {}, {}]
            assert p.sequence_flags & 2 and seq in interned
            tables = interned[seq]
            for kind, field in enumerate(("event_categories", "event_names", "debug_annotation_names")):
                for e in getattr(p.interned_data, field):
                    tables[kind][e.iid] = e.name
            te = p.track_event
            assert te.track_uuid in self.tracks, "tracks are described before use"
            assert p.timestamp >= last_ts.get(seq, 0), "events of a sequence in time order"
            last_ts[seq] = p.timestamp
            args = {tables[2][a.name_iid]: _ann(a) for a in te.debug_annotations}
            cats = [tables[0][i] for i in te.category_iids]
            name = tables[1][te.name_iid] if te.name_iid else ""
            if te.type == BEGIN:
                ev = {"track": te.track_uuid, "cat": cats[0], "name": name, "ts": p.timestamp, "args": args,
                      "flow_ids": list(te.flow_ids), "terminating_flow_ids": list(te.terminating_flow_ids)}
                stacks.setdefault(te.track_uuid, []).append(ev)
            elif te.type == END:
                ev = stacks[te.track_uuid].pop()
                ev["dur"] = p.timestamp - ev["ts"]
                self.slices.append(ev)
            elif te.type == INSTANT:
                self.instants.append({"track": te.track_uuid, "cat": cats[0] if cats else "", "name": name,
                                      "ts": p.timestamp, "args": args})
            elif te.type == COUNTER:
                self.counters.setdefault(te.track_uuid, []).append((p.timestamp, te.counter_value))
        assert all(not s for s in stacks.values()), "every slice ends"

    def process_of(self, uuid: int) -> object:
        td = self.tracks[uuid]
        if td.HasField("process"):
            return td
        if td.HasField("thread"):
            return next(t for t in self.tracks.values() if t.HasField("process") and t.process.pid == td.thread.pid)
        return self.process_of(td.parent_uuid)


def _kineto(tr: RankTrace) -> dict:
    return orjson.loads(render_kineto(tr))


def _ns(ts: float) -> int:
    return round(ts * 1000)


def _location(d: Decoded, uuid: int) -> tuple:
    td = d.tracks[uuid]
    if td.HasField("thread"):
        return ("host", td.thread.tid)
    name = td.name.split(" (overlap")[0]
    _, dev, _, stream = name.split()
    return ("gpu", int(dev), int(stream))


def _check_rank(d: Decoded, tr: RankTrace, world: int) -> None:
    doc = _kineto(tr)
    base = doc["baseTimeNanoseconds"]
    events = [e for e in doc["traceEvents"] if isinstance(e.get("pid"), int)]
    proc = next(t for t in d.tracks.values() if t.HasField("process") and t.process.process_name == f"rank {tr.rank}")
    mine = lambda uuid: d.process_of(uuid).uuid == proc.uuid  # noqa: E731

    # slices: same multiset of (where, cat, name, ts, dur, args)
    def key(where, e_cat, name, ts, dur, args):
        return (where, e_cat, name, ts, dur, orjson.dumps(args, option=orjson.OPT_SORT_KEYS))

    want = Counter(key(("host", e["tid"]) if e["pid"] == tr.host_pid else ("gpu", e["pid"], e["tid"]), e["cat"],
                       e["name"], base + _ns(e["ts"]), _ns(e["dur"]), e.get("args", {}))
                   for e in events if e["ph"] == "X")
    slices = [s for s in d.slices if mine(s["track"])]
    got = Counter(key(_location(d, s["track"]), s["cat"], s["name"], s["ts"], s["dur"], s["args"]) for s in slices)
    assert got == want
    assert Counter(s["cat"] for s in slices) == Counter(sp.cat for sp in tr.spans)

    # instants
    want_i = Counter((e["tid"], e["name"], e.get("cat", ""), base + _ns(e["ts"]),
                      orjson.dumps(e.get("args", {}), option=orjson.OPT_SORT_KEYS))
                     for e in events if e["ph"] == "i")
    got_i = Counter((_location(d, i["track"])[1], i["name"], i["cat"], i["ts"],
                     orjson.dumps(i["args"], option=orjson.OPT_SORT_KEYS))
                    for i in d.instants if mine(i["track"]))
    assert got_i == want_i

    # flows: one flow id per Kineto flow, from the slice at its start to the slice at its end
    by_id: dict[tuple, dict] = {}
    for e in events:
        if e["ph"] in ("s", "f"):
            by_id.setdefault((e["cat"], e["id"]), {})[e["ph"]] = e
    starts = {f: s for s in slices for f in s["flow_ids"]}
    ends = {f: s for s in slices for f in s["terminating_flow_ids"]}
    coll_ids = {f for s in slices if "Collective name" in s["args"] and s["cat"] == "kernel" for f in s["flow_ids"]}
    assert set(ends) == set(starts) - coll_ids
    assert len(ends) == len(by_id) == len(tr.flows)
    pairs = sorted((starts[f]["ts"], ends[f]["ts"], ends[f]["name"]) for f in ends)
    want_pairs = []
    for se in by_id.values():
        s, f = se["s"], se["f"]
        at = [e for e in events if e["ph"] == "X" and e["pid"] == f["pid"] and e["tid"] == f["tid"]
              and e["ts"] == f["ts"]]
        shortest = min(e["dur"] for e in at)
        target = [e for e in at if e["dur"] == shortest][-1]  # the innermost slice at the point
        want_pairs.append((base + _ns(s["ts"]), base + _ns(f["ts"]), target["name"]))
    assert pairs == sorted(want_pairs)
    for f in ends:
        if starts[f]["cat"] in ("cuda_runtime", "cuda_driver"):
            assert ends[f]["args"]["correlation"] == starts[f]["args"]["correlation"]

    # memory counters: one value per [memory] instant, per counter
    mem = [e for e in events if e["ph"] == "i" and e["name"] == "[memory]" and e["args"].get("Device Type", 1) == 1
           and e["args"].get("Device Id") == 0]
    if not mem:
        assert not any(t.counter.unit and mine(u) for u, t in d.tracks.items())
        return
    for label, arg in (("allocated", "Total Allocated"), ("reserved", "Total Reserved")):
        uuid = next(u for u, t in d.tracks.items() if t.name == f"GPU 0 memory {label}" and mine(u))
        assert d.tracks[uuid].counter.unit == pb.CounterDescriptor.UNIT_SIZE_BYTES
        assert d.counters.get(uuid, []) == [(base + _ns(e["ts"]), e["args"][arg]) for e in mem]


def test_pftrace_matches_kineto_event_for_event(tmp_path):
    world = 4
    traces = synthetic_run(world, steps=3)
    stats = PerfettoStats()
    path = write_perfetto(iter(traces), tmp_path / "run.pftrace", stats=stats)
    data = path.read_bytes()
    assert stats.bytes == len(data) and stats.flows_unbound == 0 and stats.overlap_tracks == 0
    d = Decoded(data)
    assert d.compressed
    plain = Decoded(write_perfetto(traces, tmp_path / "plain.pftrace", compress=False).read_bytes())
    assert not plain.compressed and plain.slices == d.slices and plain.counters == d.counters

    procs = sorted(t.process.process_name for t in d.tracks.values() if t.HasField("process"))
    assert procs == [f"rank {r}" for r in range(world)]
    for tr in traces:
        _check_rank(d, tr, world)
        names = {t.name for u, t in d.tracks.items() if not t.HasField("thread") and not t.HasField("process")
                 and d.process_of(u).process.process_name == f"rank {tr.rank}"}
        assert {"GPU 0 stream 7", "GPU 0 stream 20"} <= names

    # the kernels of each all-reduce share one flow id, one kernel per rank
    coll: dict[int, list[dict]] = {}
    for s in d.slices:
        if s["cat"] == "kernel" and "Collective name" in s["args"]:
            for f in s["flow_ids"]:
                coll.setdefault(f, []).append(s)
    assert len(coll) == 3
    for kernels in coll.values():
        assert sorted(k["args"]["Rank"] for k in kernels) == list(range(world))
    assert stats.collectives == 3 * world

    # deterministic bytes; all flow ids distinct across ranks
    again = write_perfetto(traces, tmp_path / "again.pftrace")
    assert again.read_bytes() == data
    ac2g = [f for s in d.slices for f in s["terminating_flow_ids"]]
    assert len(ac2g) == len(set(ac2g)) == sum(len(t.flows) for t in traces)
    assert not list(tmp_path.glob(".*.tmp"))


def test_pftrace_without_memory_and_with_overlaps(tmp_path):
    tr = synthetic_rank(0, 1, steps=1, memory=False)
    # two host spans that overlap without nesting, and a span with odd args
    tr.spans.append(Span("user_annotation", "A", tr.host_pid, 10_000_000, 1_000, {"none": None, "empty": [],
                                                                                 "nested": [[1, 2], []],
                                                                                 "dict": {"k": 1.5}, "big": 1 << 63}))
    tr.spans.append(Span("user_annotation", "B", tr.host_pid, 10_000_500, 1_000, {"flag": True}))
    tr.spans.append(Span("user_annotation", "zero", tr.host_pid, 10_000_500, 0))
    stats = PerfettoStats()
    d = Decoded(write_perfetto([tr], tmp_path / "one.pftrace", stats=stats, compress=False).read_bytes())
    assert not d.compressed and stats.overlap_tracks == 1
    assert not any(t.counter.unit for t in d.tracks.values())
    _check_slices_only(d, tr)
    a = next(s for s in d.slices if s["name"] == "A")
    assert a["args"] == {"none": None, "empty": [], "nested": [[1, 2], []], "dict": {"k": 1.5}, "big": 1 << 63}
    b = next(s for s in d.slices if s["name"] == "B")
    assert d.tracks[b["track"]].name.endswith("(overlap 1)") and b["args"] == {"flag": True}


def _check_slices_only(d: Decoded, tr: RankTrace) -> None:
    doc = _kineto(tr)
    want = Counter((e["cat"], e["name"], doc["baseTimeNanoseconds"] + _ns(e["ts"]), _ns(e["dur"]))
                   for e in doc["traceEvents"] if e["ph"] == "X" and isinstance(e.get("pid"), int))
    assert Counter((s["cat"], s["name"], s["ts"], s["dur"]) for s in d.slices) == want


def test_tids_and_pids_made_unique(tmp_path):
    a, b = synthetic_rank(0, 2, steps=1), synthetic_rank(1, 2, steps=1)
    # rank 1 reuses rank 0's pid and thread id
    b.host_pid = a.host_pid
    for s in itertools.chain(b.spans):
        if not s.on_gpu:
            s.tid = a.host_pid
    for i in b.instants:
        i.tid = a.host_pid
    for f in b.flows:
        f.start.tid = a.host_pid
    b.host_threads = dict(a.host_threads)
    d = Decoded(write_perfetto([a, b], tmp_path / "x.pftrace").read_bytes())
    pids = [t.process.pid for t in d.tracks.values() if t.HasField("process")]
    tids = [t.thread.tid for t in d.tracks.values() if t.HasField("thread")]
    assert len(set(pids)) == 2 and len(set(tids)) == 2


@pytest.mark.parametrize("name", ["gpt_small_memory", "streams"])
def test_real_torch_profiler_trace(tmp_path, name):
    """A trace recorded by torch.profiler on an H200, read back into a RankTrace."""
    path = REFERENCE / name / "trace.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not available")
    tr = rank_trace_from_kineto(load_trace(path))
    stats = PerfettoStats()
    d = Decoded(write_perfetto([tr], tmp_path / "ref.pftrace", stats=stats).read_bytes())
    assert stats.flows_unbound == 0 and stats.flows == len(tr.flows) > 0
    _check_rank(d, tr, 1)
    if name == "gpt_small_memory":
        assert stats.counter_values > 1000


def test_kineto_files_to_pftrace(tmp_path):
    """`phantora-prof merge DIR -o run.pftrace`: the Kineto files read back give the same events."""
    from tracing.kineto import write_kineto
    from tracing.merge import merge_to_perfetto

    traces = synthetic_run(3, steps=2)
    for tr in traces:
        write_kineto(tr, tmp_path / "traces" / f"rank{tr.rank}.pt.trace.json.gz")
    stats = PerfettoStats()
    d = Decoded(merge_to_perfetto(tmp_path / "traces", tmp_path / "run.pftrace", stats=stats).read_bytes())
    assert stats.ranks == 3 and stats.collectives == 6
    for tr in traces:
        _check_rank(d, tr, 3)


def test_whole_run_memory_samples_become_the_counters(tmp_path):
    """A simulated run's memory samples (RankTrace.memory_counters) are the counter tracks, in
    place of the [memory] instants of a profile_memory window."""
    tr = synthetic_rank(0, 1, steps=1, memory=True)
    tr.memory_counters = [(1_000, 0, 100, 2048), (2_000, 0, 300, 2048), (2_500, 0, 50, 4096)]
    d = Decoded(write_perfetto([tr], tmp_path / "m.pftrace", compress=False).read_bytes())
    base = tr.base_time_ns
    got = {t.name: d.counters.get(u, []) for u, t in d.tracks.items() if t.name.startswith("GPU 0 memory")}
    assert got == {"GPU 0 memory allocated": [(base + 1_000, 100), (base + 2_000, 300), (base + 2_500, 50)],
                   "GPU 0 memory reserved": [(base + 1_000, 2048), (base + 2_000, 2048), (base + 2_500, 4096)]}


def test_varint_fast_paths_equal_the_plain_encoding():
    """The table / cache paths for large values (absolute ns timestamps) write exactly the bytes
    of the plain loop, at every boundary and for random values of every width."""
    import random

    from tracing import perfetto

    rng = random.Random(5)
    values = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**28 + 1, 2**35, 2**56,
              2**63 - 1, 2**64 - 1, -1, -2**63]
    values += [rng.getrandbits(rng.randint(1, 64)) for _ in range(20000)]
    values += [1_733_000_000_000_000_000 + rng.randint(0, 10**12) for _ in range(5000)]
    for v in values:
        assert perfetto._varint(v) == perfetto._varint_slow(v), v
