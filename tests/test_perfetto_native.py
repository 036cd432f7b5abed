"""The compiled Perfetto event encoder (native/perfetto/perfetto_events.c) writes exactly the
bytes of the Python encoder (tracing.perfetto._emit_events_py) it stands in for: over synthetic
multi-rank runs, odd annotation values, memory samples and instants, chunk boundaries, cache
evictions and real torch.profiler traces."""
from __future__ import annotations

import shutil

import pytest

from conftest import REFERENCE
from synthetic_traces import synthetic_rank, synthetic_run
from tracing import perfetto
from tracing.kineto import load_trace
from tracing.model import Instant, Span

from phantora_prof import c_extensions
from phantora_prof.outputs import PERFETTO_ENCODER_SOURCE


@pytest.fixture(scope="module")
def native():
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler: the Python encoder is used")
    mod = c_extensions.load(PERFETTO_ENCODER_SOURCE, "phantora_perfetto")
    assert mod is not None, "the Perfetto encoder did not compile (see the warning above)"
    perfetto.use_native_encoder(mod)
    yield mod
    perfetto.use_native_encoder(None)


def _both(traces, tmp_path, **kw) -> tuple[bytes, bytes]:
    assert perfetto._native_emit is not None and perfetto._native_emit is not perfetto._emit_events_py
    stats_c, stats_py = perfetto.PerfettoStats(), perfetto.PerfettoStats()
    c = perfetto.write_perfetto(traces, tmp_path / "c.pftrace", stats=stats_c, **kw).read_bytes()
    py = perfetto.write_perfetto(traces, tmp_path / "py.pftrace", stats=stats_py, native=False, **kw).read_bytes()
    assert stats_c.to_json() == stats_py.to_json()
    return c, py


def _odd_rank():
    tr = synthetic_rank(0, 1, steps=2, memory=True)
    pid = tr.host_pid
    tr.spans.append(Span("user_annotation", "A", pid, 10_000_000, 1_000, {
        "none": None, "empty": [], "nested": [[1, 2], []], "dict": {"k": 1.5, "t": True}, "big": 1 << 63,
        "huge": 1 << 70, "neg": -5, "flag": False, "f": 0.1, "s": "x\ud800y", "u": "µs ✓", "set": {3, 1}}))
    tr.spans.append(Span("user_annotation", "B", pid, 10_000_500, 1_000, {"flag": True, "one": 1}))
    tr.spans.append(Span("user_annotation", "zero", pid, 10_000_500, 0))
    tr.spans.append(Span("", "no category", pid, 10_000_600, 10))
    tr.spans.append(Span("user_annotation", "negative time", pid, -50, 20, {"Ev Idx": 0}))
    tr.instants.append(Instant("", "no category", pid, 10_000_700, {}))
    tr.instants.append(Instant("cpu_instant_event", "process scope", pid, 10_000_800, {"k": "v"}, scope="p"))
    tr.instants.append(Instant("cpu_instant_event", "[memory]", pid, 10_000_900,
                               {"Device Type": 1, "Device Id": 0, "Total Allocated": 12.5, "Total Reserved": True}))
    return tr


def test_same_bytes_on_a_multi_rank_run(native, tmp_path):
    for compress in (True, False):
        c, py = _both(synthetic_run(3, steps=3), tmp_path, compress=compress)
        assert c == py and len(c) > 5_000


def test_same_bytes_on_odd_values_and_instants(native, tmp_path):
    c, py = _both([_odd_rank(), synthetic_rank(1, 2, steps=1, memory=False)], tmp_path, compress=False)
    assert c == py


def test_same_bytes_with_memory_samples(native, tmp_path):
    tr = synthetic_rank(0, 1, steps=2, memory=True)
    tr.memory_counters = [(1_000, 0, 100, 2048), (2_000, 0, 300.7, 2048), (2_000, 3, 1, 1), (2_500, 0, -1, 4096)]
    c, py = _both([tr], tmp_path, compress=False)
    assert c == py


def test_same_bytes_at_small_chunks_and_cache_evictions(native, tmp_path, monkeypatch):
    """`flush()` is called where the Python encoder calls it (the compressed chunks' bytes depend
    on it), and an annotation cache cleared every few entries changes nothing."""
    monkeypatch.setattr(perfetto, "_ANN_CACHE_MAX", 3)
    monkeypatch.setattr(perfetto._Packets.__init__, "__defaults__", (997,))
    c, py = _both(synthetic_run(2, steps=2) + [_odd_rank()], tmp_path)
    assert c == py


@pytest.mark.parametrize("name", ["gpt_small_memory", "streams"])
def test_same_bytes_on_real_profiles(native, tmp_path, name):
    path = REFERENCE / name / "trace.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not available")
    tr = perfetto.rank_trace_from_kineto(load_trace(path))
    c, py = _both([tr], tmp_path)
    assert c == py


def test_errors_are_raised_not_crashes(native, tmp_path):
    tr = synthetic_rank(0, 1, steps=1, memory=False)
    tr.spans.append(Span("user_annotation", 42, tr.host_pid, 10_000_000, 10))  # a name that is not a str
    with pytest.raises((TypeError, AttributeError)):
        perfetto.write_perfetto([tr], tmp_path / "bad.pftrace")
    assert not (tmp_path / "bad.pftrace").exists()


def test_the_cli_writes_with_the_native_encoder(monkeypatch):
    from phantora_prof.outputs import ENV_PYTHON_PERFETTO, use_native_perfetto_encoder

    try:
        monkeypatch.delenv(ENV_PYTHON_PERFETTO, raising=False)
        assert use_native_perfetto_encoder() is (shutil.which("cc") is not None or shutil.which("gcc") is not None)
        monkeypatch.setenv(ENV_PYTHON_PERFETTO, "1")
        assert use_native_perfetto_encoder() is False and perfetto._native_emit is None
    finally:
        perfetto.use_native_encoder(None)
