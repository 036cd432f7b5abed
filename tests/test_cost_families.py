"""The in-training family curves (phantora_prof/cost/families.py): class keys, interpolation
features and the ops costed as their parts, against what the H200 measured.

Numbers quoted here come from the sweep in cost/data/h200_families.json.gz and from the
real ConvNeXt-T / LSTM profiles of tools/holdout/real_h200/zoo/ (the reason each case exists).
"""
from __future__ import annotations

import gzip
import json

import pytest

from phantora_prof.cost import estimate
from phantora_prof.cost import families as F
from phantora_prof.cost import ops as O
from phantora_prof.cost.gpus import get_gpu
from opcalls import T, call, total


def CL(n, c, h, w, dtype="bfloat16"):
    """A channels-last 4-D tensor argument."""
    return T((n, c, h, w), dtype, stride=(h * w * c, 1, w * c, c))


def _points(op, key):
    with gzip.open(F.DATA, "rt") as f:
        return json.load(f)["ops"][op][key]


def _dw_backward(bias: bool):
    x, g = CL(64, 96, 56, 56), CL(64, 96, 56, 56)
    w = T((96, 1, 7, 7), "bfloat16", stride=(49, 1, 7, 1))
    outs = [x, w] + ([T((96,), "bfloat16")] if bias else [])
    return call("aten::convolution_backward", [g, x, w, [96] if bias else None, [1, 1], [3, 3], [1, 1], False,
                                               [0, 0], 96, [True, True, bias]], outs)


def test_reduction_kind_follows_memory_order_not_dim_numbers():
    # a channels-last map reduced over N, H, W: C is innermost, so the outputs sit side by side
    g = CL(64, 96, 56, 56)
    assert F.class_key(call("aten::sum", [g, [0, 2, 3], False], [T((96,), "bfloat16")]), "sum") == \
        "bfloat16|perm|outer"
    assert F.class_key(call("aten::sum", [T((64, 96, 56, 56)), [0, 2, 3], False], [T((96,))]), "sum") == \
        "float32|dense|mixed"
    m = T((4096, 1024))
    assert F.class_key(call("aten::sum", [m, [0], False], [T((1024,))]), "sum").endswith("|outer")
    assert F.class_key(call("aten::sum", [m, [1], False], [T((4096,))]), "sum").endswith("|inner")
    assert F.class_key(call("aten::sum", [m], [T(())]), "sum").endswith("|all")
    op = call("aten::sum", [g, [0, 2, 3], False], [T((96,), "bfloat16")])
    assert F.shape_features(op, "sum") == (96, 64 * 56 * 56)  # (outputs, elements per output)


def test_a_reduction_along_the_fastest_dim_in_memory_reads_rows_whatever_its_dim_numbers():
    """CaiT's talking-heads bias gradient: a [B, N, N, heads] view of a [B, heads, N, N] tensor
    summed over B, N, N. Logically the kept dim is the last, but in memory each head's N x N are
    contiguous: TensorIterator reduces along the fastest dim (`reduction_on_fastest_striding_dimension`),
    4 outputs each reading contiguous runs. Priced as 4 strided columns it took 1.4 ms (10 MB
    read); as rows, the time of reading it once. A channels-last bias gradient (the kept C
    fastest in memory) stays a column sum."""
    from phantora_prof.cost import ops as O2

    talking = T((32, 196, 196, 4), "bfloat16", stride=(153664, 196, 1, 38416))
    assert O2._reduces_fastest_dim(talking, {0, 1, 2})
    assert not O2._reduces_fastest_dim(CL(128, 64, 56, 56), {0, 2, 3})
    assert O2._reduces_fastest_dim(CL(128, 64, 56, 56), {1})  # a channel mean of a channels-last map
    assert O2._reduces_fastest_dim(T((8, 1, 16), stride=(0, 0, 1)), {2})  # broadcast dims do not count
    ks = estimate(call("aten::sum", [talking, [0, 1, 2], True], [T((1, 1, 1, 4), "bfloat16")]), "h200")
    assert 2_000 < total(ks) < 40_000, total(ks)
    rows = estimate(call("aten::sum", [T((4, 32 * 196 * 196), "bfloat16"), [1], True], [T((4, 1), "bfloat16")]), "h200")
    assert total(ks) < 3 * total(rows)


def test_a_transposed_views_reduction_is_priced_as_its_contiguous_equivalent():
    """A per-head RMSNorm's weight gradient (HF Qwen3's q/k norms): [B, S, H, D] viewed from
    [B, H, S, D], summed over B, S, H. TensorIterator coalesces it into the [B*S*H, D] column sum
    of the contiguous tensor; the H200 ran it in 138 us (blind set 7's profile,
    tools/holdout/real_h200/session25/); priced in the channels-last class it came out 622 us.
    A channels-last bias gradient (logically inner, outer in memory) keeps its own class."""
    b, s, h, d = 4, 2048, 16, 128
    view = T((b, s, h, d), "float32", stride=(h * s * d, d, s * d, 1))
    dense = T((b, s, h, d), "float32")
    out = T((1, 1, 1, d), "float32")
    key_view = F.class_key(call("aten::sum", [view, [0, 1, 2], True], [out]), "sum")
    assert key_view == F.class_key(call("aten::sum", [dense, [0, 1, 2], True], [out]), "sum") == "float32|dense|outer"
    t_view = total(estimate(call("aten::sum.dim_IntList", [view, [0, 1, 2], True, None], [out])))
    t_dense = total(estimate(call("aten::sum.dim_IntList", [dense, [0, 1, 2], True, None], [out])))
    assert t_view == t_dense and 50_000 < t_view < 200_000
    bias = call("aten::sum", [CL(128, 64, 56, 56), [0, 2, 3]], [T((64,))])
    assert F.class_key(bias, "sum") == "bfloat16|perm|outer"


def test_norm_features_are_rows_and_row_length_whatever_the_rank():
    x4 = T((64, 56, 56, 96))
    ln = call("aten::native_layer_norm", [x4, [96], T((96,)), T((96,)), 1e-6], [x4, T((64, 56, 56, 1))])
    assert F.shape_features(ln, "native_layer_norm") == (64 * 56 * 56, 96)
    x2 = T((200704, 96))
    ln2 = call("aten::native_layer_norm", [x2, [96], T((96,)), T((96,)), 1e-6], [x2, T((200704, 1))])
    assert total(estimate(ln, "h200")) == pytest.approx(total(estimate(ln2, "h200")), rel=0.01)


def test_short_rows_layer_norm_is_slow_as_measured():
    """One block per row: a 96-wide fp32 layer norm over 200,704 rows ran 317 us in ConvNeXt-T
    on the H200 (the sweep: ~4x its roofline); a 4096-wide one runs near the roofline."""
    x = T((200704, 96))
    ln = call("aten::native_layer_norm", [x, [96], T((96,)), T((96,)), 1e-6], [x, T((200704, 1))])
    ks = estimate(ln, "h200")
    assert {k.source for k in ks} == {"family"}
    pts = [p for p in _points("native_layer_norm", "float32|dense") if p["s"] == [200704, 96]]
    assert pts and total(ks) == pytest.approx(pts[0]["t"], rel=0.05)
    assert 250_000 < total(ks) < 400_000  # the real ConvNeXt call: 317 us
    roof = total(estimate(ln, "h200", use_table=False, use_measured=False))
    assert total(ks) > 3 * roof


def test_conv_backward_with_bias_is_the_convolution_then_the_bias_sum():
    """ATen sums grad_output for the bias outside cuDNN; the cuDNN kernels are the bias-free
    ones. Real ConvNeXt-T, depthwise 7x7 over 64x96x56x56 bf16 channels-last: dgrad 336 us,
    wgrad 119 + 7 us, then the bias reduce_kernel 74 us (with a memset)."""
    with_bias, without = estimate(_dw_backward(True), "h200"), estimate(_dw_backward(False), "h200")
    names = [k.name for k in with_bias]
    assert names[:len(without)] == [k.name for k in without]
    assert any(n.startswith("dgrad2d_c1_k1_nhwc") for n in names)
    assert "reduce_kernel" in names[-1] and "BFloat16" in names[-1]
    assert {k.source for k in without} == {"family"}
    conv = total(without)
    assert 400_000 < conv < 520_000  # measured 462 us
    assert 20_000 < total(with_bias) - conv < 100_000  # the bias sum: 74 us measured in the model


def test_rnn_roofline_ignores_the_reserve_buffer():
    """The runtime allocates cuDNN's measured reserve (738 MB for this LSTM), a meta call
    says 0 bytes; the roofline, and so the curve's ratio, must not depend on it."""
    x = T((64, 256, 1024))
    ws = (T((4096, 1024)), T((4096, 1024)), T((4096,)), T((4096,))) * 2
    h = T((2, 64, 1024))
    args = [x, ws, 4, T((16793600,)), h, h, 2, 1024, 0, 2, True, 0.0, True, False, (), None]
    gpu = get_gpu("h200")
    small = call("aten::_cudnn_rnn", args, [x, h, h, T((0,), "uint8"), T((16793600,))])
    big = call("aten::_cudnn_rnn", args, [x, h, h, T((738197504,), "uint8"), T((16793600,))])
    c_small, _ = O.cudnn_rnn(small, "_cudnn_rnn", gpu, False)
    c_big, _ = O.cudnn_rnn(big, "_cudnn_rnn", gpu, False)
    assert c_small.nbytes == c_big.nbytes and c_small.flops == c_big.flops > 0
    assert F.class_key(big, "_cudnn_rnn") == "float32|c|lstm|float32"
    t = total(estimate(big, "h200"))
    assert 7e6 < t < 11e6  # the sweep's LSTM: 8.4 ms; real in the LSTM LM: 10.1 ms of kernels


def test_an_fp16_cudnn_rnn_takes_the_autocast_sweeps_kernels_less_the_wrappers():
    """Under autocast a CUDA build runs the cuDNN RNN in fp16 inside a wrapper that casts the
    weights into a flat fp16 buffer (runtime/dispatch/autocast_rnn.py captures those ops apart).
    The `rnn` sweep measured that under autocast, keyed by the wrapper's call: the inner fp16
    call takes those points without the wrapper's fill and cast copies (their cuDNN kernels
    only), and its backward the sweep's fp16 backward points; before, both were rooflines
    (timm Sequencer2D's GPU time -44% against its profile, -13% with the sweep's points)."""
    x = T((64, 128, 512), "float16")
    ws = (T((2048, 512), "float16", stride=(1, 1)),) * 2 + (T((2048,), "float16"),) * 2
    ws = tuple(T((w.shape[0] * (w.shape[1] if len(w.shape) > 1 else 1), 1), "float16") for w in ws)
    h = T((1, 64, 512), "float16")
    args = [x, ws, 4, T((2 * 2048 * 512 + 2 * 2048,), "float16"), h, h, 2, 512, 0, 1, True, 0.0, True, False, (),
            None]
    op = call("aten::_cudnn_rnn", args, [x, h, h, T((0,), "uint8"), T((1,), "float16")])
    assert F.class_key(op, "_cudnn_rnn") == "float16|c|lstm|float16"
    assert F.stand_in_keys("_cudnn_rnn", "float16|c|lstm|float16") == ("float16|c|lstm|bfloat16",
                                                                       "float32|c|lstm|bfloat16")
    kernels = estimate(op, "h200")
    names = [k.name for k in kernels]
    assert all(k.source == "family" for k in kernels)
    assert not any("FillFunctor<c10::Half>" in n or "float16_copy_kernel" in n for n in names)
    assert any("elemWiseRNNcell" in n or "lstm" in n.lower() or "RNN" in n for n in names)
    # the sweep's point at this shape, its wrapper kernels taken off, is what is left
    point = next(p for p in _points("_cudnn_rnn", "float32|c|lstm|bfloat16") if p["s"] == [64, 128, 512])
    with gzip.open(F.DATA, "rt") as f:
        table_names = json.load(f)["names"]
    inner = F.autocast_rnn_inner(table_names, point["k"])
    assert 0 < len(inner) < len(point["k"]) and len(kernels) == len(inner)


def test_conv_forward_with_bias_adds_the_bias_after_cudnn():
    """cudnn_convolution takes no bias: ATen adds it in place afterwards (timm ConvNeXt-T on the
    H200: conv2d_c1_k1_nhwc_specialized 150 us, then an elementwise add_ of the bias, 54 us)."""
    x, w = CL(64, 96, 56, 56), T((96, 1, 7, 7), "bfloat16", stride=(49, 1, 7, 1))
    out = CL(64, 96, 56, 56)
    args = [x, w, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 96]
    plain = estimate(call("aten::convolution", args, [out]), "h200")
    biased = estimate(call("aten::convolution", args[:2] + [T((96,), "bfloat16")] + args[3:], [out]), "h200")
    assert [k.name for k in biased[:len(plain)]] == [k.name for k in plain]
    assert plain[0].name == "conv2d_c1_k1_nhwc_specialized" and 100_000 < total(plain) < 200_000
    assert len(biased) == len(plain) + 1 and "elementwise_kernel" in biased[-1].name
    assert 15_000 < total(biased) - total(plain) < 80_000


def _grouped_conv(c: int, gw: int, h: int, n: int = 128):
    x, out = CL(n, c, h, h), CL(n, c, h, h)
    w = T((c, gw, 3, 3), "bfloat16", stride=(gw * 9, 1, 3 * gw, gw))
    return call("aten::convolution", [x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], c // gw], [out])


def test_grouped_convolutions_are_classed_by_group_width():
    """Group widths that are not powers of two are their own class (cuDNN pads them with
    tensor-transform kernels), and the width is an interpolation feature."""
    pow2, odd = _grouped_conv(256, 16, 28), _grouped_conv(336, 24, 14)
    assert F.class_key(pow2, "convolution") == "bfloat16|k3|s1|g|cl"
    assert F.class_key(odd, "convolution") == "bfloat16|k3|s1|gn|cl"
    assert F.shape_features(odd, "convolution") == (128, 336, 14, 14, 24)
    dense = call("aten::convolution", [CL(128, 256, 28, 28), T((256, 256, 3, 3), "bfloat16"), None, [1, 1], [1, 1],
                                       [1, 1], False, [0, 0], 1], [CL(128, 256, 28, 28)])
    assert F.shape_features(dense, "convolution") == (128, 256, 28, 28)


def _atrous_conv(dilation: int):
    x, out = CL(16, 2048, 64, 64), CL(16, 256, 64, 64)
    w = T((256, 2048, 3, 3), "bfloat16", stride=(2048 * 9, 1, 3 * 2048, 2048))
    return call("aten::convolution", [x, w, None, [1, 1], [dilation] * 2, [dilation] * 2, False, [0, 0], 1], [out])


def test_dilated_convolutions_are_a_class_measured_on_the_h100():
    """A dilated 3x3 convolution (DeepLab's ASPP) is its own class: cuDNN runs other kernels for it
    than for the undilated points (sweep conv_dilated on the H100, session 33: DeepLabV3's ASPP
    branch, [16, 2048, 64, 64] -> 256 at dilation 12, 1.22 ms forward in the model's profile)."""
    assert F.class_key(_atrous_conv(12), "convolution") == "bfloat16|k3|s1|1|cl|dil"
    assert F.class_key(_atrous_conv(1), "convolution") == "bfloat16|k3|s1|1|cl"
    # on the H200 (the profile's GPU) the H100's points are carried and blended
    assert total(estimate(_atrous_conv(12), "h200")) / 1e3 == pytest.approx(1219, rel=0.12)
    # on the H100 its own point at this very shape answers as measured (in the sweep's
    # conv + BN + ReLU block: 0.80 ms)
    pts = [p for p in F.model("h100").points[("convolution", "bfloat16|k3|s1|1|cl|dil")][1]
           if p["s"] == [16, 2048, 64, 64]]
    assert pts and total(estimate(_atrous_conv(12), "h100")) == pytest.approx(pts[0]["t"], rel=0.02)


def _dilated_depthwise(c: int, k: int, dilation: int, h: int = 32, n: int = 24):
    x, out = CL(n, c, h, h), CL(n, c, h, h)
    w = T((c, 1, k, k), "bfloat16", stride=(k * k, 1, k, 1))
    pad = dilation * (k // 2)
    return call("aten::convolution", [x, w, None, [1, 1], [pad] * 2, [dilation] * 2, False, [0, 0], c], [out])


def test_dilated_depthwise_convolutions_are_measured_not_rooflined():
    """MobileNetV3's dilated last stage (LR-ASPP, DeepLabV3-MobileNet): cuDNN's grouped direct
    kernel takes milliseconds where the roofline says tens of microseconds. Unmeasured, the class
    fell to the roofline: LR-ASPP's 5 x 5 / dilation 2 over [24, 960, 32, 32] 33 us against 2.5
    ms in its H100 profile (session 47); sweep conv_dw_dilated (sw25, generic widths, not 960)."""
    op = _dilated_depthwise(960, 5, 2)
    assert F.class_key(op, "convolution") == "bfloat16|k5|s1|dw|cl|dil"
    roof = total(estimate(op, "h100", use_table=False))
    model = total(estimate(op, "h100"))
    assert model > 20 * roof
    assert model / 1e3 == pytest.approx(2514, rel=0.15)  # the profile's forward, held out of the sweep


def test_grouped_pointwise_convolution_runs_cudnns_per_group_loop():
    """EfficientViT's grouped 1x1 convolution, [128, 384, 14, 14] in 24 groups of 16, backward on
    an H100: cuDNN loops over the groups (4 slice kernels, a dgrad, a wgrad and a split-K
    reduction each, 2.68 ms of kernels on 8 streams, ~1.3 ms of the GPU's time); the simulation
    launches the same 8 kernels per group (sweep conv_grouped_1x1, H100 table)."""
    x = CL(128, 384, 14, 14)
    w = T((384, 16, 1, 1), "bfloat16", stride=(16, 1, 16, 16))
    bw = call("aten::convolution_backward", [x, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 24,
                                             [True, True, False]], [x, w])
    assert F.class_key(bw, "convolution_backward") == "bfloat16|k1|s1|g|cl|m110"
    ks = estimate(bw, "h100")
    assert len(ks) == 24 * 8
    assert sum("nhwcSliceCKernel" in k.name for k in ks) == 96
    assert 1.1e6 < total(ks) < 1.8e6


def _dw_multiplier_conv(c: int, m: int, k: int, s: int, h: int, n: int = 64):
    x, out = CL(n, c, h, h), CL(n, m * c, h // s, h // s)
    w = T((m * c, 1, k, k), "bfloat16", stride=(k * k, 1, k, 1))
    return call("aten::convolution", [x, w, None, [s, s], [k // 2] * 2, [1, 1], False, [0, 0], c], [out])


def test_depthwise_convolutions_with_a_channel_multiplier_run_cudnns_per_group_loop():
    """A depthwise convolution whose output has m x its input channels (groups = C_in, C_out = 2 x
    C_in: timm FastViT's downsampling blocks) is a class of its own ("dwm2"): cuDNN launches one
    kernel per group for the strided ones, where a depthwise convolution runs one. FastViT's
    [64, 64, 64, 64] -> 128 channels, 7 x 7 / 2, took 2.42 ms in 64 kernels on an H100, simulated at
    19 us from the depthwise curve before the conv_dw_multiplier sweep (H100 table, session 53:
    the `conv` family's generic channel / map pairs, 56 x 56 at 64 channels, not FastViT's 64 x 64)."""
    op = _dw_multiplier_conv(64, 2, 7, 2, 64)
    assert F.class_key(op, "convolution") == "bfloat16|k7|s2|dwm2|cl"
    plain = _dw_multiplier_conv(64, 1, 7, 2, 64)
    assert F.class_key(plain, "convolution") == "bfloat16|k7|s2|dw|cl"
    ks = estimate(op, "h100")
    assert len(ks) == 64  # one launch per group, as measured
    assert 1.0e6 < total(ks) < 3.5e6  # the profile's 2.42 ms, held out of the sweep
    assert total(ks) > 20 * total(estimate(plain, "h100"))
    # the H200 has no table of these: it takes the H100's, carried, with the same launches
    assert len(estimate(op, "h200")) == 64
    # a multiplier no sweep measured takes the nearest measured one's class
    assert F.stand_in_keys("convolution", "bfloat16|k3|s1|dwm3|cl") == ("bfloat16|k3|s1|dwm2|cl",
                                                                        "bfloat16|k3|s1|dwm4|cl")
    m3 = estimate(_dw_multiplier_conv(64, 3, 3, 2, 64), "h100")
    assert all("convolve_common_engine" in k.name for k in m3) and len(m3) == 64


def test_per_group_loops_launch_the_ops_own_group_count():
    """cuDNN's per-group loops launch one round of kernels per group of the op, not of the
    nearest measured point (families.regroup): a strided depthwise convolution with a channel
    multiplier over 80 or 112 channels (the grid has 64 and 96 at 56 x 56) launches 80 / 112
    forward kernels, and a grouped 1 x 1 backward in 21 groups of 16 (the grid: 24) 21 rounds of
    four slices, a memset, a dgrad, a wgrad and a reduction. The time stays the interpolated one:
    the launches share it."""
    ks = {c: estimate(_dw_multiplier_conv(c, 2, 7, 2, 56), "h100") for c in (64, 80, 96, 112)}
    assert [len(ks[c]) for c in (64, 80, 96, 112)] == [64, 80, 96, 112]
    t = [total(ks[c]) for c in (64, 80, 96, 112)]
    assert t == sorted(t)  # more groups, more time: interpolated over the channels
    x = CL(128, 336, 14, 14)
    w = T((336, 16, 1, 1), "bfloat16", stride=(16, 1, 16, 16))
    bw = call("aten::convolution_backward", [x, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 21,
                                             [True, True, False]], [x, w])
    out = estimate(bw, "h100")
    assert len(out) == 21 * 8 and sum("nhwcSliceCKernel" in k.name for k in out) == 21 * 4
    # the loop detection leaves a point alone where it finds none
    point = [("kernel", 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 5.0), ("kernel", 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 7.0)]
    assert F.regroup(point, 4, 8) is point


def test_odd_width_grouped_conv_costs_what_cudnn_pads_it_to():
    """timm RegNetY-016, bf16 channels-last, x [128, 336, 14, 14], w [336, 24, 3, 3]: 234 us
    per forward on the H200 (two tensor transforms around a 40 us implicit GEMM); the roofline
    alone says ~7 us. The sweep (conv_grouped2, designed after this model's diff was seen) has
    width 24 at 96 and 384 channels, not this shape."""
    t = total(estimate(_grouped_conv(336, 24, 14), "h200"))
    assert 120_000 < t < 400_000


def test_attention_bias_is_its_own_class_and_dropout_composes_with_it():
    """A per-head learned bias (T5) is read and differentiated in full: class "bias", not the
    broadcast padding "mask". With dropout too (not swept together) the time is composed from
    the bias-only, dropout-only and plain points at the same shape."""
    q = T((16, 8, 512, 64), "bfloat16", stride=(262144, 64, 512, 1))
    bias = T((16, 8, 512, 512), "bfloat16", stride=(0, 262144, 512, 1))
    pad = T((16, 1, 1, 512), "bfloat16")
    outs = [T((16, 8, 512, 64), "bfloat16"), T((16, 8, 512), "float32"), T((2,), "int64"), T((), "int64")]

    def sdpa(mask, p):
        return call("aten::_scaled_dot_product_efficient_attention", [q, q, q, mask, True, p, False], outs)
    assert F.class_key(sdpa(bias, 0.0), "_scaled_dot_product_efficient_attention").split("|")[4] == "bias"
    assert F.class_key(sdpa(pad, 0.0), "_scaled_dot_product_efficient_attention").split("|")[4] == "mask"
    plain, with_bias, both = (total(estimate(sdpa(m, p), "h200")) for m, p in ((None, 0.0), (bias, 0.0), (bias, 0.1)))
    assert with_bias > 1.1 * plain and both > 1.2 * with_bias
    assert all(k.source == "family" for k in estimate(sdpa(bias, 0.1), "h200"))


def test_causal_attention_with_dropout_composes_the_dropout_factor():
    """Causal attention with dropout (HF GPT-2's attn_pdrop 0.1) was not swept together: its time
    is the causal point's times dropout's factor on full attention at the same shape. The H200
    ran HF GPT-2's cuDNN forward (8 x 12 x 1024 x 64) in 104 us; the causal point alone says ~46
    and was the roofline's before."""
    q = T((8, 12, 1024, 64), "bfloat16")
    outs = [q, T((8, 12, 1024, 1), "float32"), T((), "int64"), T((), "int64")]

    def sdpa(causal, p):
        return call("aten::_scaled_dot_product_cudnn_attention", [q, q, q, None, True, p, causal, False], outs)
    assert F.class_key(sdpa(True, 0.1), "_scaled_dot_product_cudnn_attention") == "bfloat16|d64|causal|drop|nomask|mha"
    ks = estimate(sdpa(True, 0.1), "h200")
    assert all(k.source == "family" for k in ks)
    assert total(ks) > 1.5 * total(estimate(sdpa(True, 0.0), "h200"))
    assert 80_000 < total(ks) < 140_000


def test_pooling_is_classed_by_window_and_stride_forward_and_backward():
    """The window and stride come from their schema positions in the backward ops too
    (grad_output, self, kernel_size, stride, ...); before 2026-12-02 avg_pool2d_backward's key
    held its input tensor, so no query ever matched its sweep points."""
    x = T((128, 64, 56, 56), "float32")
    fwd = call("aten::avg_pool2d", [x, [3, 3], [1, 1], [1, 1], False, False], [x])
    bwd = call("aten::avg_pool2d_backward", [x, x, [3, 3], [1, 1], [1, 1], False, False, None], [x])
    assert F.class_key(fwd, "avg_pool2d") == "float32|k3s1|c"
    assert F.class_key(bwd, "avg_pool2d_backward") == "float32|k3s1|c"
    down = call("aten::avg_pool2d", [x, [2, 2], [], [0, 0], False, True], [T((128, 64, 28, 28), "float32")])
    assert F.class_key(down, "avg_pool2d") == "float32|k2s2|c"  # an empty stride is the window
    # PoolFormer's token mixer (avg 3x3 at stride 1, sweep pool_windows): one thread per output
    # reading nine inputs, ~340 us for this fp32 NCHW map on the H200 (a training step's
    # profile: 339 us), where the bandwidth roofline says ~50 us
    ks = estimate(fwd, "h200")
    assert {k.source for k in ks} == {"family"} and 250e3 < total(ks) < 450e3
    assert {k.source for k in estimate(bwd, "h200")} == {"family"}


def _conv1d(n, c, length, k, groups, transposed=False):
    """nn.Conv1d's captured call: (N, C, L) input, as HF speech models pass it transposed from (N, L, C)."""
    x = T((n, c, length), "bfloat16", stride=(length * c, 1, c) if transposed else None)
    w = T((c, c // groups, k), "bfloat16")
    out = T((n, c, length + 1 if k % 2 == 0 else length), "bfloat16")
    return call("aten::convolution", [x, w, T((c,), "bfloat16"), [1], [k // 2], [1], False, [0], groups], [out])


def test_one_and_three_d_convolutions_are_classes_of_their_own():
    """A 1-D convolution reaches cuDNN as a 2-D one of height 1 (cudnn_convolution's (N, C, 1, L)),
    both count as 1-D; ATen makes its input contiguous first, so a transposed sequence is keyed
    contiguous. 3-D kernels and strides keep their temporal and spatial sizes; channels-last-3d
    is a layout of its own."""
    assert F.class_key(_conv1d(8, 768, 199, 128, 16, transposed=True), "convolution") == "bfloat16|1d|k128|s1|gn|c"
    x4, w4 = T((8, 512, 1, 3200), "bfloat16"), T((512, 512, 1, 3), "bfloat16")
    cudnn = call("aten::convolution", [x4, w4, None, [1, 2], [0, 1], [1, 1], False, [0, 0], 1], [x4])
    assert F.class_key(cudnn, "convolution") == "bfloat16|1d|k3|s2|1|c"
    cl3 = T((16, 3, 16, 112, 112), "bfloat16", stride=(16 * 112 * 112 * 3, 1, 112 * 112 * 3, 112 * 3, 3))
    stem = call("aten::convolution", [cl3, T((64, 3, 3, 7, 7), "bfloat16"), None, [1, 2, 2], [1, 3, 3], [1, 1, 1],
                                      False, [0, 0, 0], 1], [T((16, 64, 16, 56, 56), "bfloat16")])
    assert F.class_key(stem, "convolution") == "bfloat16|3d|k3x7|s1x2|1|cl3d"
    # 2-D keys are as before (the sweeps before session 21 were keyed without a dimension part)
    assert F.class_key(_grouped_conv(256, 16, 28), "convolution") == "bfloat16|k3|s1|g|cl"


def test_grouped_wide_one_d_convolution_costs_cudnns_per_group_kernels():
    """HF wav2vec2's positional convolution (768 channels, kernel 128, 16 groups) runs cuDNN's
    legacy per-group kernels, 3 per group on 16 internal streams: ~12 ms a call unprofiled on the
    H200 for batch 8 x 199 frames (CUDA events; 31 ms of summed kernels under the profiler,
    tools/holdout/conv_profiler_probe.py). Its roofline is ~50 us. The sweep point is larger
    (batch 32 x 256), so the time is held by the wave floor, not scaled down by the roofline."""
    ks = estimate(_conv1d(8, 768, 199, 128, 16, transposed=True), "h200")
    assert {k.source for k in ks} == {"family"}
    assert sum("implicit_convolve_sgemm" in k.name for k in ks) == 32
    assert 8e6 < total(ks) < 20e6


def _family_doc(grid: int, dur: int) -> dict:
    kernel = ["kernel", 0, grid, 1, 1, 256, 1, 1, 32, 0, 0, 0, dur]
    return {"schema": F.SCHEMA, "names": ["k"], "apis": ["cudaLaunchKernel"],
            "ops": {"convolution": {"key": [{"w": 1000.0, "t": dur, "s": [64, 64], "k": [kernel]},
                                   {"w": 4000.0, "t": 4 * dur, "s": [256, 64], "k": [kernel]}]}}}


def test_below_the_measured_range_small_grids_keep_their_time():
    """Below the smallest point a convolution's time/roofline ratio of the nearest point holds,
    except for kernels whose grid leaves most SMs idle (8 blocks on 132 SMs: cuDNN's per-group
    kernels), which keep their time for less work; a grid of a block per SM (a persistent
    kernel looping over tiles) or more scales with the work."""
    small = F.FamilyModel(_family_doc(8, 100_000))
    t, near = small.predict("convolution", "key", 250.0, (16, 64))
    assert near["w"] == 1000.0 and t == pytest.approx(100_000)
    persistent = F.FamilyModel(_family_doc(132, 100_000))
    assert persistent.predict("convolution", "key", 250.0, (16, 64))[0] == pytest.approx(25_000)
    # inside the measured range the interpolated ratio is unchanged
    t, _ = small.predict("convolution", "key", 2000.0, (128, 64))
    assert t == pytest.approx(200_000, rel=0.01)
    # other ops' kernels loop over their data (an embedding backward's sorts): the ratio holds
    other = F.FamilyModel({**_family_doc(8, 100_000), "ops": {"sum": _family_doc(8, 100_000)["ops"]["convolution"]}})
    assert other.predict("sum", "key", 250.0, (16, 64))[0] == pytest.approx(25_000)


def test_layer_norm_of_a_transposed_input_copies_it_first():
    """layer_norm_cuda takes its input contiguous: HF whisper's encoder carries its hidden states
    transposed from the conv front end, and each of its 13 layer norms (and their backwards) ran
    a strided copy kernel inside the op on the H200 (~84 us for fp32 (16, 1500, 512)). The copy
    comes first, then the norm costed as on a contiguous input; a contiguous input has no copy."""
    w = T((512,), "float32")
    stats = T((16, 1500, 1), "float32")

    def ln(x):
        return call("aten::native_layer_norm", [x, [512], w, w, 1e-5], [T((16, 1500, 512)), stats, stats])
    transposed = estimate(ln(T((16, 1500, 512), stride=(768000, 1, 1500))), "h200")
    plain = estimate(ln(T((16, 1500, 512))), "h200")
    assert "copy" in transposed[0].name and len(transposed) == len(plain) + 1
    assert [k.name for k in transposed[1:]] == [k.name for k in plain]
    assert total(transposed) > total(plain) + 20_000


def test_cat_onto_an_empty_cache_runs_the_non_vectorized_copy():
    """HF's key/value caches start empty, and `cat([empty, keys])` runs every layer every step in
    training. ATen copies it with its non-vectorized batched kernel, at one rate per element
    whatever the dtype or the keys' layout (sweep cat_cache on the H200: 77 us for (16, 8, 1500,
    64) in bf16 and fp32, as whisper's profile shows it), where a dense cat of two tensors runs
    the vectorized one (25 us in bf16): its own class, keyed by the keys (the first non-empty
    tensor), not by the empty placeholder."""
    empty = T((0,), "bfloat16")
    keys = T((16, 8, 1500, 64), "bfloat16", stride=(768000, 96000, 64, 1))
    op = call("aten::cat", [(empty, keys), -2], [T((16, 8, 1500, 64), "bfloat16")])
    assert F.class_key(op, "cat") == "bfloat16|empty"
    ks = estimate(op, "h200")
    assert ks[0].source == "family" and "CatArrayBatchedCopy<" in ks[0].name
    assert 65_000 < total(ks) < 90_000
    two = call("aten::cat", [(keys, keys), -2], [T((16, 8, 3000, 64), "bfloat16")])
    assert F.class_key(two, "cat") == "bfloat16|dense"


def test_a_cat_a_cuda_build_cannot_batch_is_priced_as_a_copy_per_input():
    """ATen's CUDA cat copies input by input (a narrow and a copy_ each) when the inputs are not
    all of the output's dtype, for one input, or beyond 4 dims (cost/cat_paths.py); HF Phi-3's
    H100 profile: `cat([empty fp32, values bf16])` one casting copy, 38 us, where the batched
    copy was priced at 56 us. Same-dtype cats, strided or onto an empty cache, stay batched."""
    from phantora_prof.cost import cat_paths

    empty = T((0,), "float32")
    keys = T((4, 16, 2048, 64), "float32")
    values = T((4, 16, 2048, 64), "bfloat16", stride=(6291456, 64, 3072, 1))  # a transposed projection
    out = T((4, 16, 2048, 64), "float32")
    assert cat_paths.copies_per_input((empty, values), out)
    assert not cat_paths.copies_per_input((empty, keys), out)
    assert not cat_paths.copies_per_input((values, values), T((4, 16, 4096, 64), "bfloat16"))
    assert cat_paths.copies_per_input((keys,), keys)
    five = T((1, 4, 16, 2048, 64), "float32")
    assert cat_paths.copies_per_input((five, five), T((2, 4, 16, 2048, 64), "float32"))
    # channels-last inputs into a channels-last output: batched; a contiguous one among them makes
    # the output contiguous, and the strided way then batches them too
    cl = T((8, 64, 14, 14), "bfloat16", stride=(12544, 1, 896, 64))
    assert not cat_paths.copies_per_input((cl, cl), T((8, 128, 14, 14), "bfloat16", stride=(25088, 1, 1792, 128)))
    assert not cat_paths.copies_per_input((cl, T((8, 64, 14, 14), "bfloat16")), T((8, 128, 14, 14), "bfloat16"))
    # ... but 5-D channels-last ones that are not all dense in it copy one by one
    cl3 = T((2, 8, 4, 14, 14), "bfloat16", stride=(6272, 1, 1568, 112, 8))
    assert cat_paths.copies_per_input((cl3, T((2, 8, 4, 14, 14), "bfloat16")), T((2, 16, 4, 14, 14), "bfloat16"))

    cast = estimate(call("aten::cat", [(empty, values), -2], [out]), "h100")
    assert len(cast) == 1 and "direct_copy_kernel_cuda" in cast[0].name and "CatArray" not in cast[0].name
    batched = estimate(call("aten::cat", [(empty, keys), -2], [out]), "h100")
    assert len(batched) == 1 and "CatArrayBatchedCopy" in batched[0].name
    assert total(cast) < total(batched)  # a read of bf16 against the batched kernel's slow rate
    # one copy per input that is not skipped; a same-dtype contiguous slice is a DtoD memcpy
    pair = estimate(call("aten::cat", [(five, five), 0], [T((2, 4, 16, 2048, 64), "float32")]), "h100")
    assert [k.name for k in pair] == ["Memcpy DtoD (Device -> Device)"] * 2
    assert cat_paths.copied_slices((empty, values), out, -2) == [(values, out)]


def test_a_stack_is_priced_as_the_cat_a_cuda_build_runs_for_it():
    """ATen's CUDA stack is a cat of its inputs along the dim (then a view), or of the inputs
    unsqueezed along a new last dim (cost/cat_paths.py `as_cat`): timm Hiera's UnbindBackward0
    stacks three 5-D gradients along dim 0, which a CUDA build copies one by one (H100 profile:
    a DtoD memcpy, a strided copy, a DtoD memcpy), where the batched kernel had been priced."""
    from phantora_prof.cost import cat_paths

    g = T((64, 2, 49, 64, 96), "bfloat16")
    gt = T((64, 2, 49, 64, 96), "bfloat16", stride=(602112, 301056, 6144, 1, 64))
    stacked = T((3, 64, 2, 49, 64, 96), "bfloat16")
    cat_in, cat_out, dim = cat_paths.as_cat((g, gt, g), stacked, 0)
    assert cat_out.shape == (192, 2, 49, 64, 96) and dim == 0 and cat_in == [g, gt, g]
    ks = estimate(call("aten::stack", [(g, gt, g), 0], [stacked]), "h100")
    assert [k.name.split("<")[0] for k in ks] == ["Memcpy DtoD (Device -> Device)", "void at::native::elementwise_kernel",
                                                  "Memcpy DtoD (Device -> Device)"], [k.name[:50] for k in ks]
    # a new last dim: the inputs unsqueezed there; 4-D ones stay on the batched kernel
    small = T((8, 16, 32), "float32")
    cat_in, cat_out, dim = cat_paths.as_cat((small, small), T((8, 16, 32, 2), "float32"), -1)
    assert dim == 3 and cat_in[0].shape == (8, 16, 32, 1) and cat_in[0].stride == (512, 32, 1, 1)
    assert cat_out.stride == (1024, 64, 2, 1)
    batched = estimate(call("aten::stack", [(small, small), -1], [T((8, 16, 32, 2), "float32")]), "h100")
    assert len(batched) == 1 and "CatArrayBatchedCopy" in batched[0].name
    # inputs of unequal shapes (torch refuses them): no cat this model knows
    assert cat_paths.as_cat((small, g), stacked, 0) is None


def test_a_2d_batch_norm_is_priced_as_the_channels_last_one_it_runs():
    """A contiguous (N, C) batch norm runs ATen's channels-last kernels (batch_norm_use_channels_last_kernels:
    dim 1 has stride 1), as LeViT's BatchNorm1d over tokens did on the H200 (real: stats + running
    stats + transform, channels-last kernels, 17.8 us for (12544, 256) bf16); before, the NCHW
    class's points gave the NCHW kernels."""
    x, w = T((12544, 256), "bfloat16"), T((256,))
    assert F.class_key(call("aten::native_batch_norm", [x, w, w, w, w, True, 0.1, 1e-5]), "native_batch_norm") \
        == "bfloat16|cl"
    assert F.class_key(call("aten::native_batch_norm", [T((8, 256, 7, 7), "bfloat16"), w, w, w, w, True, 0.1, 1e-5]),
                       "native_batch_norm") == "bfloat16|c"
    ks = estimate(call("aten::native_batch_norm", [x, w, w, w, w, True, 0.1, 1e-5],
                       [x, T((256,)), T((256,))]), "h200")
    assert any("channels_last" in k.name for k in ks), [k.name[:60] for k in ks]


def test_a_max_pool_window_not_swept_answers_from_a_swept_one():
    """GoogLeNet's 2x2 / 2 max pool (bf16, channels-last) runs the same NHWC kernels as the swept
    3x3 / 2 one: forward max_pool_forward_nhwc, backward a fill of the gradient then
    max_pool_backward_nhwc (H200: 63.7 us and 13.4 + 125 us); the roofline's one generic kernel
    had given 34 and 48.5 us."""
    from phantora_prof.protocol import TensorArg
    g = TensorArg((128, 832, 7, 7), (40768, 1, 5824, 832), "bfloat16", 0)
    x = TensorArg((128, 832, 14, 14), (163072, 1, 11648, 832), "bfloat16", 0)
    idx = TensorArg((128, 832, 7, 7), (40768, 1, 5824, 832), "int64", 0)
    bwd = estimate(call("aten::max_pool2d_with_indices_backward", [g, x, [2, 2], [2, 2], [0, 0], [1, 1], True, idx],
                        [x]), "h200")
    assert ["FillFunctor" in bwd[0].name, "max_pool_backward_nhwc" in bwd[1].name] == [True, True]
    assert 0.8 < sum(k.duration_ns for k in bwd) / 138_400 < 1.5
    (fwd,) = estimate(call("aten::max_pool2d_with_indices", [x, [2, 2], [2, 2], [0, 0], [1, 1], True], [g, idx]), "h200")
    assert "max_pool_forward_nhwc" in fwd.name and 0.8 < fwd.duration_ns / 63_680 < 1.6


def test_baddbmm_copies_its_expanded_bias_then_reads_it_as_c():
    """BLOOM's ALiBi scores, `baddbmm(alibi (64, 1, 2048), q, k, beta=1)` in bf16, ran on the H200
    as ATen's `result.copy_(self.expand(...))` (an elementwise copy kernel, 0.54 ms) and the batched
    GEMM reading that full-size C (0.42 ms, against 0.16 ms for the bmm alone). beta=0 reads no C
    and copies nothing."""
    out = T((64, 2048, 2048), "bfloat16")
    q, k = T((64, 2048, 64), "bfloat16"), T((64, 64, 2048), "bfloat16")
    alibi = T((64, 1, 2048), "bfloat16")
    with_c = estimate(call("aten::baddbmm", [alibi, q, k], [out], kwargs={"beta": 1.0, "alpha": 0.125}), "h200")
    no_c = estimate(call("aten::baddbmm", [alibi, q, k], [out], kwargs={"beta": 0.0, "alpha": 0.125}), "h200")
    bmm = estimate(call("aten::bmm", [q, k], [out]), "h200")
    assert len(with_c) == 2 and "elementwise_kernel" in with_c[0].name and "copy" in with_c[0].name
    assert 350_000 < with_c[0].duration_ns < 700_000
    assert [x.name for x in no_c] == [x.name for x in bmm] and abs(total(no_c) - total(bmm)) < 0.01 * total(bmm)
    assert with_c[1].duration_ns > total(bmm) + 80_000


def test_copy_from_an_expanded_source_is_a_kernel_not_a_memcpy():
    """A dense destination filled from a stride-0 source is TensorIterator's copy kernel, priced
    from the swept broadcast clones; the dense copies' class (DtoD memcpys) does not answer."""
    dst = T((64, 2048, 2048), "bfloat16")
    src = T((64, 2048, 2048), "bfloat16", stride=(2048, 0, 1))
    op = call("aten::copy_", [dst, src], [dst])
    assert F.class_key(op, "copy_") == "bfloat16|bcast"
    ks = estimate(op, "h200")
    assert len(ks) == 1 and "Memcpy" not in ks[0].name and ks[0].source == "family"


def test_upsampling_is_classed_by_memory_format():
    """NCHW bilinear upsampling parallelises over output pixels and loops over N x C, NHWC over
    every output element: 512 channels of a 16 x 16 map took 2.75 ms NCHW and 0.08 ms
    channels-last upsampled x2, 3.10 and 1.25 ms x8, on the H200 (sweep `upsample`, session 29).
    Each format has its own points."""
    def up(x, out):
        return call("aten::upsample_bilinear2d", [x, [128, 128], False, None, None], [out])
    nchw = up(T((16, 512, 16, 16), "bfloat16"), T((16, 512, 128, 128), "bfloat16"))
    cl = up(CL(16, 512, 16, 16), CL(16, 512, 128, 128))
    assert F.class_key(nchw, "upsample_bilinear2d") == "bfloat16|c"
    assert F.class_key(cl, "upsample_bilinear2d") == "bfloat16|cl"
    t_nchw, t_cl = total(estimate(nchw, "h200")), total(estimate(cl, "h200"))
    assert t_nchw > 2 * t_cl and 2_000_000 < t_nchw < 4_000_000 and 800_000 < t_cl < 1_800_000


def _sync_bn_stats(dtype="bfloat16"):
    """SyncBatchNorm's first kernel over a channels-last (32, 256, 56, 56) map, a shape the H100
    sweep measured (cost/data/h100_families.json.gz, tools/holdout/real_h200/session32/)."""
    x = CL(32, 256, 56, 56, dtype)
    return call("aten::batch_norm_stats", [x, 1e-5], [T((256,)), T((256,))])


def test_a_gpus_own_family_table_answers_for_it_as_measured():
    """The H100 measured SyncBatchNorm's kernels (the H200 never did): an H100 query takes the
    measured time of its swept shape; the H200 takes that point scaled by the roofline ratio
    (memory-bound: its faster HBM); another architecture takes none of it (the roofline's own)."""
    doc = json.loads(gzip.open(F.data_path("h100")).read())
    assert doc["gpu"] == "h100" and "batch_norm_stats" in doc["ops"]
    assert "batch_norm_stats" not in json.loads(gzip.open(F.data_path("h200")).read())["ops"]
    op = _sync_bn_stats()
    key = F.class_key(op, "batch_norm_stats")
    pts = doc["ops"]["batch_norm_stats"][key]
    measured = [p["t"] for p in pts if p["s"][:2] == [32, 256] or p["s"] == [32, 256, 56, 56]]
    h100 = estimate(op, get_gpu("h100"))
    assert {k.source for k in h100} == {"family"}
    assert measured and min(abs(total(h100) - t) / t for t in measured) < 0.02
    h200 = estimate(op, get_gpu("h200"))
    assert {k.source for k in h200} == {"family"}
    # memory-bound: faster on the H200's HBM, by at most the sustained bandwidths' ratio
    from phantora_prof.cost.roofline import hbm_bw

    ratio = hbm_bw(get_gpu("h100")) / hbm_bw(get_gpu("h200"))
    assert total(h100) * ratio * 0.98 <= total(h200) < total(h100) * 0.95
    assert {k.source for k in estimate(op, get_gpu("a100"))} == {"roofline"}


def test_gru_cell_kernels_come_from_the_h100_sweep():
    """nn.GRUCell's fused cell (ATen's kernel, no Meta or cost model of its own before session 32)
    is priced from the measured points on the H100, with the kernel name the H100 ran."""
    gates = T((128, 3072), "float32")
    h = T((128, 1024), "float32")
    bias = T((3072,), "float32")
    op = call("aten::_thnn_fused_gru_cell", [gates, gates, h, bias, bias], [h, T((128, 5120), "float32")])
    ks = estimate(op, get_gpu("h100"))
    assert {k.source for k in ks} == {"family"}
    assert any("gru_cell" in k.name.lower() for k in ks), [k.name for k in ks]


def test_column_sums_follow_the_cold_grid_column_by_column():
    """A column sum's time is not smooth in its column count: on the H100's cold grid (sweep
    reductions_outer, session 33) [50176, 192] bf16 took 97 us and [50176, 256] 62 us. Each
    measured column count answers for itself (a narrow bandwidth over columns), from the cold
    points (before the H200's isolated sweep); ConvNeXt-V2's [50176, 192] bias gradient took 96
    us in its H100 profile."""
    def col_sum(rows, cols):
        return call("aten::sum", [T((rows, cols), "bfloat16"), [0]], [T((cols,), "bfloat16")])

    odd, even = estimate(col_sum(50176, 192), "h100"), estimate(col_sum(50176, 256), "h100")
    assert {k.source for k in odd} == {"family"}
    assert total(odd) / 1e3 == pytest.approx(96.8, rel=0.08)
    assert total(even) / 1e3 == pytest.approx(61.7, rel=0.08)


def test_channels_last_bias_gradient_is_priced_as_the_column_sum_it_runs():
    """A channels-last map summed over N, H, W (a convolution's bias gradient) is, once
    TensorIterator coalesces its dims, the [N*H*W, C] column sum: same kernel, launch and bytes.
    It is priced as that (it took the H200's few warm channels-last points before: 100 such sums
    in the H200 profiles at 0.72x real in the median, now 1.02x). timm ConvNeXt-T's [64, 192,
    28, 28] fp32 bias gradient took 100.9 us in its H200 profile."""
    cl = T((64, 192, 28, 28), "float32", stride=(28 * 28 * 192, 1, 28 * 192, 192))
    bias = estimate(call("aten::sum", [cl, [0, 2, 3]], [T((192,), "float32")]), "h200")
    flat = estimate(call("aten::sum", [T((50176, 192), "float32"), [0]], [T((192,), "float32")]), "h200")
    assert [(k.name, k.duration_ns) for k in bias] == [(k.name, k.duration_ns) for k in flat]
    assert total(bias) / 1e3 == pytest.approx(100.9, rel=0.1)
    # an NCHW map's per-channel sum is not a column sum: its own class
    nchw = call("aten::sum", [T((64, 192, 28, 28), "float32"), [0, 2, 3]], [T((192,), "float32")])
    assert F.class_key(nchw, "sum") != "float32|dense|outer"


def _unaligned_conv(c: int, h: int):
    x = CL(64, c, h, h)
    w = T((c, c, 3, 3), "bfloat16", stride=(9 * c, 1, 3 * c, c))
    fwd = call("aten::convolution", [x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1], [x])
    bwd = call("aten::convolution_backward", [x, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                              [True, True, False]], [x, w])
    return fwd, bwd


def test_channels_not_multiples_of_8_are_padded_as_cudnn_pads_them():
    """timm's HRNet-W18 (held out: blind set 11, its H100 profile) convolves 18- and 36-channel
    channels-last bf16 maps: cuDNN pads every such operand (nhwcAddPaddingKernel) and runs
    CUTLASS / sm80 kernels; per call, median over the profile: forward 18 x 56 x 56 59.1 us and
    6 kernels, backward 135.1 us and 14; forward 36 x 28 x 28 34.4 us and 6, backward 142.6 us and
    11. The sweep (conv_unaligned, H200, session 38) has 14 / 22 / 20 / 28 channels, not these."""
    fwd, bwd = _unaligned_conv(18, 56)
    assert F.class_key(fwd, "convolution") == "bfloat16|k3|s1|1|cl|pad2"
    assert F.class_key(_unaligned_conv(36, 28)[0], "convolution") == "bfloat16|k3|s1|1|cl|pad4"
    assert F.class_key(_unaligned_conv(64, 28)[0], "convolution") == "bfloat16|k3|s1|1|cl"
    for (c, h), (f_us, f_n), (b_us, b_n) in (((18, 56), (59.1, 6), (135.1, 14)), ((36, 28), (34.4, 6), (142.6, 11))):
        fwd, bwd = _unaligned_conv(c, h)
        f, b = estimate(fwd, "h100"), estimate(bwd, "h100")
        assert sum("nhwcAddPaddingKernel" in k.name for k in f) >= 2
        assert (len(f), len(b)) == (f_n, b_n)
        assert total(f) / 1e3 == pytest.approx(f_us, rel=0.25)
        assert total(b) / 1e3 == pytest.approx(b_us, rel=0.25)


def test_an_unaligned_class_no_table_measured_takes_the_aligned_one():
    """NCHW fp32 convolutions over 18 channels were not swept (conv_unaligned has NCHW bf16 and
    channels-last fp32): they take the aligned class's points, as every convolution did before
    the padded classes were measured, never nothing."""
    from phantora_prof import cost as C

    x, w = T((64, 18, 56, 56), "float32"), T((18, 18, 3, 3), "float32")
    op = call("aten::convolution", [x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1], [x])
    assert F.class_key(op, "convolution") == "float32|k3|s1|1|c|pad2"
    _, ref, found = C._family_table(op, "convolution", get_gpu("h200"), O.convolution)
    # (the H100's fp32 NCHW grid of session 50, carried, is nearer than the H200's own points)
    assert ref.key in ("h200", "h100") and found[:2] == ("convolution", "float32|k3|s1|1|c")
    assert F.unaligned_channels_part(18, 18) == "pad2" and F.unaligned_channels_part(3, 64) == ""
    assert F.unaligned_channels_part(64, 45) == "pad1" and F.unaligned_channels_part(256, 36) == "pad4"
    assert F.without_unaligned_part("float16|k3|s1|1|cl|pad2|m110") == "float16|k3|s1|1|cl|m110"
    assert F.without_unaligned_part("float16|k3|s1|1|cl") is None


def test_a_strided_batch_norm_backward_runs_one_block_per_channel():
    """GhostNet's ghost modules backpropagate through `cat(...)[:, :oup]`: the batch norm backward
    gets a channel slice of a channels-last gradient (dense in no order), and ATen runs its
    generic kernels, a reduction with one block per channel and an element-wise pass. On the H200
    ([256, 12, 56, 56] bf16, 24-channel pixel stride) 698 + 36 us; the bandwidth roofline said
    39 us. Fitted on that profile's 11 strided shapes (profiles/h200.json `backward_reduce`)."""
    g = T((256, 12, 56, 56), "bfloat16", stride=(24 * 56 * 56, 1, 24 * 56, 24))
    x, v = CL(256, 12, 56, 56), T((12,), "float32")
    op = call("aten::native_batch_norm_backward", [g, x, v, v, v, v, v, True, 1e-5, [True, True, True]], [x, v, v])
    ks = estimate(op, "h200")
    assert [k.name.split("<")[0] for k in ks] == ["void at::native::batch_norm_backward_reduce_kernel",
                                                  "void at::native::batch_norm_backward_elemt_kernel"]
    assert ks[0].grid == (12, 1, 1)
    assert total(ks) / 1e3 == pytest.approx(698 + 36, rel=0.15)
    dense = call("aten::native_batch_norm_backward", [x, x, v, v, v, v, v, True, 1e-5, [True, True, True]], [x, v, v])
    assert total(estimate(dense, "h200")) < total(ks) / 5  # the channels-last kernels: all SMs busy


def test_the_table_with_the_nearest_point_answers():
    """The H100 table holds 3x3 convolutions over maps of 9..75 (sweep conv_maps, session 38); the
    H200's full grid holds 56 x 56 and others. An H100 query takes the H100's points where they
    are nearest (Inception-v3's 96 -> 96 over 35 x 35: 176 us per backward in its H100 profile,
    79 us from the H200 grid's 56 x 56 points, scaled) and the H200's, carried, elsewhere."""
    from phantora_prof import cost as C

    def bwd(n, c, h):
        x = CL(n, c, h, h)
        w = T((c, c, 3, 3), "bfloat16", stride=(9 * c, 1, 3 * c, c))
        return call("aten::convolution_backward", [x, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                   [True, True, False]], [x, w])

    _, ref, _ = C._family_table(bwd(64, 96, 35), "convolution_backward", get_gpu("h100"), O.convolution)
    assert ref.key == "h100"
    _, ref, _ = C._family_table(bwd(128, 256, 56), "convolution_backward", get_gpu("h100"), O.convolution)
    assert ref.key == "h200"
    assert total(estimate(bwd(64, 96, 35), "h100")) / 1e3 == pytest.approx(176, rel=0.3)


def test_upsampling_is_interpolated_over_its_scale():
    """RAFT's flow upsampling (x8, 2 channels, fp32 NCHW, align_corners): its backward's atomic adds
    pile scale^2 onto each input element, 156 us per call in RAFT's H100 profile; sized like a x2
    map of many channels the sweep said 34 us. The scale is a feature of its own (sweep upsample
    again with 2- and 3-channel maps on the H100, session 38)."""
    g, x = T((8, 2, 368, 496), "float32"), T((8, 2, 46, 62), "float32")
    op = call("aten::upsample_bilinear2d_backward", [g, [368, 496], [8, 2, 46, 62], True, None, None], [x])
    assert F.shape_features(op, "upsample_bilinear2d_backward") == (8, 2, 368, 496, 8)
    assert total(estimate(op, "h100")) / 1e3 == pytest.approx(156, rel=0.2)


def _upsample_backward(grad, in_size):
    out = T(in_size, "float32")
    return call("aten::upsample_bilinear2d_backward", [grad, list(grad.shape[2:]), list(in_size), False, None, None],
                [out])


def test_upsample_backward_of_a_channel_slice_copies_it_channels_last_first():
    """DeepLabV3's ASPP and SegFormer's decode head concatenate upsampled branches in
    channels-last, so each branch's backward gets a channel slice of the concatenation's
    gradient. ATen makes it dense in the format it suggests before its kernels
    (UpSampleBilinear2d.cu): on the H200 a strided copy (198 us for (16, 256, 128, 128) fp32
    out of 1,024 channels), the zeroing of the gradient's buffer, then the NHWC backward (576 us
    from 32 x 32). Before, the strided gradient had no family class and was priced as one copy."""
    sliced = T((16, 256, 128, 128), "float32", stride=(16777216, 1, 131072, 1024))
    dense = T((16, 256, 128, 128), "float32", stride=(4194304, 1, 32768, 256))
    ks = estimate(_upsample_backward(sliced, (16, 256, 32, 32)), "h200")
    plain = estimate(_upsample_backward(dense, (16, 256, 32, 32)), "h200")
    assert "copy" in ks[0].name and [k.name for k in ks[1:]] == [k.name for k in plain]
    assert any("upsample_bilinear2d_backward_nhwc" in k.name for k in plain)
    assert 150_000 < total(ks) - total(plain) < 260_000


def test_upsample_to_its_own_size_is_a_copy():
    """SegFormer resizes its first stage's features to their own size: ATen copies (the forward
    `output.copy_(input)`; the backward zeroes the gradient's buffer and copies into it), on the
    H200 a fill (57 us) and a 198 us copy for (16, 256, 128, 128) fp32, not an upsampling kernel."""
    g = T((16, 256, 128, 128), "float32", stride=(16777216, 1, 131072, 1024))
    ks = estimate(_upsample_backward(g, (16, 256, 128, 128)), "h200")
    assert len(ks) == 2 and "Fill" in ks[0].name and "copy" in ks[1].name
    x = T((16, 256, 64, 64), "float32")
    fwd = estimate(call("aten::upsample_bilinear2d", [x, [64, 64], False, None, None], [T((16, 256, 64, 64))]), "h200")
    assert all("upsample" not in k.name for k in fwd)


def test_out_of_place_masked_fill_clones_then_fills():
    """ATen's masked_fill clones its input, then runs masked_fill_ on the clone: HF Mixtral's
    router on the H200 ran a DtoD copy (155 us) and the broadcast-mask fill (200 us) for
    (16384, 3584) fp32; one fill kernel was priced before."""
    x = T((16384, 3584), "float32")
    mask = T((16384, 1), "bool")
    ks = estimate(call("aten::masked_fill.Scalar", [x, mask, 0.0], [T((16384, 3584), "float32")]), "h200")
    inplace = estimate(call("aten::masked_fill_.Scalar", [x, mask, 0.0], [x]), "h200")
    assert [k.name for k in ks[1:]] == [k.name for k in inplace] and "Memcpy DtoD" in ks[0].name
    assert total(ks) > total(inplace) + 80_000


def test_operands_dense_in_different_orders_are_their_own_class():
    """An NCHW map plus a channels-last one (or a sequence plus a transposed one) is class
    `mixed`: each operand dense, one read across its layout. Where no table measured it, the
    strided class answers (the same TensorIterator kernel)."""
    a = T((128, 384, 14, 14), "bfloat16")
    b = T((128, 384, 14, 14), "bfloat16", stride=(75264, 1, 5376, 384))
    op = call("aten::add.Tensor", [a, b], [T((128, 384, 14, 14), "bfloat16")])
    assert F.class_key(op, "add") == "bfloat16|mixed"
    assert F.stand_in_keys("add", "bfloat16|mixed") == ("bfloat16|strided",)
    transposed = call("aten::add.Tensor", [a, T((128, 384, 14, 14), "bfloat16", stride=(75264, 196, 1, 14))],
                      [T((128, 384, 14, 14), "bfloat16")])
    assert F.class_key(transposed, "add") == "bfloat16|mixed"
    sliced = call("aten::add.Tensor", [a, T((128, 384, 14, 14), "bfloat16", stride=(150528, 196, 14, 1))],
                  [T((128, 384, 14, 14), "bfloat16")])
    assert F.class_key(sliced, "add") == "bfloat16|strided"  # a channel slice: not dense at all
    ks = estimate(op, "h200")
    assert len(ks) == 1 and "vectorized" not in ks[0].name
