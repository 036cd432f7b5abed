"""calibrate/trace_ops.py: which trace op a kernel belongs to (the op the simulator captures)."""
import pytest

from phantora_prof.calibrate import trace_ops as X


def _op(name, ts, dur, types, ext, dims=None):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"External id": ext, "Input type": types, "Input Dims": dims or [[] for _ in types]}}


def _launch(ts, ext, corr, kernel):
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 1,
             "args": {"External id": ext, "correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": ts + 5, "dur": 10,
             "args": {"correlation": corr, "stream": 7}}]


def _autocast_addmm_trace():
    """HF GPT-2's Conv1D under bf16 autocast: `torch.addmm(fp32 bias, bf16 x, fp32 weight)` enters
    autocast's addmm, which casts the fp32 operands and calls addmm again on bf16; and
    `x * 0.5` (mul.Scalar wrapping its scalar for mul.Tensor, same dtype)."""
    ev = [_op("aten::addmm", 0, 100, ["float", "c10::BFloat16", "float", "Scalar", "Scalar"], 1,
              [[768], [8192, 768], [768, 768], [], []]),
          _op("aten::_to_copy", 2, 10, ["float", "", ""], 2, [[768], [], []]),
          _op("aten::_to_copy", 14, 10, ["float", "", ""], 3, [[768, 768], [], []]),
          _op("aten::addmm", 30, 60, ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"], 4,
              [[768], [8192, 768], [768, 768], [], []]),
          _op("aten::mul", 200, 40, ["float", "Scalar"], 5, [[8, 3072], []]),
          _op("aten::mul", 205, 30, ["float", "double"], 6, [[8, 3072], []])]
    ev += _launch(4, 2, 10, "copy_kernel_bias") + _launch(16, 3, 11, "copy_kernel_weight")
    ev += _launch(40, 4, 12, "nvjet_gemm") + _launch(210, 6, 13, "mul_kernel")
    return ev


def test_autocast_wrapper_gives_its_kernels_to_the_casts_and_the_inner_call():
    ops = X.dispatch_ops(_autocast_addmm_trace())
    got = [(d.name, tuple(d.types[:3]), [a.name for a in d.acts]) for d in ops]
    assert got == [
        ("aten::_to_copy", ("float", "", ""), ["copy_kernel_bias"]),
        ("aten::_to_copy", ("float", "", ""), ["copy_kernel_weight"]),
        ("aten::addmm", ("c10::BFloat16",) * 3, ["nvjet_gemm"]),
        # the scalar's own redispatch stays one op, as the simulator captures mul.Scalar
        ("aten::mul", ("float", "Scalar"), ["mul_kernel"]),
    ]


def test_autocast_wrappers_are_only_dtype_changing_redispatches():
    ev = [e for e in _autocast_addmm_trace() if e["cat"] == "cpu_op"]
    parent = X.nesting(ev)
    wrappers = X.autocast_wrappers(ev, parent)
    assert [e["args"]["External id"] for e in ev if id(e) in wrappers] == [1]


def test_tensor_subclass_op_gives_its_kernels_to_the_local_op():
    """DTensor's `aten::mm` on the global shapes, a `PythonSubclass` range, then the shard's
    `aten::mm` that launched the GEMM: the shard's call is what the simulator captures and prices."""
    ev = [_op("aten::mm", 0, 100, ["c10::BFloat16"] * 2, 1, [[8192, 1024], [1024, 4096]]),
          {"ph": "X", "cat": "cpu_op", "name": "PythonSubclass", "pid": 1, "tid": 1, "ts": 5, "dur": 90, "args": {}},
          _op("aten::mm", 50, 30, ["c10::BFloat16"] * 2, 2, [[8192, 1024], [1024, 2048]])]
    ev += _launch(60, 2, 20, "nvjet_gemm")
    ops = X.dispatch_ops(ev)
    assert [(d.name, d.dims, [a.name for a in d.acts]) for d in ops] == [
        ("aten::mm", [[8192, 1024], [1024, 2048]], ["nvjet_gemm"])]


def test_cost_report_takes_a_wrapped_number_for_a_cpu_scalar():
    """`x * 0.5` reaches mul.Tensor with a 0-dim double the profiler lists like any tensor; the
    simulator captures it as the CPU scalar it is (a CUDA operand would price a broadcast kernel)."""
    from phantora_prof.calibrate.cost_report import to_opcall
    from phantora_prof.protocol import CPU_DEVICE
    d = X.DispatchOp("aten::mul", 1, 0.0, [[8, 3072], []], ["float", "double"], [[3072, 1], []], ["", ""])
    x, s = to_opcall(d).args
    assert x.device == 0 and s.device == CPU_DEVICE and s.dtype == "float64"


def test_cost_report_leaves_out_what_it_cannot_compare(tmp_path):
    """A trace that is not a reference GPT run: a foreach op whose lists the profiler did not
    record is not priced with GPT's parameters, and an op that ran nothing on the GPU (a CPU step
    counter's `.item()`) is not compared; both are said apart from the total."""
    import gzip
    import json
    from phantora_prof.calibrate import cost_report as C
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000,
           "args": {}},
          _op("aten::_foreach_mul_", 10, 50, ["TensorList", "Scalar"], 1, [[], []]),
          _op("aten::_local_scalar_dense", 100, 5, ["float"], 2, [[]]),
          _op("aten::relu", 200, 20, ["float"], 3, [[1024, 1024]])]
    ev += _launch(20, 1, 30, "multi_tensor_apply_kernel") + _launch(210, 3, 31, "relu_kernel")
    path = tmp_path / "t.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": ev}, f)
    per = C.calibrate(str(path), "h200")
    assert per[C.UNPRICED] == (10.0, 0.0, 0.0) and "optimizer" not in per
    assert per[C.NO_GPU_WORK][2] > 0
    assert per["elementwise"][0] == 10.0
    text = C.report(str(path), "h200")
    assert "not priced: 10.0 us" in text and "not compared:" in text


def _relu_trace(path, device_name=None):
    import gzip
    import json
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000,
           "args": {}}, _op("aten::relu", 200, 20, ["float"], 3, [[4096, 4096]])]
    ev += _launch(210, 3, 31, "relu_kernel")
    doc = {"traceEvents": ev}
    if device_name:
        doc = {"deviceProperties": [{"id": 0, "name": device_name}], **doc}
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return str(path)


def test_cost_report_prices_a_trace_on_the_gpu_it_ran_on(tmp_path):
    """A profile names its GPU (deviceProperties): the report prices it there unless told,
    refuses another GPU (an H100 profile priced on the H200's bandwidth came out 20-30% fast,
    silently), and asks for --gpu when the trace names none."""
    from click.testing import CliRunner
    from phantora_prof.calibrate import cost_report as C
    from phantora_prof.cli import cli
    from phantora_prof.errors import ConfigError
    h100 = _relu_trace(tmp_path / "h100.pt.trace.json.gz", "NVIDIA H100 80GB HBM3")
    bare = _relu_trace(tmp_path / "bare.pt.trace.json.gz")
    assert C.report(h100).startswith(f"{h100} on h100:")
    on_h100 = C.calibrate(h100)["elementwise"][2]
    assert on_h100 > C.calibrate(bare, "h200")["elementwise"][2]  # 3.35 TB/s against 4.8
    with pytest.raises(ConfigError, match="ran on h100, not h200"):
        C.calibrate(h100, "h200")
    with pytest.raises(ConfigError, match="name no GPU"):
        C.calibrate(bare)
    r = CliRunner().invoke(cli, ["calibrate", "cost-report", "--gpu", "h200", h100])
    assert r.exit_code == 2 and "--gpu h100" in r.output


def test_an_overload_around_autocast_wrapper_wraps_too():
    """F.interpolate under autocast: `upsample_bilinear2d.vec` (bf16) around autocast's
    `upsample_bilinear2d` (bf16, same tensors) around the cast and the fp32 call. The cast's
    kernel is the cast's and the upsampling kernel the fp32 call's, as the simulator captures them."""
    dims = [[16, 256, 64, 64], [], [], []]
    ev = [_op("aten::upsample_bilinear2d", 0, 100, ["c10::BFloat16", "ScalarList", "Scalar", ""], 1, dims),
          _op("aten::upsample_bilinear2d", 2, 96, ["c10::BFloat16", "ScalarList", "Scalar", "", ""], 2, dims + [[]]),
          _op("aten::_to_copy", 4, 20, ["c10::BFloat16", "Scalar", ""], 3, [[16, 256, 64, 64], [], []]),
          _op("aten::upsample_bilinear2d", 30, 60, ["float", "ScalarList", "Scalar", "", ""], 4, dims + [[]])]
    ev += _launch(6, 3, 40, "direct_copy_kernel") + _launch(40, 4, 41, "upsample_bilinear2d_nhwc_out_frame")
    got = [(d.name, d.types[0], [a.name for a in d.acts]) for d in X.dispatch_ops(ev)]
    assert got == [("aten::_to_copy", "c10::BFloat16", ["direct_copy_kernel"]),
                   ("aten::upsample_bilinear2d", "float", ["upsample_bilinear2d_nhwc_out_frame"])]


def test_error_band_takes_only_its_gpus_traces(tmp_path):
    """`calibrate errors` measures the H200's error band: an H100 profile among its traces would
    count the GPUs' difference as the model's error; refused, with the GPU named."""
    from phantora_prof.calibrate import errors
    from phantora_prof.errors import ConfigError
    h100 = _relu_trace(tmp_path / "h100.pt.trace.json.gz", "NVIDIA H100 80GB HBM3")
    with pytest.raises(ConfigError, match="ran on h100"):
        errors.per_source(h100)
    assert errors.per_source(_relu_trace(tmp_path / "h200.pt.trace.json.gz", "NVIDIA H200"))


def test_grouped_mm_fallback_is_priced_as_its_mms():
    """fp32 `_grouped_mm` runs ATen's fallback, one `mm` per group, which the simulator captures
    as those parts: the report's dispatch ops are the mms; bf16 runs one kernel, priced whole."""
    def trace(dtype, children):
        ev = [_op("aten::_grouped_mm", 0, 100, [dtype, dtype, "int", "", ""], 1,
                  [[1024, 512], [4, 512, 256], [4], [], []])]
        if children:
            for g in range(2):
                ev.append(_op("aten::mm", 10 + 40 * g, 30, [dtype, dtype], 2 + g, [[256, 512], [512, 256]]))
                ev += _launch(15 + 40 * g, 2 + g, 20 + g, "sm80_xmma_gemm_f32f32")
        else:
            ev += _launch(5, 1, 20, "cutlass_grouped_gemm")
        return ev
    fp32 = [(d.name, [a.name for a in d.acts]) for d in X.dispatch_ops(trace("float", True))]
    assert fp32 == [("aten::mm", ["sm80_xmma_gemm_f32f32"])] * 2
    bf16 = [(d.name, [a.name for a in d.acts]) for d in X.dispatch_ops(trace("c10::BFloat16", False))]
    assert bf16 == [("aten::_grouped_mm", ["cutlass_grouped_gemm"])]


def test_index_put_list_is_rebuilt_from_the_shapes():
    """The profiler records index_put's index list as empty; the report rebuilds one int64 index
    over the dim the values' shape replaces (the last that fits), so the accumulate path is priced
    as the simulator prices it (it has the real list) rather than as a plain op."""
    from phantora_prof.calibrate.cost_report import to_opcall

    def args(x, v):
        d = X.DispatchOp("aten::_index_put_impl_", 1, 0.0, [x, [], v, [], []], ["float", "", "float", "Scalar", "Scalar"],
                         [[], [], [], [], []], ["", "", "", "True", "True"])
        return to_opcall(d, gpt_lists=False).args[1]
    (idx,) = args([169, 12], [2401, 12])  # Swin: table[index.view(-1)]
    assert idx.shape == (2401,) and idx.dtype == "int64"
    none, idx = args([4, 196], [4, 196, 196])  # LeViT: biases[:, idx]
    assert none is None and idx.shape == (196, 196)
    assert args([4, 196], [7, 7]) is None  # nothing fits: left unrecorded
