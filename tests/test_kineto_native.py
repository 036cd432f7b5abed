"""The compiled Kineto event renderer (native/kineto/kineto_events.c) gives exactly the text of
the Python renderer (tracing.kineto._render_events_py) it stands in for: over synthetic runs,
odd values, instants, flows with extra ends, GPU annotations, times before the trace's base and
real torch.profiler traces; a trace it cannot render (a value the Python writer would print
differently, or refuse) goes to the Python renderer."""
from __future__ import annotations

import shutil

import pytest

from conftest import REFERENCE
from synthetic_traces import synthetic_rank, synthetic_run
from tracing import kineto, perfetto
from tracing.kineto import load_trace, render_kineto
from tracing.model import Flow, FlowEnd, Instant, Span

from phantora_prof import c_extensions
from phantora_prof.outputs import KINETO_RENDERER_SOURCE


@pytest.fixture(scope="module")
def native():
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler: the Python renderer is used")
    mod = c_extensions.load(KINETO_RENDERER_SOURCE, "phantora_kineto")
    assert mod is not None, "the Kineto renderer did not compile (see the warning above)"
    kineto.use_native_renderer(mod)
    yield mod
    kineto.use_native_renderer(None)


def _both(trace, native_calls: list | None = None) -> tuple[bytes, bytes]:
    """(native, Python) renderings of `trace`; `native_calls` collects what the native one returned."""
    fn = kineto._native_render
    assert fn is not None

    def spy(*a):
        r = fn(*a)
        if native_calls is not None:
            native_calls.append(r)
        return r

    kineto._native_render = spy
    try:
        c = render_kineto(trace)
    finally:
        kineto._native_render = None
    try:
        py = render_kineto(trace)
    finally:
        kineto._native_render = fn
    return c, py


def _odd_rank():
    tr = synthetic_rank(0, 1, steps=2, memory=True)
    pid = tr.host_pid
    tr.spans.append(Span("user_annotation", "A \"quoted\" µs ✓", pid, 10_000_000, 1_000, {
        "none": None, "empty": [], "nested": [[1, 2], []], "dict": {"k": 1.5, "t": True}, "big": 1 << 63,
        "neg": -5, "flag": False, "f": 0.1, "u": "µs ✓", "set": {3, 1}}))
    tr.spans.append(Span("user_annotation", "zero", pid, 10_000_500, 0))
    tr.spans.append(Span("user_annotation", "negative duration", pid, 10_000_600, -7, {}))
    tr.spans.append(Span("", "no category", pid, 10_000_600, 10))
    tr.spans.append(Span("user_annotation", "before the base", pid, -5_500, 20, {"Ev Idx": 0}))
    tr.spans.append(Span("gpu_user_annotation", "gpu range", 7, 10_000_000, 5_000, {"External id": 1},
                         on_gpu=True, device=3))
    tr.spans.append(Span("kernel", "k", 9, 999, 1, {"correlation": 5}, on_gpu=True, device=1))
    tr.flows.append(Flow("ac2g", 5, FlowEnd(False, pid, 900), FlowEnd(True, 9, 999, 1)))
    tr.flows.append(Flow("ac2g", 5, None, FlowEnd(True, 11, 1_500, 2)))  # one more end: no start drawn
    tr.instants.append(Instant("", "no category", pid, 10_000_700, {}))
    tr.instants.append(Instant("cpu_instant_event", "process scope", pid + 1, 10_000_800, {"k": "v"}, scope="p"))
    tr.instants.append(Instant("cpu_instant_event", "[memory]", pid, -20,
                               {"Device Type": 1, "Device Id": 0, "Total Allocated": 12.5}))
    return tr


def test_same_text_on_a_multi_rank_run(native):
    for tr in synthetic_run(3, steps=3):
        calls: list = []
        c, py = _both(tr, calls)
        assert c == py and len(c) > 5_000
        assert calls and isinstance(calls[0][0], bytes)  # rendered natively, not declined


def test_same_text_on_odd_values_instants_and_flows(native):
    calls: list = []
    c, py = _both(_odd_rank(), calls)
    assert c == py and calls


def test_same_text_with_a_trace_base_and_a_window(native):
    tr = _odd_rank()
    tr.trace_base_ns = tr.base_time_ns + 3_000
    tr.profiler_start_ns, tr.profiler_end_ns = 1_000, 20_000_000
    c, py = _both(tr)
    assert c == py
    empty = synthetic_rank(0, 1, steps=1, memory=False)
    empty.spans, empty.flows, empty.instants = [], [], []
    c, py = _both(empty)
    assert c == py


@pytest.mark.parametrize("name", ["gpt_small_memory", "streams"])
def test_same_text_on_real_profiles(native, name):
    path = REFERENCE / name / "trace.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not available")
    c, py = _both(perfetto.rank_trace_from_kineto(load_trace(path)))
    assert c == py


def test_values_it_would_print_differently_go_to_python(native):
    """A bool where an int is expected prints "True" in Python: the native renderer declines,
    and the text is the Python renderer's."""
    tr = synthetic_rank(0, 1, steps=1, memory=False)
    tr.spans.append(Span("user_annotation", "bool tid", True, 10_000_000, 10))
    calls: list = []
    with pytest.raises(TypeError):
        kineto._native_render(tr.spans, tr.flows, tr.instants, tr.host_pid, 0, {}, kineto._dumps_bytes)
    c, py = _both(tr, calls)
    assert c == py and b'"tid": True' in c and not calls


def test_names_and_values_through_the_writers_json(native):
    """Names and args go through the writer's own JSON encoder (its `default` for values orjson
    does not know), in both renderers."""
    tr = synthetic_rank(0, 1, steps=1, memory=False)
    tr.spans.append(Span("user_annotation", 42, tr.host_pid, 10_000_000, 10))  # a name that is not a str
    tr.spans.append(Span("user_annotation", "x", tr.host_pid, 10_000_000, 10, {"odd": object(), "s": {2, 1}}))
    calls: list = []
    c, py = _both(tr, calls)
    assert c == py and calls


def test_the_cli_renders_with_the_native_renderer(monkeypatch):
    from phantora_prof.outputs import ENV_PYTHON_KINETO, use_native_kineto_renderer

    try:
        monkeypatch.delenv(ENV_PYTHON_KINETO, raising=False)
        assert use_native_kineto_renderer() is (shutil.which("cc") is not None or shutil.which("gcc") is not None)
        monkeypatch.setenv(ENV_PYTHON_KINETO, "1")
        assert use_native_kineto_renderer() is False and kineto._native_render is None
    finally:
        kineto.use_native_renderer(None)
