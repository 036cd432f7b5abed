"""The Kineto writer, reader and validator on small hand-built traces (torch-free)."""
from __future__ import annotations

import copy
import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracing.kineto import TraceFormatError, format_us, load_trace, render_kineto, write_kineto
from tracing.model import Flow, FlowEnd, Instant, RankTrace, Span
from tracing.validate import validate_file, validate_trace

from conftest import REFERENCE as REF_DIR  # noqa: E402
REFERENCES = ("gpt_small", "gpt_b32", "streams", "gpt_ddp1", "gpt_small_memory")

H200 = {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9,
        "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
        "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448,
        "sharedMemPerMultiprocessor": 233472}

PID = 4242
MAIN = 4242
BWD = 4266
STREAM = 7
BASE = 1_790_857_026_000_000_000
US = 1000


def _shapes(dims: list, types: list) -> dict:
    return {"Concrete Inputs": [""] * len(dims), "Input type": types,
            "Input Strides": [[d[-1], 1] if len(d) == 2 else [] for d in dims], "Input Dims": dims}


def _op(name, tid, t0, t1, ext, ev, shapes=True, **extra):
    args = {"External id": ext, "Record function id": 0, **extra}
    if shapes:
        args.update(_shapes([[64, 64], [64, 64]], ["float", "float"]))
    args["Ev Idx"] = ev
    return Span("cpu_op", name, tid, t0 * US, (t1 - t0) * US, args)


def _launch(cat, name, t0, t1, ext, cbid, corr):
    return Span(cat, name, MAIN, t0 * US, (t1 - t0) * US, {"External id": ext, "cbid": cbid, "correlation": corr})


def _kernel(name, t0, t1, ext, corr):
    return Span("kernel", name, STREAM, t0 * US, (t1 - t0) * US, {
        "External id": ext, "queued": 0, "device": 0, "context": 1, "stream": STREAM, "correlation": corr,
        "registers per thread": 32, "shared memory": 0, "blocks per SM": 0.242424, "warps per SM": 0.969697,
        "grid": [32, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 0}, on_gpu=True, device=0)


def _mem(cat, name, t0, t1, ext, corr, nbytes):
    return Span(cat, name, STREAM, t0 * US, (t1 - t0) * US, {
        "External id": ext, "device": 0, "context": 1, "stream": STREAM, "correlation": corr,
        "bytes": nbytes, "memory bandwidth (GB/s)": nbytes / ((t1 - t0) * US)}, on_gpu=True, device=0)


def _ac2g(corr, launch_us, act_us):
    return Flow("ac2g", corr, FlowEnd(False, MAIN, launch_us * US), FlowEnd(True, STREAM, act_us * US, 0))


def make_trace(**overrides) -> RankTrace:
    """A step: ProfilerStep with an mm (launch + kernel), a copy (memcpy), a zero_ (memset),
    an optimizer annotation with a driver launch (and its gpu_user_annotation), a backward op
    on the autograd thread linked by a fwdbwd flow, and a [memory] instant."""
    spans = [
        Span("user_annotation", "ProfilerStep#0", MAIN, 0, 200 * US,
             {"External id": 1, "Record function id": 0, "Ev Idx": 0}),
        _op("aten::mm", MAIN, 10, 30, 2, 1),
        _launch("cuda_runtime", "cudaLaunchKernel", 15, 20, 2, 211, 10),
        _kernel("void gemm_kernel<float>(float const*, float*)", 25, 45, 2, 10),
        _op("aten::copy_", MAIN, 40, 60, 3, 2),
        _launch("cuda_runtime", "cudaMemcpyAsync", 45, 50, 3, 41, 11),
        _mem("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 50, 55, 3, 11, 16384),
        _op("aten::zero_", MAIN, 70, 80, 4, 3),
        _launch("cuda_runtime", "cudaMemsetAsync", 72, 75, 4, 51, 12),
        _mem("gpu_memset", "Memset (Device)", 76, 77, 4, 12, 4096),
        Span("user_annotation", "Optimizer.step#AdamW.step", MAIN, 90 * US, 60 * US,
             {"External id": 5, "Record function id": 0, "Ev Idx": 4}),
        _op("aten::_fused_adamw_", MAIN, 95, 140, 6, 5),
        _launch("cuda_driver", "cuLaunchKernelEx", 100, 105, 6, 652, 13),
        _kernel("void fused_adamw_kernel<float>(float*)", 110, 130, 6, 13),
        Span("gpu_user_annotation", "Optimizer.step#AdamW.step", STREAM, 110 * US, 20 * US,
             {"External id": 5}, on_gpu=True, device=0),
        _op("autograd::engine::evaluate_function: MmBackward0", BWD, 160, 190, 7, 6, shapes=False,
            **{"Sequence number": 5, "Fwd thread id": 1}),
        _op("MmBackward0", BWD, 161, 189, 8, 7, **{"Sequence number": 5, "Fwd thread id": 1}),
        Span("cuda_runtime", "cudaDeviceSynchronize", MAIN, 192 * US, 5 * US, {"cbid": 165, "correlation": 14}),
    ]
    flows = [
        _ac2g(10, 15, 25), _ac2g(11, 45, 50), _ac2g(12, 72, 76), _ac2g(13, 100, 110),
        Flow("fwdbwd", 1, FlowEnd(False, MAIN, 10 * US), FlowEnd(False, BWD, 161 * US)),
    ]
    instants = [Instant("cpu_instant_event", "[memory]", MAIN, 12 * US, {
        "Total Reserved": 2097152, "Total Allocated": 16384, "Bytes": 16384, "Device Id": 0,
        "Device Type": 1, "Addr": 140101430542336, "finished": False, "Ev Idx": 8})]
    kw = dict(rank=0, host_pid=PID, base_time_ns=BASE, device_properties=[dict(H200)],
              host_threads={MAIN: f"thread {MAIN} (python3)", BWD: f"thread {BWD} (pt_autograd_0)"},
              gpu_streams={0: [STREAM]}, spans=spans, flows=flows, instants=instants,
              trace_name="rank0.pt.trace.json", profiler_start_ns=0, profiler_end_ns=210 * US)
    kw.update(overrides)
    return RankTrace(**kw)


@pytest.fixture
def doc(tmp_path) -> dict:
    return load_trace(write_kineto(make_trace(), tmp_path / "t.pt.trace.json"))


def _find(doc: dict, name: str, ph: str = "X") -> tuple[int, dict]:
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("name") == name and e.get("ph") == ph:
            return i, e
    raise KeyError(name)


# ------------------------------------------------------------------ writer

def test_tracing_is_torch_free():
    code = ("import sys, tracing.kineto, tracing.validate, tracing.model; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'phantora_prof')]; "
            "assert not bad, bad")
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_writer_output_is_valid(doc):
    assert validate_trace(doc) == []


@pytest.mark.parametrize("ref", REFERENCES)
def test_writer_output_matches_each_reference(doc, ref):
    path = REF_DIR / ref / "trace.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"reference {path} not available")
    assert validate_trace(doc, load_trace(path)) == []


def test_layout_like_kineto(doc):
    assert list(doc)[:2] == ["schemaVersion", "deviceProperties"]
    assert list(doc)[-4:] == ["displayTimeUnit", "baseTimeNanoseconds", "traceEvents", "traceName"]
    assert doc["baseTimeNanoseconds"] == BASE
    assert doc["traceName"] == "rank0.pt.trace.json"
    assert doc["record_shapes"] == 1 and "distributedInfo" not in doc
    _, k = _find(doc, "void gemm_kernel<float>(float const*, float*)")
    assert list(k) == ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
    assert (k["pid"], k["tid"], k["ts"], k["dur"]) == (0, STREAM, 25.0, 20.0)
    # kineto writes gpu_user_annotation 1 ns earlier and 2 ns longer
    _, g = _find(doc, "Optimizer.step#AdamW.step")
    _, ga = next((i, e) for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "gpu_user_annotation")
    assert ga["ts"] == pytest.approx(109.999) and ga["dur"] == pytest.approx(20.002)
    labels = {e["pid"]: e["args"]["labels"] for e in doc["traceEvents"]
              if e.get("ph") == "M" and e["name"] == "process_labels"}
    assert labels[PID] == "CPU" and labels[0] == "GPU 0" and labels[15] == "GPU 15"
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert threads[(0, STREAM)] == "stream 7 "
    assert threads[(PID, BWD)] == f"thread {BWD} (pt_autograd_0)"
    tail = [e["name"] for e in doc["traceEvents"][-3:]]
    assert tail == ["process_sort_index", "Iteration Start: PyTorch Profiler", "Record Window End"]
    _, span = _find(doc, "PyTorch Profiler (0)")
    assert span["pid"] == "Spans" and span["dur"] == 210.0


def test_timestamps_three_decimals_relative_to_base(tmp_path):
    tr = make_trace()
    tr.spans[1].ts_ns = 10 * US + 7  # 10.007 us
    tr.spans[1].dur_ns = 20 * US - 7
    text = render_kineto(tr).decode()
    assert '"ts": 10.007, "dur": 19.993' in text
    assert format_us(0) == "0.000" and format_us(1_234_567) == "1234.567"
    # anchoring baseTimeNanoseconds elsewhere keeps absolute time = base + ts * 1000
    tr2 = make_trace(trace_base_ns=BASE - 5_000_000_000)
    d = load_trace(write_kineto(tr2, tmp_path / "a.json"))
    _, mm = _find(d, "aten::mm")
    assert d["baseTimeNanoseconds"] == BASE - 5_000_000_000
    assert d["baseTimeNanoseconds"] + round(mm["ts"] * 1000) == BASE + 10 * US


def test_round_trip(tmp_path):
    tr = make_trace()
    d1 = load_trace(write_kineto(tr, tmp_path / "a.pt.trace.json"))
    d2 = load_trace(write_kineto(tr, tmp_path / "a.pt.trace.json.gz"))
    assert d1 == d2
    xs = [e for e in d1["traceEvents"] if e["ph"] == "X" and e["cat"] != "Trace"]
    assert len(xs) == len(tr.spans)
    assert sum(e["ph"] in "sf" for e in d1["traceEvents"]) == 2 * len(tr.flows)
    _, mm = _find(d1, "aten::mm")
    assert mm["args"] == tr.spans[1].args
    _, mem = _find(d1, "[memory]", "i")
    assert mem["args"]["finished"] is False and mem["s"] == "t"
    _, fl = next((i, e) for i, e in enumerate(d1["traceEvents"]) if e.get("cat") == "fwdbwd" and e["ph"] == "f")
    assert (fl["pid"], fl["tid"], fl["ts"], fl["bp"]) == (PID, BWD, 161.0, "e")


def test_deterministic(tmp_path):
    a = write_kineto(make_trace(), tmp_path / "a.json.gz").read_bytes()
    b = write_kineto(make_trace(), tmp_path / "a.json.gz").read_bytes()
    assert a == b
    c = write_kineto(make_trace(), tmp_path / "x" / "b.json.gz").read_bytes()
    assert a == c  # trace_name is set, so the path does not leak into the bytes


def test_sorted_by_time(doc):
    ts = [e["ts"] for e in doc["traceEvents"] if e["ph"] in "Xsfi" and e.get("cat") not in (None, "Trace")]
    assert ts == sorted(ts)


def test_atomic_write_leaves_no_temp_files(tmp_path, monkeypatch):
    target = tmp_path / "t.json"
    write_kineto(make_trace(), target)
    assert sorted(os.listdir(tmp_path)) == ["t.json"]
    before = target.read_bytes()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_kineto(make_trace(trace_name="other"), target)
    assert sorted(os.listdir(tmp_path)) == ["t.json"]
    assert target.read_bytes() == before


def test_gzip_vs_plain(tmp_path):
    plain = write_kineto(make_trace(), tmp_path / "t.json").read_bytes()
    gz = write_kineto(make_trace(), tmp_path / "t.json.gz").read_bytes()
    assert plain.lstrip().startswith(b"{") and gz[:2] == b"\x1f\x8b"
    assert gzip.decompress(gz) == plain
    assert gz[4:8] == b"\0\0\0\0"  # mtime 0
    assert not gz[3] & 0x08  # no FNAME field


def test_default_trace_name_and_id(tmp_path):
    p = write_kineto(make_trace(trace_name=""), tmp_path / "r.json")
    d = load_trace(p)
    assert d["traceName"] == str(p)
    assert len(d["trace_id"]) == 32 and d["trace_id"] == d["trace_id"].upper()


def test_distributed_info_and_memory_flags(tmp_path):
    info = {"backend": "nccl", "rank": 0, "world_size": 2, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                           "pg_size": 2, "ranks": [0, 1]}], "nccl_version": "2.28.9"}
    d = load_trace(write_kineto(make_trace(distributed_info=info, profile_memory=True), tmp_path / "d.json"))
    keys = list(d)
    assert keys.index("trace_id") < keys.index("profile_memory") < keys.index("record_shapes") \
        < keys.index("distributedInfo") < keys.index("cuda_driver_version")
    assert d["distributedInfo"] == info
    assert validate_trace(d) == []
    # written as torch writes it (json.dumps): HTA finds a file's rank with the regex '"rank":\\s+(\\d+)'
    text = (tmp_path / "d.json").read_text()
    assert '"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2,' in text


# ------------------------------------------------------------------ validator catches planted errors

def _planted(doc: dict, name: str, mutate, ph: str = "X") -> list[str]:
    d = copy.deepcopy(doc)
    _, e = _find(d, name, ph)
    mutate(d, e)
    return validate_trace(d)


KERNEL = "void gemm_kernel<float>(float const*, float*)"


def test_catches_missing_correlation(doc):
    probs = _planted(doc, KERNEL, lambda d, e: e["args"].pop("correlation"))
    assert any("[args]" in p and KERNEL in p and "correlation" in p for p in probs), probs


def test_catches_kernel_overlap(doc):
    def add_overlap(d, e):
        k = copy.deepcopy(e)
        k["name"] = "overlapping_kernel"
        k["ts"] = e["ts"] + 5.0
        d["traceEvents"].insert(d["traceEvents"].index(e) + 1, k)
    probs = _planted(doc, KERNEL, add_overlap)
    assert any("[stream-overlap]" in p and "overlapping_kernel" in p and KERNEL in p for p in probs), probs


def test_catches_missing_launch(doc):
    probs = _planted(doc, "cudaLaunchKernel", lambda d, e: d["traceEvents"].remove(e))
    assert any("[launch]" in p and KERNEL in p and "0 host" in p for p in probs), probs


def test_catches_bad_pid(doc):
    probs = _planted(doc, KERNEL, lambda d, e: e.update(pid=PID))
    assert any("[pid]" in p and KERNEL in p for p in probs), probs


def test_catches_missing_args_key(doc):
    probs = _planted(doc, "Memcpy HtoD (Pageable -> Device)", lambda d, e: e["args"].pop("bytes"))
    assert any("[args]" in p and "Memcpy HtoD" in p and "bytes" in p for p in probs), probs


def test_catches_host_partial_overlap(doc):
    probs = _planted(doc, "cudaLaunchKernel", lambda d, e: e.update(dur=50.0))
    assert any("[host-nesting]" in p and "cudaLaunchKernel" in p for p in probs), probs


def test_catches_wrong_external_id(doc):
    def bad(d, e):
        e["args"]["External id"] = 3
    probs = _planted(doc, "cudaLaunchKernel", bad)
    assert any("[external-id]" in p and "cudaLaunchKernel" in p for p in probs), probs


def test_catches_missing_metadata_and_flow(doc):
    def drop(d, e):
        d["traceEvents"] = [x for x in d["traceEvents"]
                            if not (x.get("ph") == "M" and x.get("tid") == STREAM)
                            and not (x.get("ph") == "f" and x.get("id") == 10)]
    probs = _planted(doc, KERNEL, drop)
    assert any("[metadata]" in p and f"tid {STREAM}" in p for p in probs), probs
    assert any("[launch]" in p and KERNEL in p and "flow end" in p for p in probs), probs


def test_reference_mismatch_reported(doc):
    ref = copy.deepcopy(doc)
    ref["extra_key"] = 1
    for e in ref["traceEvents"]:
        if e.get("cat") == "kernel":
            e["args"]["new arg"] = 1
    probs = validate_trace(doc, ref)
    assert any("[ref-top-keys]" in p and "extra_key" in p for p in probs), probs
    assert any("[ref-args]" in p and KERNEL in p and "new arg" in p for p in probs), probs


def test_problems_are_capped(doc):
    d = copy.deepcopy(doc)
    for e in d["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") != "Trace":
            e["dur"] = -1.0
    probs = validate_trace(d, max_per_rule=3)
    event = [p for p in probs if p.startswith("[event]")]
    assert len(event) == 4 and "negative dur" in event[0]
    assert event[-1].startswith("[event] ... and ") and event[-1].endswith("more problems of this kind")


# ------------------------------------------------------------------ reader errors

def test_reader_truncated_gzip(tmp_path):
    p = write_kineto(make_trace(), tmp_path / "t.json.gz")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="truncated gzip") as ei:
        load_trace(p)
    assert str(p) in str(ei.value)
    assert validate_file(p)[0].startswith("[file]") and str(p) in validate_file(p)[0]


def test_reader_not_json(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("this is not json")
    with pytest.raises(TraceFormatError, match="not valid JSON") as ei:
        load_trace(p)
    assert str(p) in str(ei.value)
    g = tmp_path / "g.json.gz"
    g.write_bytes(gzip.compress(b"[1, 2"))
    with pytest.raises(TraceFormatError, match="not valid JSON"):
        load_trace(g)


def test_reader_json_without_trace_events(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('{"schemaVersion": 1}')
    with pytest.raises(TraceFormatError, match="traceEvents") as ei:
        load_trace(p)
    assert str(p) in str(ei.value)
    q = tmp_path / "l.json"
    q.write_text("[]")
    with pytest.raises(TraceFormatError, match="top level is a list"):
        load_trace(q)


def test_reader_errors_are_value_errors(tmp_path):
    p = tmp_path / "e.json"
    p.write_text("")
    with pytest.raises(ValueError, match="empty"):
        load_trace(p)
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "missing.json")


# ------------------------------------------------------------------ benchmarks (deselected by default)

def make_big_trace(n_ops: int) -> RankTrace:
    """n_ops x (cpu_op + launch + kernel + ac2g flow) = 5 * n_ops events."""
    spans, flows = [], []
    t, g = 1_000_000, 0
    for i in range(n_ops):
        ext = corr = i + 1
        spans.append(_op(f"aten::op{i % 50}", MAIN, 0, 20, ext, i))
        spans[-1].ts_ns = t
        lt = t + 5_000
        spans.append(Span("cuda_runtime", "cudaLaunchKernel", MAIN, lt, 7_000,
                          {"External id": ext, "cbid": 211, "correlation": corr}))
        g = max(g, lt + 3_000)
        k = _kernel(f"void kernel_{i % 40}<float>(float*)", 0, 15, ext, corr)
        k.ts_ns, k.dur_ns = g, 15_333
        spans.append(k)
        flows.append(Flow("ac2g", corr, FlowEnd(False, MAIN, lt), FlowEnd(True, STREAM, g, 0)))
        g += 15_333
        t += 21_000
    return make_trace(spans=spans, flows=flows, instants=[], profiler_end_ns=0,
                      host_threads={MAIN: f"thread {MAIN} (python3)"})


@pytest.mark.benchmark
def test_bench_write_200k(benchmark, tmp_path):
    tr = make_big_trace(40_000)
    benchmark(write_kineto, tr, tmp_path / "big.pt.trace.json.gz")


@pytest.mark.benchmark
def test_bench_validate_30k(benchmark, tmp_path):
    d = load_trace(write_kineto(make_big_trace(6_000), tmp_path / "v.json"))
    assert benchmark(validate_trace, d) == []
