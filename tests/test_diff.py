"""`phantora-prof diff` (tracing.diff + phantora_prof.diff_cli), torch-free and fast.

Reference traces: shared/reference/h200 (torch 2.11, H200). Figures are checked against
straightforward computations written here, independent of tracing.diff: per
`ProfilerStep#N` host span, the kernels / memcpys / memsets whose launch (same
correlation) starts inside the span, and the launching op by `External id`.
"""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REFERENCE, reference_trace, run_cli

from phantora_prof.diff_cli import diff_cmd
from tracing.diff import CATEGORIES, DiffError, categorize, diff_traces
from tracing.diff.align import parse_steps_spec
from tracing.diff.ops import OpRow, match_ops
from tracing.kineto import write_kineto
from tracing.model import Flow, FlowEnd, RankTrace, Span

REFERENCES = ("gpt_small", "gpt_b32", "streams", "gpt_ddp1", "gpt_small_memory")


def ref(name: str) -> Path:
    return reference_trace(name)  # skips when ../shared is not laid beside the repo


def _read(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def _write_json(doc: dict, path: Path) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data, compresslevel=1) if path.name.endswith(".gz") else data)
    return path


# ------------------------------------------------------------ independent computation

def independent(path: Path) -> dict[int, dict]:
    """Per ProfilerStep#N: wall, GPU time, and GPU time of a few op families (by External id)."""
    ev = _read(path)["traceEvents"]
    steps = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in ev
             if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")}
    launch = {e["args"]["correlation"]: e["ts"] for e in ev
              if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")}
    op_by_ext = {e["args"]["External id"]: e["name"] for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"}
    out = {n: {"wall": (b - a) / 1e3, "gpu": 0.0, "gemm": 0.0, "attention": 0.0, "layer_norm": 0.0,
               "memset": 0.0, "memcpy": 0.0, "kernels": 0} for n, (a, b) in steps.items()}
    for e in ev:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        t = launch[e["args"]["correlation"]]
        for n, (a, b) in steps.items():
            if a <= t < b:
                o = out[n]
                o["gpu"] += e["dur"] / 1e3
                o["kernels"] += 1
                op = op_by_ext.get(e["args"].get("External id"), "")
                if e["cat"] == "gpu_memset":
                    o["memset"] += e["dur"] / 1e3
                elif e["cat"] == "gpu_memcpy":
                    o["memcpy"] += e["dur"] / 1e3
                elif op in ("aten::mm", "aten::addmm"):
                    o["gemm"] += e["dur"] / 1e3
                elif "attention" in op:
                    o["attention"] += e["dur"] / 1e3
                elif "layer_norm" in op:
                    o["layer_norm"] += e["dur"] / 1e3
    return out


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


# ------------------------------------------------------------ synthetic traces

US = 1000
MAIN, STREAM, COMM_STREAM = 100, 7, 20
H200 = {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9, "computeMinor": 0,
        "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
        "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}
LAYER = (("aten::addmm", "nvjet_sm90_tst_128x128", 50, [[3072], [4096, 768], [768, 3072], [], []]),
         ("aten::gelu", "vectorized_elementwise_kernel<GeluCUDAKernelImpl>", 10, [[4096, 3072], []]),
         ("aten::native_layer_norm", "vectorized_layer_norm_kernel", 8, [[4096, 768], [], [768], [768], []]))


def synth(iterations=6, layers=4, profiler_steps=True, setup=20, comm=False, sync=True, optimizer=True,
          rank=None, scale=1.0, outer_sync=False, param_copies=0) -> tuple[RankTrace, list[tuple[int, int]]]:
    """A training-loop-like trace: setup kernels (and `param_copies` parameters copied to the GPU
    one by one, each an H2D copy and a stream synchronize, as `.to("cuda")` does), then iterations of
    [H2D copy, layers x (linear->addmm, gelu, layer_norm), (all-reduce), Optimizer.step(_fused_adamw_),
    cudaDeviceSynchronize], each optionally inside ProfilerStep#i. Returns it and the iterations' spans."""
    spans: list[Span] = []
    flows: list[Flow] = []
    st = {"t": 1000 * US, "corr": 0, "ext": 0}
    gpu_free = {STREAM: 0, COMM_STREAM: 0}

    def launch(op, dims, kname, kdur_us, stream=STREAM, wrapper=None, cat="kernel", wait_for=None):
        st["ext"] += 1
        st["corr"] += 1
        e, c = st["ext"], st["corr"]
        t0 = st["t"]
        if wrapper:
            st["t"] += US
        opstart = st["t"]
        st["t"] += 2 * US
        lt = st["t"]
        spans.append(Span("cuda_runtime", "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernel", MAIN,
                          lt, 3 * US, {"cbid": 211, "correlation": c}))
        st["t"] += 4 * US
        args = {"External id": e, "Record function id": 0, "Input Dims": dims, "Input type": ["float"] * len(dims),
                "Input Strides": [[]] * len(dims), "Concrete Inputs": [""] * len(dims), "Ev Idx": e}
        spans.append(Span("cpu_op", op, MAIN, opstart, st["t"] - opstart, args))
        if wrapper:
            st["t"] += US
            spans.append(Span("cpu_op", wrapper, MAIN, t0, st["t"] - t0,
                              {"External id": 10**8 + e, "Record function id": 0, "Ev Idx": e}))
        ks = max(lt + 5 * US, gpu_free[stream], gpu_free[wait_for] if wait_for else 0)
        kd = int(kdur_us * US * scale)
        gpu_free[stream] = ks + kd
        if cat == "kernel":
            kargs = {"External id": e, "queued": 0, "device": 0, "context": 1, "stream": stream, "correlation": c,
                     "registers per thread": 32, "shared memory": 0, "blocks per SM": 0.24, "warps per SM": 0.97,
                     "grid": [32, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 0}
        else:
            kargs = {"External id": e, "device": 0, "context": 1, "stream": stream, "correlation": c,
                     "bytes": 16384, "memory bandwidth (GB/s)": 4.0}
        spans.append(Span(cat, kname, stream, ks, kd, kargs, on_gpu=True, device=0))
        flows.append(Flow("ac2g", c, FlowEnd(False, MAIN, lt), FlowEnd(True, stream, ks, 0)))

    for _ in range(setup):
        launch("aten::uniform_", [[768, 768], [], [], []], "distribution_elementwise_grid_stride_kernel", 3)
    def device_sync():
        ds = st["t"]
        st["t"] = max(st["t"] + 5 * US, max(gpu_free.values()) + 2 * US)
        st["corr"] += 1
        spans.append(Span("cuda_runtime", "cudaDeviceSynchronize", MAIN, ds, st["t"] - ds,
                          {"cbid": 165, "correlation": st["corr"]}))

    for _ in range(param_copies):
        launch("aten::copy_", [[768, 768], [768, 768], []], "Memcpy HtoD (Pageable -> Device)", 400,
               cat="gpu_memcpy", wrapper="aten::_to_copy")
        ss = st["t"]
        st["t"] = max(st["t"] + 5 * US, max(gpu_free.values()) + 2 * US)
        st["corr"] += 1
        spans.append(Span("cuda_runtime", "cudaStreamSynchronize", MAIN, ss, st["t"] - ss,
                          {"cbid": 131, "correlation": st["corr"]}))
    iters = []
    if outer_sync:
        device_sync()
    for it in range(iterations):
        s0 = st["t"]
        launch("aten::copy_", [[8, 512], [8, 512], []], "Memcpy HtoD (Pageable -> Device)", 4, cat="gpu_memcpy",
               wrapper="aten::to")
        for l in range(layers):
            for op, kn, kd, dims in LAYER:
                launch(op, dims, kn, kd, wrapper="aten::linear" if op == "aten::addmm" else None)
            if comm and l == layers - 1:
                launch("record_param_comms", [[1000000]], "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 200,
                       stream=COMM_STREAM, wait_for=STREAM)  # waits for the gradients (an event)
        if optimizer:
            o0 = st["t"]
            st["t"] += 2 * US
            launch("aten::_fused_adamw_", [[], [], [], []], "multi_tensor_apply_kernel<FusedAdam>", 30)
            st["t"] += 2 * US
            spans.append(Span("user_annotation", "Optimizer.step#AdamW.step", MAIN, o0, st["t"] - o0,
                              {"External id": 9 * 10**8 + it, "Record function id": 0, "Ev Idx": 0}))
        if sync:
            device_sync()
        st["t"] += 20 * US
        if profiler_steps:
            spans.append(Span("user_annotation", f"ProfilerStep#{it}", MAIN, s0, st["t"] - s0,
                              {"External id": 8 * 10**8 + it, "Record function id": 0, "Ev Idx": 0}))
        iters.append((s0, st["t"]))
    if outer_sync:
        device_sync()
    di = None if rank is None else {"backend": "nccl", "rank": rank, "world_size": 2, "pg_count": 1,
                                    "pg_config": [], "nccl_version": "2.28.9"}
    tr = RankTrace(rank=rank or 0, host_pid=MAIN, base_time_ns=1_790_000_000_000_000_000, device_properties=[H200],
                   host_threads={MAIN: "python"}, gpu_streams={0: [STREAM, COMM_STREAM] if comm else [STREAM]},
                   spans=spans, flows=flows, distributed_info=di)
    return tr, iters


def simlike(src: Path, dst: Path) -> Path:
    """A reference trace as a __torch_dispatch__-level simulated trace would look: no ProfilerStep
    or Optimizer annotations, no composite wrapper ops (aten::linear, aten::to, ...) and no autograd
    evaluate_function spans, other kernel names."""
    doc = _read(src)
    drop_ops = {"aten::linear", "aten::matmul", "aten::to", "aten::_to_copy"}
    keep = []
    for e in doc["traceEvents"]:
        name = e.get("name", "")
        if e.get("ph") == "X" and (name.startswith("ProfilerStep#") or name.startswith("Optimizer.")):
            continue
        if e.get("cat") == "cpu_op" and (name in drop_ops or name.startswith("autograd::engine")):
            continue
        if e.get("cat") == "kernel":
            e = dict(e, name=name.replace("nvjet_sm90", "sm90_xmma_gemm_bf16")
                     .replace("cudnn_generated_fort_native_sdpa", "flash_attn_kernel"))
        keep.append(e)
    doc["traceEvents"] = keep
    return _write_json(doc, dst)


# ------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def small_vs_b32():
    return diff_traces(ref("gpt_small"), ref("gpt_b32")).to_json()


def _cli(*args: str):
    return CliRunner().invoke(diff_cmd, [str(a) for a in args], catch_exceptions=False)


# ------------------------------------------------------------ tests

def test_diff_package_is_torch_free():
    code = ("import sys, tracing.diff, tracing.diff.report, tracing.diff.plot; "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'phantora_prof'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


@pytest.mark.parametrize("name", REFERENCES)
def test_self_diff_has_zero_differences(name):
    r = diff_traces(ref(name), ref(name))
    j = r.to_json()
    assert r.differences == 0
    assert all(v == 0 for k, v in j["delta"].items() if not isinstance(v, dict))
    assert all(v == 0 for v in j["delta"]["categories"].values())
    assert j["ops"] and all(m["match"] == "exact" and m["diff_gpu_time_ms"] == 0 for m in j["ops"])
    assert not j["only_base"] and not j["only_other"] and not j["warnings"]
    assert j["base"]["step_source"] == "ProfilerStep"


def test_self_diff_cli_says_no_differences():
    res = _cli(ref("gpt_small"), ref("gpt_small"))
    assert res.exit_code == 0, res.output
    assert "No differences" in res.output


@pytest.mark.parametrize("side,name", [("base", "gpt_small"), ("other", "gpt_b32")])
def test_figures_match_independent_computation(small_vs_b32, side, name):
    j = small_vs_b32[side]
    ind = independent(ref(name))
    assert j["steps"] == sorted(ind) and j["step_source"] == "ProfilerStep"
    assert j["step_time_ms"] == pytest.approx(_mean(s["wall"] for s in ind.values()), abs=1e-5)
    assert j["gpu_time_ms"] == pytest.approx(_mean(s["gpu"] for s in ind.values()), abs=1e-5)
    assert j["kernels"] == pytest.approx(_mean(s["kernels"] for s in ind.values()))
    c = j["categories"]
    assert c["gemm"] == pytest.approx(_mean(s["gemm"] for s in ind.values()), abs=1e-5)
    assert c["attention"] == pytest.approx(_mean(s["attention"] for s in ind.values()), abs=1e-5)
    assert c["normalization"] == pytest.approx(_mean(s["layer_norm"] for s in ind.values()), abs=1e-5)
    assert c["memset"] == pytest.approx(_mean(s["memset"] for s in ind.values()), abs=1e-5)
    assert sum(c.values()) == pytest.approx(j["gpu_time_ms"], abs=1e-4)
    for row, st in zip(j["per_step"], sorted(ind)):
        assert row["step"] == st
        assert row["step_time_ms"] == pytest.approx(ind[st]["wall"], abs=1e-5)
        assert row["gpu_time_ms"] == pytest.approx(ind[st]["gpu"], abs=1e-5)
    # one stream, no communication: busy == GPU time up to overlaps of < 1%
    assert j["gpu_busy_ms"] == pytest.approx(j["gpu_time_ms"], rel=1e-3)
    assert j["communication"] == {"total_ms": 0, "exposed_ms": 0, "overlapped_ms": 0}
    # the design notes' numbers: 22.9 ms of kernels in gpt_small, 78.3 in gpt_b32
    assert j["gpu_time_ms"] == pytest.approx({"gpt_small": 22.9, "gpt_b32": 78.3}[name], abs=0.1)


def test_small_vs_b32_ops(small_vs_b32):
    j = small_vs_b32
    # the same model at another batch size: every launching op pairs up, by name and shape or name only
    assert not j["only_base"] and not j["only_other"]
    assert {m["match"] for m in j["ops"]} == {"exact", "shape"}
    for m in j["ops"]:
        assert m["name"] == m["other_name"]
        assert m["base"]["count"] == m["other"]["count"]
        assert m["diff_gpu_time_ms"] == pytest.approx(m["other"]["gpu_time_ms"] - m["base"]["gpu_time_ms"], abs=1e-5)
        if m["match"] == "shape":  # batch 8 vs 32 in the shapes
            assert m["input_dims"] != m["other_input_dims"]
    for side in ("base", "other"):
        assert sum(m[side]["gpu_time_ms"] for m in j["ops"]) == pytest.approx(j[side]["gpu_time_ms"], abs=1e-3)
    diffs = [abs(m["diff_gpu_time_ms"]) for m in j["ops"]]
    assert diffs == sorted(diffs, reverse=True)  # largest differences first
    mm = [m for m in j["ops"] if m["name"] == "aten::mm" and m["input_dims"] == "[[8192,768],[768,50304]]"]
    assert mm and mm[0]["other_input_dims"] == "[[32768,768],[768,50304]]"


def test_reference_vs_simulated_style_trace(tmp_path):
    """A dispatch-level, annotation-free version of the reference: steps detected, ops still match."""
    base = ref("gpt_small")
    sim = simlike(base, tmp_path / "sim.json.gz")
    j = diff_traces(base, sim).to_json()
    o = j["other"]
    assert o["step_source"] == "detected" and o["n_steps"] == 2
    assert "_fused_adamw_" in o["step_detection"] or "_foreach_" in o["step_detection"]
    assert all(m["match"] == "exact" for m in j["ops"]) and not j["only_base"] and not j["only_other"]
    assert any("base has 3 steps" in w for w in j["warnings"])  # reported, not silent
    # detected step k runs from the end of one optimizer step to the next: ProfilerStep#(4+k)'s GPU work
    j2 = diff_traces(base, sim, steps="4-5/0-1").to_json()
    assert j2["delta"]["gpu_time_ms"] == pytest.approx(0, abs=1e-6)
    assert all(v == pytest.approx(0, abs=1e-6) for v in j2["delta"]["categories"].values())
    assert all(m["diff_gpu_time_ms"] == 0 for m in j2["ops"])
    ind = independent(base)
    assert o["gpu_time_ms"] == pytest.approx(_mean(ind[s]["gpu"] for s in (4, 5)), abs=1e-5)
    assert o["step_time_ms"] == pytest.approx(j["base"]["step_time_ms"], rel=0.1)


def test_step_detection_on_synthetic_trace(tmp_path):
    with_steps, iters = synth(iterations=6, profiler_steps=True)
    without, _ = synth(iterations=6, profiler_steps=False)
    a = write_kineto(with_steps, tmp_path / "steps.json")
    b = write_kineto(without, tmp_path / "nosteps.json.gz")
    j = diff_traces(a, b).to_json()
    o = j["other"]
    assert o["step_source"] == "detected"
    assert "cudaDeviceSynchronize" in o["step_detection"]
    assert o["n_steps"] == 5  # boundaries at the end of each synchronize: iterations 1..5
    per_iter_gpu = (4 * (50 + 10 + 8) + 30 + 4) / 1e3  # ms: layers x (addmm, gelu, layer_norm) + adamw + H2D
    assert o["gpu_time_ms"] == pytest.approx(per_iter_gpu, abs=1e-6)
    assert o["categories"]["gemm"] == pytest.approx(0.2, abs=1e-6)
    assert o["categories"]["optimizer"] == pytest.approx(0.03, abs=1e-6)
    assert o["categories"]["memcpy"] == pytest.approx(0.004, abs=1e-6)
    assert o["categories"]["normalization"] == pytest.approx(0.032, abs=1e-6)
    assert o["categories"]["elementwise"] == pytest.approx(0.04, abs=1e-6)
    # the same run with ProfilerStep#1-5 against detected steps 0-4: nothing differs
    j2 = diff_traces(a, b, steps="1-5/0-4").to_json()
    assert j2["differences"] == 0, j2["delta"]
    walls = [(e - s) / 1e6 for s, e in iters[1:]]
    assert [s["step_time_ms"] for s in j2["other"]["per_step"]] == pytest.approx(walls, abs=1e-6)


def test_step_detection_without_sync_or_optimizer(tmp_path):
    tr, iters = synth(iterations=5, profiler_steps=False, sync=False, optimizer=False, layers=3)
    p = write_kineto(tr, tmp_path / "t.json")
    j = diff_traces(p, p).to_json()["base"]
    # the outermost repeated block: one iteration, from each 'aten::to' (not one layer)
    assert j["step_source"] == "detected" and "'aten::to'" in j["step_detection"]
    assert j["n_steps"] == 4
    assert j["kernels"] == 1 + 3 * 3
    assert [s["step_time_ms"] for s in j["per_step"]] == pytest.approx(
        [(iters[k + 1][0] - iters[k][0]) / 1e6 for k in range(4)], abs=1e-6)


def test_step_detection_prefers_the_training_step(tmp_path):
    """A synchronize before and after the whole loop is no step boundary; the optimizer step is."""
    tr, _ = synth(iterations=6, profiler_steps=False, sync=False, outer_sync=True)
    p = write_kineto(tr, tmp_path / "t.json")
    j = diff_traces(p, p).to_json()["base"]
    assert "'Optimizer.step#AdamW.step'" in j["step_detection"] and j["n_steps"] == 5


def test_short_run_steps_are_the_optimizer_steps_not_a_longer_setup(tmp_path):
    """Three training steps after 150 parameters copied one by one with a synchronize each: the
    setup repeats 50x more often and spans longer than the steps, but the steps are the
    training iterations (the README's 4-rank DDP example reported 0.3 ms steps from 51)."""
    tr, iters = synth(iterations=3, profiler_steps=False, sync=True, param_copies=150)
    p = write_kineto(tr, tmp_path / "t.json")
    j = diff_traces(p, p).to_json()["base"]
    assert j["step_source"] == "detected" and j["n_steps"] == 2, j["step_detection"]
    assert "'Optimizer.step#AdamW.step'" in j["step_detection"] or "cudaDeviceSynchronize" in j["step_detection"]
    walls = [(iters[k + 1][1] - iters[k][1]) / 1e6 for k in range(2)]  # one iteration each
    assert [s["step_time_ms"] for s in j["per_step"]] == pytest.approx(walls, rel=0.05)


def test_no_repetition_is_one_step_with_warning(tmp_path):
    tr, _ = synth(iterations=1, profiler_steps=False, setup=0, layers=1)
    p = write_kineto(tr, tmp_path / "once.json")
    r = diff_traces(p, p)
    j = r.to_json()
    assert j["base"]["step_source"] == "whole trace" and j["base"]["n_steps"] == 1
    assert any("whole trace is one step" in w for w in j["warnings"])
    assert r.differences == 0


def test_communication_exposed_and_overlapped(tmp_path):
    tr, _ = synth(iterations=4, comm=True, scale=1.0)
    p = write_kineto(tr, tmp_path / "comm.json")
    j = diff_traces(p, p).to_json()["base"]
    # independent: per step, overlap of each nccl kernel with the compute kernels on the device
    ev = _read(p)["traceEvents"]
    kern = [e for e in ev if e.get("cat") == "kernel"]
    comm = [e for e in kern if "nccl" in e["name"]]
    comp = [e for e in kern if "nccl" not in e["name"]]
    per_step_over = []
    for c in comm:
        a, b = c["ts"], c["ts"] + c["dur"]
        per_step_over.append(sum(max(0.0, min(b, k["ts"] + k["dur"]) - max(a, k["ts"])) for k in comp) / 1e3)
    total = _mean(c["dur"] / 1e3 for c in comm)
    assert j["categories"]["communication"] == pytest.approx(total, abs=1e-6)
    assert j["communication"]["total_ms"] == pytest.approx(total, abs=1e-6)
    assert j["communication"]["overlapped_ms"] == pytest.approx(_mean(per_step_over), abs=1e-6)
    assert j["communication"]["exposed_ms"] == pytest.approx(total - _mean(per_step_over), abs=1e-6)
    assert 0 < j["communication"]["exposed_ms"] < total  # partly hidden behind the optimizer
    assert j["gpu_busy_ms"] < j["gpu_time_ms"]  # two streams overlap


# ------------------------------------------------------------ bad inputs and CLI

@pytest.mark.parametrize("kind,expect", [
    ("truncated", "truncated gzip"),
    ("notjson", "not valid JSON"),
    ("noevents", "no 'traceEvents'"),
    ("notkineto", "not a Kineto trace"),
])
def test_bad_input_gives_one_line_error(tmp_path, kind, expect):
    good = ref("streams")
    if kind == "truncated":
        bad = tmp_path / "cut.json.gz"
        data = good.read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    elif kind == "notjson":
        bad = tmp_path / "notes.json"
        bad.write_text("this is not { json\n")
    elif kind == "noevents":
        bad = tmp_path / "other.json"
        bad.write_text('{"schemaVersion": 1, "events": []}')
    else:
        bad = tmp_path / "chrome.json"
        bad.write_text('{"traceEvents": [{"ph": "X", "cat": "foo", "name": "x", "pid": 1, "tid": 1, '
                       '"ts": 1, "dur": 2}]}')
    for args in ((good, bad), (bad, good)):
        res = _cli(*args)
        assert res.exit_code == 1
        lines = res.output.strip().splitlines()
        assert len(lines) == 1, res.output
        assert str(bad) in lines[0] and expect in lines[0], lines[0]


def test_json_output_schema(tmp_path):
    out = tmp_path / "d.json"
    res = _cli(ref("gpt_small"), ref("gpt_b32"), "--json", out, "--quiet")
    assert res.exit_code == 0, res.output
    j = json.loads(out.read_text())
    assert j["schema"] == "phantora-prof.diff/1"
    for side in ("base", "other"):
        s = j[side]
        for k in ("step_time_ms", "gpu_time_ms", "gpu_busy_ms", "compute_busy_ms", "kernels", "n_steps"):
            assert isinstance(s[k], (int, float)), k
        assert set(s["categories"]) == set(CATEGORIES)
        assert set(s["communication"]) == {"total_ms", "exposed_ms", "overlapped_ms"}
        assert len(s["per_step"]) == s["n_steps"] == 3 and len(s["per_rank"]) == 1
    assert set(j["delta"]["categories"]) == set(CATEGORIES)
    assert len(j["steps"]) == 3 and j["steps"][0]["step_time_ms"].keys() == {"base", "other", "diff"}
    m = j["ops"][0]
    assert {"name", "input_dims", "other_name", "other_input_dims", "match", "category", "base", "other",
            "diff_count", "diff_gpu_time_ms", "diff_gpu_time_pct"} <= m.keys()
    assert m["base"].keys() == m["other"].keys() == {"count", "gpu_time_ms", "kernels"}
    assert isinstance(j["warnings"], list) and isinstance(j["differences"], int) and j["differences"] > 0


def test_report_lists_largest_differences_first():
    res = _cli(ref("gpt_small"), ref("gpt_b32"), "--top", "3")
    assert res.exit_code == 0, res.output
    out = res.output
    assert "Per step" in out and "Ops that launch GPU work (3 of 55 matched" in out
    assert out.index("gemm") < out.index("optimizer")  # categories sorted by |diff|
    assert "copy_" in out.split("Ops that launch")[1].splitlines()[3]  # the logits copy grows most


def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "d.png"
    res = _cli(ref("streams"), ref("streams"), "--plot", png, "--quiet")
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    res = _cli(ref("streams"), ref("streams"), "--plot", tmp_path / "d.png")
    assert res.exit_code == 1
    assert "pip install matplotlib" in res.output and len(res.output.strip().splitlines()) == 1


def test_steps_option(tmp_path):
    j = diff_traces(ref("streams"), ref("streams"), steps="3,5").to_json()
    assert j["base"]["steps"] == [3, 5] and j["other"]["steps"] == [3, 5]
    res = _cli(ref("streams"), ref("streams"), "--steps", "3-7")
    assert res.exit_code == 1
    assert "step(s) 6-7 not in the trace" in res.output and "ProfilerStep steps 3-5" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert parse_steps_spec("3-5/0,1") == ({3, 4, 5}, {0, 1})
    assert parse_steps_spec(None) == (None, None)
    with pytest.raises(ValueError, match="not a step number"):
        parse_steps_spec("x")


# ------------------------------------------------------------ per-rank directories

def _rank_copy(src: Path, dst: Path, rank: int, world: int = 2) -> Path:
    doc = _read(src)
    doc["distributedInfo"] = dict(doc["distributedInfo"], rank=rank, world_size=world)
    return _write_json(doc, dst)


@pytest.fixture(scope="module")
def rank_dirs(tmp_path_factory):
    src = ref("gpt_ddp1")
    d2 = tmp_path_factory.mktemp("two_ranks")
    _rank_copy(src, d2 / "rank0.pt.trace.json.gz", 0)
    _rank_copy(src, d2 / "rank1.pt.trace.json.gz", 1)
    d1 = tmp_path_factory.mktemp("one_rank")
    _rank_copy(src, d1 / "host_b.pt.trace.json", 1)
    return d2, d1


def test_rank_directories_pair_by_rank(rank_dirs):
    d2, d1 = rank_dirs
    r = diff_traces(d2, d2)
    j = r.to_json()
    assert r.differences == 0
    assert j["base"]["ranks"] == [0, 1] and [x["rank"] for x in j["base"]["per_rank"]] == [0, 1]
    single = diff_traces(ref("gpt_ddp1"), ref("gpt_ddp1")).to_json()["base"]
    assert j["base"]["gpu_time_ms"] == pytest.approx(single["gpu_time_ms"], abs=1e-6)
    # --rank picks one rank of each directory; a directory and a one-rank directory pair up by rank
    j1 = diff_traces(d2, d1, rank=1).to_json()
    assert j1["differences"] == 0 and j1["base"]["ranks"] == [1] and j1["other"]["ranks"] == [1]


def test_rank_mismatch_is_an_error(rank_dirs):
    d2, d1 = rank_dirs
    res = _cli(d2, d1)
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
    assert "ranks differ" in res.output and "ranks 0-1" in res.output and "--rank" in res.output
    res = _cli(d2, d1, "--rank", "0")
    assert res.exit_code == 1 and f"{d1} has no rank 0" in res.output
    res = _cli(d1, ref("gpt_ddp1"), "--rank", "1")  # the file is rank 0
    assert res.exit_code == 1 and "is rank 0" in res.output
    with pytest.raises(DiffError, match="appears twice"):
        _rank_copy(ref("gpt_ddp1"), d1 / "dup.json.gz", 1)
        try:
            diff_traces(d1, d1)
        finally:
            (d1 / "dup.json.gz").unlink()


def test_directory_file_without_rank_is_an_error(tmp_path):
    tr, _ = synth(iterations=3)
    write_kineto(tr, tmp_path / "a.json")
    write_kineto(tr, tmp_path / "b.json")
    with pytest.raises(DiffError, match="no distributedInfo.rank"):
        diff_traces(tmp_path, tmp_path)


# ------------------------------------------------------------ units

def test_categories():
    assert categorize("kernel", "nvjet_sm90_tst_192x128", "aten::mm", False) == "gemm"
    assert categorize("kernel", "sm80_xmma_gemm_bf16", "", False) == "gemm"
    assert categorize("kernel", "cutlass_80_tensorop_s1688gemm", "aten::addmm", False) == "gemm"
    assert categorize("kernel", "void cudnn::fusion::compute_dot_do_o", "aten::_cudnn_attention_backward",
                      False) == "attention"
    assert categorize("kernel", "flash_fwd_kernel", "aten::_flash_attention_forward", False) == "attention"
    assert categorize("kernel", "vectorized_layer_norm_kernel", "aten::native_layer_norm", False) == "normalization"
    assert categorize("kernel", "reduce_kernel<...>", "aten::sum", False) == "reduction"
    assert categorize("kernel", "cunn_SoftMaxForward", "aten::_log_softmax", False) == "reduction"
    assert categorize("kernel", "multi_tensor_apply_kernel", "aten::_fused_adamw_", False) == "optimizer"
    assert categorize("kernel", "vectorized_elementwise_kernel", "aten::mul_", True) == "optimizer"
    assert categorize("kernel", "ncclDevKernel_AllReduce_Sum", "record_param_comms", False) == "communication"
    assert categorize("gpu_memcpy", "Memcpy DtoD", "aten::copy_", False) == "memcpy"
    assert categorize("gpu_memset", "Memset (Device)", "aten::mm", False) == "memset"
    assert categorize("kernel", "direct_copy_kernel_cuda", "aten::copy_", False) == "elementwise"
    assert categorize("kernel", "reduce_kernel<...>", "aten::sum", False) == "reduction"
    assert categorize("kernel", "splitKreduce_kernel", "aten::mm", False) == "gemm"  # the op wins


def _row(name, dims, cat, ms, order):
    return OpRow(name, dims, cat, 1.0, ms, 1.0, order)


def test_match_ops_phases():
    base = {k[:2]: _row(*k) for k in [
        ("aten::mm", "[[8,4],[4,4]]", "gemm", 1.0, 0),
        ("aten::mm", "[[8,4],[4,8]]", "gemm", 2.0, 1),
        ("aten::_cudnn_attention_forward", "[[8,12,64,64],[8,12,64,64]]", "attention", 3.0, 2),
        ("aten::copy_", "[[8,4],[8,4]]", "elementwise", 0.5, 3),
        ("aten::foo", "[[1]]", "reduction", 0.1, 4),
        ("aten::only_base", "[[2]]", "normalization", 0.2, 5),
    ]}
    other = {k[:2]: _row(*k) for k in [
        ("aten::mm", "[[8,4],[4,4]]", "gemm", 1.5, 0),  # exact
        ("aten::mm", "[[32,4],[4,8]]", "gemm", 2.0, 1),  # shape
        ("aten::_scaled_dot_product_flash_attention", "[[8,12,64,64],[8,12,64,64],[]]", "attention", 2.0, 2),
        ("aten::_to_copy", "[[16,4]]", "elementwise", 0.5, 3),  # category
        ("aten::bar", "[[1]]", "reduction", 0.1, 4),  # category+shape
        ("aten::only_other", "[[3]]", "optimizer", 0.3, 5),
    ]}
    matches, only_b, only_o = match_ops(base, other)
    got = sorted((m.base.name, m.other.name, m.other.dims, m.match) for m in matches)
    assert got == sorted([
        ("aten::mm", "aten::mm", "[[8,4],[4,4]]", "exact"),
        ("aten::mm", "aten::mm", "[[32,4],[4,8]]", "shape"),
        ("aten::_cudnn_attention_forward", "aten::_scaled_dot_product_flash_attention",
         "[[8,12,64,64],[8,12,64,64],[]]", "category+shape"),
        ("aten::copy_", "aten::_to_copy", "[[16,4]]", "category"),
        ("aten::foo", "aten::bar", "[[1]]", "category+shape"),
    ])
    assert [r.name for r in only_b] == ["aten::only_base"] and [r.name for r in only_o] == ["aten::only_other"]
    assert matches[0].base.name == "aten::_cudnn_attention_forward"  # largest |diff| first (-1.0 ms)


# ------------------------------------------------------------ HTA cross-check (optional)

def test_figures_agree_with_hta(tmp_path, monkeypatch):
    """HTA's kernel-type sums and temporal breakdown over the iterations it keeps agree within 1%.

    HTA rounds ns-precision timestamps to whole microseconds unless HTA_DISABLE_NS_ROUNDING=1,
    which makes sub-microsecond memsets negative; the comparison turns that off.
    """
    pytest.importorskip("hta")
    import logging

    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    from hta.trace_analysis import TraceAnalysis
    from hta.utils.utils import get_kernel_type, merge_kernel_intervals

    src = ref("gpt_small")
    d = tmp_path / "hta"
    d.mkdir()
    (d / "rank0.pt.trace.json.gz").write_bytes(src.read_bytes())
    logging.disable(logging.WARNING)
    try:
        t = TraceAnalysis(trace_dir=str(d))
    finally:
        logging.disable(logging.NOTSET)
    sym = t.t.symbol_table.get_sym_table()
    df = t.t.get_trace(0)
    g = df[df["stream"].ne(-1)].copy()
    counts = g["iteration"].value_counts()
    kept = sorted(int(i) for i, c in counts.items() if c >= 0.5 * counts.max())
    g = g[g["iteration"].isin(kept)].copy()
    g["kt"] = g["name"].map(lambda x: get_kernel_type(sym[x]))
    j = diff_traces(src, src, steps=",".join(map(str, kept))).to_json()["base"]
    n = len(kept)
    c = j["categories"]
    ours_compute = (j["gpu_time_ms"] - c["communication"] - c["memcpy"] - c["memset"]) * n * 1e3
    assert ours_compute == pytest.approx(g[g["kt"].eq("COMPUTATION")]["dur"].sum(), rel=0.01)
    assert (c["memcpy"] + c["memset"]) * n * 1e3 == pytest.approx(g[g["kt"].eq("MEMORY")]["dur"].sum(), rel=0.01)
    busy = merge_kernel_intervals(g.copy())
    assert j["gpu_busy_ms"] * n * 1e3 == pytest.approx((busy["end"] - busy["ts"]).sum(), rel=0.01)
    comp = merge_kernel_intervals(g[g["kt"].eq("COMPUTATION")].copy())
    assert j["compute_busy_ms"] * n * 1e3 == pytest.approx((comp["end"] - comp["ts"]).sum(), rel=0.01)


# ------------------------------------------------------------ a real simulated trace (slow)

@pytest.mark.slow
def test_reference_vs_simulated_run(tmp_path):
    """phantora-prof runs the reference workload; its whole-run trace (no ProfilerStep) diffs
    against the H200 reference: steps detected, figures consistent with the raw trace."""
    workload = REFERENCE.parent / "workloads" / "gpt.py"
    base = ref("gpt_small")
    if not workload.exists():
        pytest.skip(f"{workload} not available")
    run = run_cli(["--out", str(tmp_path / "sim"), "python", str(workload), "--steps", "6"], tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    sim = tmp_path / "sim" / "rank0.pt.trace.json.gz"
    out = tmp_path / "d.json"
    res = _cli(base, sim, "--json", out, "--quiet")
    assert res.exit_code == 0, res.output
    j = json.loads(out.read_text())
    o = j["other"]
    assert o["step_source"] == "detected" and o["n_steps"] == 5
    # the script's own step times (perf_counter around a synchronized step) for steps 1..5
    printed = [float(line.split()[3]) for line in run.stdout.splitlines() if line.startswith("step ")]
    assert o["step_time_ms"] == pytest.approx(_mean(printed[1:]), rel=0.05)
    # every GPU activity of the trace is in a step or counted outside the steps
    ev = _read(sim)["traceEvents"]
    total = sum(e["dur"] for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")) / 1e3
    outside = o["per_rank"][0]["gpu_time_outside_steps_ms"]
    assert o["gpu_time_ms"] * o["n_steps"] + outside == pytest.approx(total, abs=1e-3)
    assert sum(o["categories"].values()) == pytest.approx(o["gpu_time_ms"], abs=1e-4)
    # the same model: most of the GPU time pairs up op by op
    matched = sum(m["other"]["gpu_time_ms"] for m in j["ops"])
    assert matched > 0.9 * o["gpu_time_ms"]


# ------------------------------------------------------------ benchmark (deselected by default)

@pytest.mark.benchmark
def test_benchmark_200mb_trace(tmp_path, benchmark):
    """Diff a ~200 MB synthetic trace against itself; records wall time and peak RSS."""
    tr, _ = synth(iterations=2500, layers=20, profiler_steps=True)
    big = write_kineto(tr, tmp_path / "big.json")
    del tr
    size_mb = big.stat().st_size / 1e6
    code = ("import resource, sys, time; from tracing.diff import diff_traces; t = time.perf_counter(); "
            "r = diff_traces(sys.argv[1], sys.argv[1]); dt = time.perf_counter() - t; "
            "print(dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, r.differences)")

    def run():
        out = subprocess.run([sys.executable, "-c", code, str(big)], check=True, capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parents[1]).stdout.split()
        return float(out[0]), int(out[1]), int(out[2])

    seconds, rss_kb, differences = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update({"trace_mb": round(size_mb, 1), "diff_seconds_both_sides": round(seconds, 2),
                                 "peak_rss_mb": round(rss_kb / 1024)})
    assert differences == 0
    assert size_mb > 150


def test_work_with_neither_launch_nor_op_is_in_no_step(tmp_path):
    """A real profile can hold GPU work whose launch and op it does not (the step after the last,
    recorded on the GPU after the profiler stopped recording the host): its start time says
    nothing of its step, so it counts outside the steps, not in the step its start falls in (HF
    LLaMA's H200 profile: 0.74 ms of such optimizer kernels per step had made the real optimizer
    22% longer than its launched kernels)."""
    src = ref("gpt_small")
    doc = _read(src)
    steps = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")]
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    step = steps[0]
    orphan = dict(kernel, ts=step["ts"] + step["dur"] / 2, dur=500.0,
                  args=dict(kernel["args"], correlation=987654321, **{"External id": 987654321}))
    doc["traceEvents"].append(orphan)
    with_orphan = _write_json(doc, tmp_path / "orphan.json.gz")
    base = diff_traces(src, src).to_json()["base"]
    got = diff_traces(src, with_orphan).to_json()["other"]
    assert got["gpu_time_ms"] == pytest.approx(base["gpu_time_ms"], abs=1e-6)
    outside = got["per_rank"][0]["gpu_time_outside_steps_ms"] - base["per_rank"][0]["gpu_time_outside_steps_ms"]
    assert outside == pytest.approx(0.5, abs=1e-6)


# ------------------------------------------------------------ host figures (tracing/diff/host.py)

def _host_trace(path: Path, python_us: float, step_us: float = 1000.0) -> Path:
    """Two ProfilerStep spans on the script thread (tid 1): per step an op of 100 us with a
    child, `python_us` of nothing, an op of 50 us; autograd's thread (tid 2) runs one 300 us
    node per step. All times in us."""
    ev = []
    for k in range(2):
        t0 = k * step_us
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1,
                   "ts": t0, "dur": step_us})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": t0 + 10, "dur": 100})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": t0 + 20, "dur": 50})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
                   "ts": t0 + 110 + python_us, "dur": 50})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: AddmmBackward0",
                   "pid": 1, "tid": 2, "ts": t0 + 400, "dur": 300})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1,
                   "ts": t0 + 800, "dur": 100, "args": {"correlation": 10 + k}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
                   "ts": t0 + 30, "dur": 5, "args": {"correlation": 20 + k}})  # inside an op: busy, not a wait
    return _write_json({"traceEvents": ev}, path)


def test_host_figures_split_a_step_into_ops_outside_ops_and_other_threads(tmp_path):
    j = diff_traces(_host_trace(tmp_path / "a.json", 200), _host_trace(tmp_path / "b.json", 500)).to_json()
    hb, ho = j["base"]["host"], j["other"]["host"]
    assert hb == {"script_busy_ms": 0.15, "script_sync_ms": 0.1, "script_outside_ops_ms": 0.75,
                  "script_outside_beside_others_ms": 0.3,  # [360, 800) us meets autograd's [400, 700)
                  "other_threads_busy_ms": 0.3, "script_ops": 2, "other_threads_ops": 1}
    assert ho["script_busy_ms"] == 0.15 and ho["other_threads_busy_ms"] == 0.3
    # the same busy times; the Python moved inside the step, so the second op (610-660 us) now
    # runs beside autograd's node: 250 us of the script thread's gaps overlap it, not 300
    assert j["delta"]["host"] == {**{k: 0 for k in hb}, "script_outside_beside_others_ms": -0.05}
    rows = {(r["thread"], r["name"]): r for r in j["host_ops"]}
    assert rows[("script", "aten::linear")]["base"] == {"count": 1, "time_ms": 0.1}  # the child is not counted
    assert ("script", "aten::addmm") not in rows
    assert rows[("other threads", "autograd::engine::evaluate_function: AddmmBackward0")]["other"]["time_ms"] == 0.3


def test_host_figures_show_a_longer_host_step(tmp_path):
    fast = _host_trace(tmp_path / "fast.json", 200)
    slow = _host_trace(tmp_path / "slow.json", 200, step_us=2000.0)
    j = diff_traces(fast, slow).to_json()
    assert j["delta"]["host"]["script_outside_ops_ms"] == pytest.approx(1.0)
    assert j["delta"]["host"]["script_busy_ms"] == 0
    assert j["differences"] >= 2  # the step time and the time outside ops


def test_host_figures_match_an_independent_count_on_a_reference_trace():
    path = ref("gpt_small")
    ev = [e for e in _read(path)["traceEvents"] if e.get("ph") == "X"]
    step = next(e for e in ev if e.get("cat") == "user_annotation" and e["name"] == "ProfilerStep#4")
    a, b = step["ts"], step["ts"] + step["dur"]
    host = [e for e in ev if e.get("cat") in ("cpu_op", "user_annotation") and e is not step
            and not e["name"].startswith("ProfilerStep#")]
    per_tid: dict = {}
    for e in sorted(host, key=lambda e: (e["ts"], -e["dur"])):
        per_tid.setdefault(e["tid"], []).append(e)
    busy: dict = {}
    count: dict = {}
    for tid, es in per_tid.items():  # outermost events: not inside an earlier, longer one of the thread
        end, tot, n = None, 0.0, 0
        for e in es:
            if end is not None and e["ts"] + e["dur"] <= end:
                continue
            if a <= e["ts"] < b:
                tot += min(e["ts"] + e["dur"], b) - e["ts"]
                n += 1
            end = e["ts"] + e["dur"]
        busy[tid], count[tid] = tot / 1e3, n
    j = diff_traces(path, path, steps="4").to_json()["base"]["host"]
    assert j["script_busy_ms"] == pytest.approx(busy[step["tid"]], abs=1e-3)
    assert j["script_ops"] == count[step["tid"]]
    others = [t for t in busy if t != step["tid"]]
    assert j["other_threads_busy_ms"] == pytest.approx(sum(busy[t] for t in others), abs=1e-3)
    assert j["other_threads_ops"] == sum(count[t] for t in others)
    syncs, end = 0.0, None  # the script thread's synchronize calls outside any host event
    inside = sorted((e["ts"], e["ts"] + e["dur"]) for e in per_tid[step["tid"]])
    for e in sorted((e for e in ev if e.get("cat") == "cuda_runtime" and e["tid"] == step["tid"]
                     and e["name"].endswith("Synchronize") and a <= e["ts"] < b), key=lambda e: e["ts"]):
        if not any(s <= e["ts"] and e["ts"] + e["dur"] <= t for s, t in inside):
            syncs += min(e["ts"] + e["dur"], b) - e["ts"]
    assert j["script_sync_ms"] == pytest.approx(syncs / 1e3, abs=1e-3)
    # the script thread's gaps (neither in an outermost event nor in such a synchronize) that
    # another thread's outermost events cover: a sweep over +1 / -1 boundaries of both sets
    script_es = [(e["ts"], e["ts"] + e["dur"]) for e in per_tid[step["tid"]]]
    script_es += [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "cuda_runtime"
                  and e["tid"] == step["tid"] and e["name"].endswith("Synchronize") and a <= e["ts"] < b
                  and not any(s <= e["ts"] and e["ts"] + e["dur"] <= t for s, t in inside)]
    other_es = [(e["ts"], e["ts"] + e["dur"]) for t in others for e in per_tid[t] if a <= e["ts"] < b]
    marks = sorted([(max(s, a), 0, 1) for s, t in script_es if t > a and s < b]
                   + [(min(t, b), 0, -1) for s, t in script_es if t > a and s < b]
                   + [(s, 1, 1) for s, t in other_es] + [(min(t, b), 1, -1) for s, t in other_es])
    depth, beside, prev = [0, 0], 0.0, a
    for t, which, d in marks:
        if depth[0] == 0 and depth[1] > 0:
            beside += t - prev
        depth[which] += d
        prev = t
    assert j["script_outside_beside_others_ms"] == pytest.approx(beside / 1e3, abs=1e-3)
    assert j["script_outside_ops_ms"] == pytest.approx(step["dur"] / 1e3 - busy[step["tid"]] - syncs / 1e3, abs=1e-3)


def test_traces_of_different_gpus_are_said_to_differ(tmp_path):
    """A real H100 profile against a simulated H200 run differs by the hardware before anything
    else: the diff says so (deviceProperties), and says nothing when both name one GPU."""
    run, _ = synth(iterations=4)
    path = write_kineto(run, tmp_path / "a.json")
    doc = _read(path)
    docs = {}
    for name, device in (("h100", "NVIDIA H100 80GB HBM3"), ("h200", "NVIDIA H200"), ("h200b", "NVIDIA H200")):
        docs[name] = _write_json({**doc, "deviceProperties": [{"id": 0, "name": device}]}, tmp_path / f"{name}.json")
    warned = [w for w in diff_traces(docs["h100"], docs["h200"]).warnings if "different GPUs" in w]
    assert warned and "NVIDIA H100 80GB HBM3" in warned[0] and "--gpu" in warned[0]
    assert not [w for w in diff_traces(docs["h200"], docs["h200b"]).warnings if "different GPUs" in w]
    bare = _write_json({k: v for k, v in doc.items() if k != "deviceProperties"}, tmp_path / "bare.json")
    assert not [w for w in diff_traces(bare, docs["h100"]).warnings if "different GPUs" in w]  # one names none
