"""Per-op cost plans: which kernels an aten op launches and what its roofline cost is.

A handler takes the captured call and returns (Cost, [KernelSpec]). Each KernelSpec either
carries a fixed duration (memsets, serial helper kernels) or a weight: the op's roofline
time minus the fixed parts is shared among the weighted kernels in proportion.
"""
from __future__ import annotations

import dataclasses
import json
import math
from functools import lru_cache
from pathlib import Path

from phantora_prof.cost import kernels as K
from phantora_prof.cost import split_k
from phantora_prof.cost.kernels import KernelSpec
from phantora_prof.cost.memory_format import strides_like_channels_last
from phantora_prof.cost.profiles import profile_for
from phantora_prof.cost.roofline import (
    ATTENTION, CHANNEL_ALIGNMENT, COPY, ELEMENTWISE, GEMM, INDEX, MEMSET, NORM, OPTIMIZER, REDUCTION, Cost,
    all_inputs, arg, bn_channels_last_batch, conv_flops, dense_order, eff_for, first_tensor, hbm_bw, io_bytes,
    is_contiguous, iter_tensors, mm_flops, one_dense_layout, op_time_ns, padded_channels, sdpa_flops,
    shared_unit_inner, tensor_bytes,
)
from phantora_prof.protocol import TensorArg

# ops that launch nothing on the GPU (views, metadata, allocation)
NO_GPU_WORK = frozenset("""
view _unsafe_view as_strided _reshape_alias reshape alias detach detach_ t transpose transpose_ t_
permute expand expand_as squeeze squeeze_ unsqueeze unsqueeze_ slice select narrow split split_with_sizes
unbind chunk tensor_split diagonal view_as view_as_real view_as_complex movedim swapaxes swapdims
empty empty_like empty_strided new_empty new_empty_strided empty_permuted lift_fresh lift lift_fresh_copy_
set_ resize_ resize_as_ is_same_size _has_compatible_shallow_copy_type sym_size sym_stride sym_numel
sym_storage_offset size stride numel dim is_contiguous record_stream _version _nested_tensor_size
unflatten flatten contiguous _conj _neg_view conj resolve_conj resolve_neg real imag
_indices _values indices values crow_indices col_indices is_nonzero _assert_async _assert_tensor_metadata
_functional_assert_async _print item _is_any_true to prim_layout prim_device
_use_cudnn_ctc_loss _use_miopen_ctc_loss _fused_sdp_choice is_set_to is_coalesced is_pinned _is_zerotensor
_debug_has_internal_overlap
""".split())

FILL_OPS = frozenset("""
fill_ zero_ zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full scalar_tensor
""".split())

RNG_OPS = frozenset("""
uniform_ normal_ bernoulli_ bernoulli random_ exponential_ geometric_ cauchy_ log_normal_ rand randn
rand_like randn_like randint randint_like normal
""".split())

GEMM_OPS = frozenset("mm addmm bmm baddbmm addbmm _scaled_mm _int_mm addmv mv dot vdot _addmm_activation addr".split())
ATTN_OPS = frozenset("""
_scaled_dot_product_cudnn_attention _scaled_dot_product_cudnn_attention_backward
_scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_backward
_scaled_dot_product_efficient_attention _scaled_dot_product_efficient_attention_backward
_flash_attention_forward _flash_attention_backward _efficient_attention_forward _efficient_attention_backward
_cudnn_attention_forward _cudnn_attention_backward _scaled_dot_product_fused_attention_overrideable
_scaled_dot_product_fused_attention_overrideable_backward
""".split())
REDUCE_OPS = frozenset("""
sum mean amax amin max min prod norm linalg_vector_norm var var_mean std std_mean argmax argmin any all
logsumexp nansum count_nonzero aminmax
""".split())
COPY_OPS = frozenset("_to_copy copy_ clone _copy_from _copy_from_and_resize copy".split())
TRANSCENDENTAL = frozenset("gelu silu tanh sigmoid exp erf erfinv log softplus mish elu selu celu sin cos rsqrt".split())

_LN_TO_DTYPE = {"float32": "float", "bfloat16": "c10::BFloat16", "float16": "c10::Half", "float64": "double"}


def _numel(t: TensorArg | None) -> int:
    return 0 if t is None else t.numel


def _outs(op) -> list[TensorArg]:
    return [t for t in iter_tensors(op.outputs)]


def _split32(max_bytes: int) -> int:
    """TensorIterator splits kernels until every operand's byte offsets fit in int32."""
    if max_bytes < 2**31:
        return 1
    return 1 << math.ceil(math.log2(max_bytes / (2**31 - 1)))


def _split(specs: list[KernelSpec], tensors) -> list[KernelSpec]:
    mx = max((t.nbytes for t in tensors), default=0)
    n = _split32(mx)
    if n == 1:
        return specs
    out = []
    for s in specs:
        g = (max(1, s.grid[0] // n), s.grid[1], s.grid[2])
        out.extend(KernelSpec(s.kind, s.name, g, s.block, s.regs, s.smem, s.nbytes, s.api, s.weight / n)
                   for _ in range(n))
    return out


# ------------------------------------------------------------------ GEMM


def _is_t(t: TensorArg) -> bool:
    """Column-major operand (a transposed view): what cuBLAS sees as 'T'."""
    if len(t.shape) < 2:
        return False
    return t.stride[-2] == 1 and t.stride[-1] != 1 and t.shape[-2] > 1


def gemm(op, base, gpu, allow_tf32):
    a = op.args
    bias = False
    if base in ("mm", "_int_mm", "_scaled_mm"):
        x, w = a[0], a[1]
    elif base in ("addmm", "_addmm_activation"):
        c, x, w = a[0], a[1], a[2]
        bias = isinstance(c, TensorArg) and len(c.shape) == 1
    elif base == "bmm":
        x, w = a[0], a[1]
    elif base in ("baddbmm", "addbmm"):
        x, w = a[1], a[2]
    elif base in ("addmv", "mv"):
        x, w = (a[1], a[2]) if base == "addmv" else (a[0], a[1])
    else:  # dot, vdot, addr
        x = first_tensor(op)
        w = x
    dtype = x.dtype
    if base in ("mv", "addmv"):
        m, k = x.shape[-2], x.shape[-1]
        n, batch = 1, 1
    elif base in ("dot", "vdot"):
        m, k, n, batch = 1, x.numel, 1, 1
    elif base == "addr":
        m, n, k, batch = a[1].numel, a[2].numel, 1, 1
    else:
        m, k = x.shape[-2], x.shape[-1]
        n = w.shape[-1]
        batch = 1
        for d in x.shape[:-2]:
            batch *= d
    flops = mm_flops(m, k, n, batch)
    # A and B stream through the main loop (overlapped with the math); the epilogue that
    # reads C/bias and writes the output does not overlap it.
    outs = _outs(op)
    out_bytes = sum(tensor_bytes(t) for t in outs) if outs else m * n * batch * x.itemsize
    ab_bytes = tensor_bytes(x) + (tensor_bytes(w) if w is not x else 0)
    epi_bytes = out_bytes
    c_bytes = 0  # a full-size C read with beta != 0: at its own, measured, bandwidth
    if base in ("addmm", "baddbmm", "addbmm", "addmv", "_addmm_activation"):
        if _reads_full_c(op, base, outs):
            c_bytes = tensor_bytes(a[0])
        else:
            epi_bytes += tensor_bytes(a[0])
    # few output tiles leave SMs idle (wave tail): time x (1 + TAIL * SMs / tiles of 128x128)
    tiles = split_k.output_tiles(m, n, batch)
    # cuBLAS splits a long K over more CTAs when the output has few tiles: where it does for
    # 16-bit mm / addmm on Hopper is read from a sweep (cost/split_k.py); elsewhere a rule
    split = 1
    swept = None
    if gpu.compute_capability[0] >= 9 and base in ("mm", "addmm"):
        swept = split_k.splits(m, n, k, batch, dtype, _is_t(x), _is_t(w), gpu.key)
    if swept if swept is not None else (k >= 16384 and tiles < 2 * gpu.num_sms):
        split = max(2, min(4, -(-2 * gpu.num_sms // tiles)))
    mult = 1.0 + profile_for(gpu).gemm_tail * gpu.num_sms / (tiles * split)
    if dtype in ("float32",):
        eff = "gemm_tf32" if allow_tf32 else "gemm_fp32"
    elif dtype == "float64":
        eff = "gemm_fp32"
    else:
        eff = "gemm"
    peak = gpu.peak_flops(dtype, allow_tf32)
    epi_ns = epi_bytes / (hbm_bw(gpu) * eff_for(eff, gpu).mem) * 1e9
    if c_bytes:
        epi_ns += c_bytes / (hbm_bw(gpu) * eff_for("gemm_c_read", gpu).mem) * 1e9
    cost = Cost(GEMM, eff, flops, ab_bytes, peak, extra_ns=epi_ns, compute_mult=mult)
    if m * n * k == 0:
        return cost, []
    specs = K.gemm_specs(gpu, m, n, k, batch, dtype, _is_t(x), _is_t(w), bias, allow_tf32, split,
                         b_dtype=getattr(w, "dtype", None))
    return cost, specs


def _reads_full_c(op, base: str, outs) -> bool:
    """Whether the GEMM's epilogue reads a C as large as its output (beta != 0): baddbmm's after
    ATen's `result.copy_(self)` (cost/__init__._baddbmm_self_split), addmm's with a matrix C.
    A bias vector's read stays in the epilogue's bytes."""
    c = op.args[0] if op.args else None
    out = outs[0] if outs else None
    if not (isinstance(c, TensorArg) and isinstance(out, TensorArg)) or c.numel < 2 or c.numel != out.numel:
        return False
    return arg(op, base, "beta", 1) != 0


_GROUPED_MM_NAMES = Path(__file__).parent / "data" / "grouped_mm_h200.json"


@lru_cache(maxsize=1)
def _grouped_mm_names() -> dict:
    return json.loads(_GROUPED_MM_NAMES.read_text())


def grouped_mm(op, base, gpu, allow_tf32):
    """torch._grouped_mm (mixture-of-experts layers: one GEMM per expert over its rows, `offs`
    the groups' ends): CUTLASS's grouped GEMM after a one-block kernel that prepares the groups'
    pointers. FLOPs as the dense product of the groups together (a 2-D x 3-D forward: the rows
    of A split among the experts; 2-D x 2-D, the weight gradient: the shared dim split);
    efficiency `grouped_gemm` of the profile (measured on an H200 MoE step, the routing's
    imbalance included). Kernel names: the H200's bf16 ones, by B's layout."""
    a, b = op.args[0], op.args[1]
    if not (isinstance(a, TensorArg) and isinstance(b, TensorArg)) or len(a.shape) < 2 or len(b.shape) < 2:
        return Cost(GEMM, "grouped_gemm"), []
    if len(a.shape) == 2 and len(b.shape) == 3:
        flops, variant = 2.0 * a.shape[0] * a.shape[1] * b.shape[2], ("b_col_major" if b.stride[-2] == 1 else "b_row_major")
    elif len(a.shape) == 2 and len(b.shape) == 2:
        flops, variant = 2.0 * a.shape[0] * a.shape[1] * b.shape[1], "weight_grad"
    else:  # 3-D A: a batch of groups
        groups = a.shape[0] if len(a.shape) == 3 else b.shape[0]
        flops, variant = 2.0 * groups * a.shape[-2] * a.shape[-1] * b.shape[-1], "b_row_major"
    outs = _outs(op)
    nbytes = tensor_bytes(a) + tensor_bytes(b) + sum(tensor_bytes(t) for t in outs)
    cost = Cost(GEMM, "grouped_gemm", flops, nbytes, gpu.peak_flops(a.dtype, allow_tf32))
    table = _grouped_mm_names()
    prepare, main = table[variant]
    specs = [KernelSpec(K.KIND_KERNEL, prepare, (1, 1, 1), (8, 1, 1), 38, 0, dur_ns=int(table["prepare_ns"])),
             KernelSpec(K.KIND_KERNEL, main, (gpu.num_sms, 1, 1), (384, 1, 1), 168, 215040, api=K.API_KERNEL_EX)]
    return cost, specs


def sort_op(op, base, gpu, allow_tf32):
    """A sort along a dim whose rows are long (one row, or rows over 4096 elements) as ATen runs
    it on CUDA: cub's onesweep radix sort of (key, index) pairs: the input copied, the indices
    filled, a histogram and its exclusive sum, then one onesweep pass per 8 bits of the key
    (8 for int64) each after a memset (the H200 trace of tools/holdout/moe.py: 8192 int64 keys,
    ~57 us in 10 kernels and 10 memsets; 1.25 us when costed as one elementwise kernel). The
    passes' bandwidth at large sizes is not measured (profile eff `radix_sort_pass`). Short
    rows (bitonic sorts in shared memory, one block per row) keep the elementwise model."""
    x = op.args[0] if op.args else None
    if not isinstance(x, TensorArg) or not x.shape:
        return elementwise(op, base, gpu, allow_tf32)
    dim = arg(op, base, "dim", -1)
    dim = int(dim if isinstance(dim, int) else -1) % len(x.shape)
    n = x.shape[dim]
    if x.numel // max(1, n) > 1 and n <= 4096:
        return elementwise(op, base, gpu, allow_tf32)
    passes = max(1, -(-x.itemsize * 8 // 8))
    e_pass, e_setup = eff_for("radix_sort_pass", gpu), eff_for("radix_sort_setup", gpu)
    pair_bytes = 2 * x.numel * (x.itemsize + 8)  # read and write the (key, index) pairs
    pass_ns = e_pass.t0_ns + pair_bytes / (hbm_bw(gpu) * e_pass.mem) * 1e9
    t = K.cpp(x.dtype)
    specs = [KernelSpec(K.KIND_MEMCPY, "Memcpy DtoD (Device -> Device)", nbytes=x.numel * x.itemsize, api=K.API_MEMCPY,
                        dur_ns=-1),
             KernelSpec(K.KIND_KERNEL, "at::native::(anonymous namespace)::fill_reverse_indices_kernel(long*, int, "
                        "at::cuda::detail::IntDivider<unsigned int>)", (max(1, -(-x.numel // 1024)), 1, 1), (1024, 1, 1),
                        16, 0, weight=e_setup.t0_ns / 4),
             KernelSpec(K.KIND_MEMSET, K.MEMSET_NAME, nbytes=8),
             KernelSpec(K.KIND_MEMSET, K.MEMSET_NAME, nbytes=8 * 256),
             KernelSpec(K.KIND_KERNEL, f"void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortHistogramKernel<{t}>",
                        (gpu.num_sms * 7, 1, 1), (128, 1, 1), 32, 0, weight=e_setup.t0_ns / 2),
             KernelSpec(K.KIND_KERNEL, f"void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortExclusiveSumKernel<{t}>",
                        (passes, 1, 1), (256, 1, 1), 32, 0, weight=e_setup.t0_ns / 4)]
    for _ in range(passes):
        specs.append(KernelSpec(K.KIND_MEMSET, K.MEMSET_NAME, nbytes=8 * 256))
        specs.append(KernelSpec(K.KIND_KERNEL, f"void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<{t}>",
                                (max(1, -(-x.numel // 5376)), 1, 1), (384, 1, 1), 64, 0, weight=pass_ns))
    cost = Cost(INDEX, "radix_sort_setup", 0.0, 0.0, extra_ns=passes * pass_ns)
    return cost, specs


# ops whose fp32 math cuDNN does on a CUDA build: cuDNN's TF32 switches govern them (default on),
# not the matmul one (default off); runtime/dispatch/capture.py reads the switches a run set
CUDNN_CONV_OPS = ("aten::convolution", "aten::_convolution", "aten::cudnn_convolution")
CUDNN_RNN_OPS = ("aten::_cudnn_rnn",)


def default_tf32(name: str) -> bool:
    """Whether op `name` may use TF32 under torch's default switches (what a profile that does
    not record the run's switches is priced with)."""
    return name.startswith(CUDNN_CONV_OPS + CUDNN_RNN_OPS)


def convolution(op, base, gpu, allow_tf32):
    a = op.args
    outs = _outs(op)
    if base == "convolution_backward":
        grad, x, w = a[0], a[1], a[2]
        transposed = bool(arg(op, base, "transposed", False))
        mask = arg(op, base, "output_mask", (True, True, True)) or (True, True, True)
        f1 = conv_flops(x.shape, w.shape, grad.shape, transposed)
        flops = f1 * ((1 if mask[0] else 0) + (1 if mask[1] else 0))
        names = []
        if mask[0]:
            names.append("dgrad")
        if mask[1]:
            names.append("wgrad")
    else:
        x, w = a[0], a[1]
        transposed = bool(arg(op, base, "transposed", False))
        out = outs[0] if outs else x
        flops = conv_flops(x.shape, w.shape, out.shape, transposed)
        names = ["fprop"]
    dtype = x.dtype
    short = {"bfloat16": "bf16bf16_bf16f32_f32", "float16": "f16f16_f16f32_f32"}.get(
        dtype, "tf32f32_tf32f32_f32" if allow_tf32 else "f32f32_f32f32_f32")
    sm = gpu.arch
    specs = []
    for nm in names:
        name = (f"{sm}_xmma_{nm}_implicit_gemm_{short}_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_"
                f"g1_execute_segment_k_off_kernel__5x_cudnn")
        specs.append(KernelSpec(K.KIND_KERNEL, name, (min(gpu.num_sms, 1024), 1, 1), (128, 1, 1), 168, 98304,
                                api=K.API_KERNEL_EX))
    eff = "conv" if dtype in ("bfloat16", "float16") or allow_tf32 else "gemm_fp32"
    extra = 0.0
    if dtype in ("bfloat16", "float16") and len(x.shape) == 4 and is_contiguous(x) and x.shape[1] > 1:
        extra = _nchw_transposes(op, base, x, w, names, gpu, specs)
    cin = x.shape[1] if len(x.shape) > 2 else 1
    if dtype in ("bfloat16", "float16") and 0 < cin < CHANNEL_ALIGNMENT:
        flops *= padded_channels(cin) / cin  # tensor-core convolutions pad input channels to 8 (an RGB stem: 2.7x)
    elif dtype in ("bfloat16", "float16") and len(w.shape) > 1 and w.shape[1] == cin:
        # dense, channels not multiples of 8: cuDNN pads them (families.unaligned_channels_part;
        # the padding kernels themselves are only in the measured classes), so the tensor cores
        # compute the padded GEMM: 18 -> 24 channels in and out, 1.78x
        cout = w.shape[0]
        flops *= (padded_channels(cin) / cin) * (padded_channels(cout) / cout if cout >= CHANNEL_ALIGNMENT else 1.0)
    cost = Cost(GEMM, eff, flops, io_bytes(op), gpu.peak_flops(dtype, allow_tf32), extra_ns=extra)
    if extra > 0:  # share the op's time: transposes by their own time, the rest to the convolutions
        main = max(op_time_ns(cost, gpu) - extra, 1.0) / len(names)
        for spec in specs[:len(names)]:
            spec.weight = main
    return cost, specs


_DIRECT_FPROP = ("void cudnn::cnn::conv2d_grouped_direct_kernel<false, true, false, true, false, false, 0, 0, int, "
                 "float, {t}, {t}, {t}, float, {t}>(cudnn::cnn::GroupedDirectFpropParams, {t} const*, {t} const*, {t}*, "
                 "float, float, float const*, float const*, {t} const*, {t} const*, cudnnActivationStruct)")
_DIRECT_WGRAD = ("void cudnn::cnn::wgrad2d_grouped_direct_kernel<false, true, int, {t}, float, float>"
                 "(cudnn::cnn::WgradGroupedDirectParams, {t} const*, {t} const*, {t}*, float, float)")


def direct_depthwise(op, base, gpu):
    """(cost, specs) of a half-precision channels-last depthwise convolution with a non-square
    window (GhostNetV2's 1x5 / 5x1 DFC attention, InceptionNeXt's band kernels), or None for any
    other convolution. cuDNN runs these with its direct grouped kernels, not the specialized NHWC
    depthwise ones the square windows take: on the H100 (blind set 23's GhostNetV2 profile, twelve
    shapes, [128, 72..960, 3..28, 3..28]) `conv2d_grouped_direct_kernel` made 33-36 outputs per ns
    whatever the window, the data gradient `dgrad2d_c1_k1_nhwc` 112-133 inputs per ns for a 1 x k
    window and 62-70 for k x 1, and the weight gradient `wgrad2d_grouped_direct_kernel` (or, for
    some shapes, cuDNN's transform-and-GEMM path at about the same time) 28-36 outputs per ns
    (profile dw_direct_*). Priced at those rates, where the family tables (square windows, the
    specialized kernels) said 10-40x less; assumed the same on the H200 (approximate)."""
    if base not in ("convolution", "_convolution", "cudnn_convolution", "convolution_backward"):
        return None
    a = op.args
    bwd = base == "convolution_backward"
    x, w = (a[1], a[2]) if bwd else (a[0], a[1])
    if not (isinstance(x, TensorArg) and isinstance(w, TensorArg)) or len(x.shape) != 4 or len(w.shape) != 4:
        return None
    if x.dtype not in ("bfloat16", "float16") or bool(arg(op, base, "transposed", False)):
        return None
    c = x.shape[1]
    if w.shape[1] != 1 or w.shape[0] != c or c < 2 or w.shape[2] == w.shape[3]:
        return None
    if not (strides_like_channels_last(x.shape, x.stride) or strides_like_channels_last(w.shape, w.stride)):
        return None
    prof = profile_for(gpu)
    t = "__nv_bfloat16" if x.dtype == "bfloat16" else "__half"
    outs = _outs(op)
    out = a[0] if bwd else (outs[0] if outs else x)
    n_out = out.numel
    specs = []
    if not bwd:
        specs.append(KernelSpec(K.KIND_KERNEL, _DIRECT_FPROP.format(t=t), (max(1, -(-n_out // 1024)), 1, 1),
                                (1024, 1, 1), 40, 0, dur_ns=int(n_out / prof.dw_direct_fprop_per_ns)))
    else:
        mask = arg(op, base, "output_mask", (True, True, True)) or (True, True, True)
        if mask[0]:
            rate = prof.dw_direct_dgrad_row_per_ns if w.shape[2] == 1 else prof.dw_direct_dgrad_col_per_ns
            specs.append(KernelSpec(K.KIND_KERNEL, "dgrad2d_c1_k1_nhwc", (max(1, -(-c // 16)), max(1, x.shape[0]), 1),
                                    (256, 1, 1), 32, 0, dur_ns=int(x.numel / rate)))
        if len(mask) > 1 and mask[1]:
            specs.append(KernelSpec(K.KIND_KERNEL, _DIRECT_WGRAD.format(t=t), (max(1, -(-c * w.shape[2] * w.shape[3] // 2)), 1, 1),
                                    (256, 1, 1), 32, 0, dur_ns=int(n_out / prof.dw_direct_wgrad_per_ns)))
        if not specs:
            return None
    return Cost(GEMM, "conv", 0.0, io_bytes(op)), specs


def _nchw_transposes(op, base, x, w, names, gpu, specs) -> float:
    """cuDNN's half-precision convolution kernels are NHWC: on NCHW tensors it transposes the
    operands in (nchwToNhwc) and the result back (nhwcToNchw), per pass: fprop x, w -> y;
    dgrad dy, w -> dx; wgrad x, dy -> dw (the H200 cnn.py trace: 5.5 in- and 2.75
    out-transposes per convolution and step against 6 and 3 here). Returns their time and
    appends their kernels (weighted by their time) to `specs`."""
    t = "__nv_bfloat16" if x.dtype == "bfloat16" else "__half"
    e = eff_for("conv_transpose", gpu)
    bw = hbm_bw(gpu) * e.mem
    grad = op.args[0] if base == "convolution_backward" else None
    outs = _outs(op)
    moves: list[tuple[str, TensorArg]] = []
    if "fprop" in names:
        y = outs[0] if outs else x
        moves += [("in", x), ("in", w), ("out", y)]
    if "dgrad" in names:
        moves += [("in", grad), ("in", w), ("out", x)]
    if "wgrad" in names:
        moves += [("in", x), ("in", grad), ("out", w)]
    total = 0.0
    for direction, tensor in moves:
        ns = e.t0_ns + 2 * tensor_bytes(tensor) / bw * 1e9
        total += ns
        if direction == "in":
            name = (f"void cudnn::engines_precompiled::nchwToNhwcKernel<{t}, {t}, float, false, true, "
                    f"(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, {t} const*, {t}*)")
        else:
            name = (f"void cudnn::engines_precompiled::nhwcToNchwKernel<{t}, {t}, float, true, false, "
                    f"(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nhwc2nchw_params_t<float>, {t} const*, {t}*)")
        grid = (max(1, -(-tensor.numel // 2048)), 1, 1)
        specs.append(KernelSpec(K.KIND_KERNEL, name, grid, (256, 1, 1), 32, 2112, weight=ns))
    return total


# ------------------------------------------------------------------ attention

# Fused attention kernels work on tiles of (query, key) positions (profile.attn_tile: 128):
# a sequence that is not a multiple of it pays for the padded tiles. ViT-B/16 (197 tokens) on
# the H200: cuDNN fwd 47 us and bwd 157 us per call where the unpadded roofline gave 26 and
# 84 us; padding to 256 accounts for 1.69x of the 1.8x (tools/holdout/README.md). The wave
# tail of the tile schedule (profile.attn_t0_fwd_ns / attn_t0_bwd_ns at s_k=1024, d=64) is
# fitted on gpt_small vs gpt_b32.


def attention_tile_padding(s_q: int, s_k: int, tile: int) -> float:
    """Work of the padded tile grid over the unpadded one (>= 1)."""
    if s_q <= 0 or s_k <= 0:
        return 1.0
    return (math.ceil(s_q / tile) * tile * math.ceil(s_k / tile) * tile) / (s_q * s_k)


def attention(op, base, gpu, allow_tf32):
    backward = "backward" in base
    if backward:
        q, k, v = op.args[1], op.args[2], op.args[3]
    else:
        q, k, v = op.args[0], op.args[1], op.args[2]
    if base.startswith("_flash_attention") or base.startswith("_efficient_attention"):
        # [B, S, H, D] layout
        qs = (q.shape[0], q.shape[2], q.shape[1], q.shape[3])
        ks = (k.shape[0], k.shape[2], k.shape[1], k.shape[3])
        vs = (v.shape[0], v.shape[2], v.shape[1], v.shape[3])
    else:
        qs, ks, vs = q.shape, k.shape, v.shape
    if base.startswith("_efficient_attention"):
        causal = (arg(op, base, "custom_mask_type", 0) or 0) != 0
    else:
        causal = bool(arg(op, base, "is_causal", False))
    flops = sdpa_flops(qs, ks, vs, causal, backward)
    b = qs[0] if len(qs) == 4 else 1
    h = qs[1] if len(qs) == 4 else (qs[0] if len(qs) == 3 else 1)
    s_q, d = qs[-2], qs[-1]
    s_k = ks[-2]
    prof = profile_for(gpu)
    tail = (prof.attn_t0_bwd_ns if backward else prof.attn_t0_fwd_ns) * (s_k / 1024.0) * (d / 64.0)
    backend = "cudnn" if "cudnn" in base else ("flash" if "flash" in base else "efficient")
    if "overrideable" in base:
        backend = "flash"
    # no TF32 switch reaches the fused attention kernels: fp32 runs the memory-efficient kernel's
    # own fp32 path whatever torch's matmul precision (session 50: ViT-B in fp32 with
    # set_float32_matmul_precision("high") priced at the TF32 peak came out 4-5x too fast)
    cost = Cost(ATTENTION, "attention_bwd" if backward else "attention_fwd", flops, io_bytes(op),
                gpu.peak_flops(q.dtype), extra_ns=tail,
                compute_mult=attention_tile_padding(s_q, s_k, prof.attn_tile_fp32 if q.dtype == "float32" else prof.attn_tile))
    specs = K.attention_specs(gpu, backend, backward, b, h, s_q, d, q.dtype, causal)
    return cost, specs


# where the additive bias sits in the memory-efficient attention ops, and where the backward says
# whether it returns the bias's gradient (an index into the args, or a bool list and its position)
_ATTN_BIAS = {"_scaled_dot_product_efficient_attention": (3, None),
              "_efficient_attention_forward": (3, None),
              "_scaled_dot_product_efficient_attention_backward": (4, (10, 3)),
              "_efficient_attention_backward": (4, (15, None))}


def attention_bias_ns(op, base: str, gpu) -> float:
    """What an additive bias (`attn_mask` as a float tensor: relative-position biases, ALiBi)
    adds to a memory-efficient attention call: the kernel reads the bias once per score, and a
    backward that returns its gradient writes one per score, at rates measured on the H100
    (profile attn_bias_*_elems_per_ns: timm CoAtNet's [B, H, S, S] bias, 6x the forward's time at
    S = 196). The family points and sweeps were measured without one. 0 without a bias tensor."""
    where = _ATTN_BIAS.get(base)
    if where is None:
        return 0.0
    pos, grad_flag = where
    bias = op.args[pos] if len(op.args) > pos else None
    if not isinstance(bias, TensorArg) or bias.dtype == "bool":
        return 0.0
    prof = profile_for(gpu)
    if grad_flag is None:
        return bias.numel / prof.attn_bias_fwd_elems_per_ns
    idx, item = grad_flag
    flag = op.args[idx] if len(op.args) > idx else None
    wants = bool(flag[item]) if item is not None and isinstance(flag, (tuple, list)) and len(flag) > item else bool(flag)
    return bias.numel / (prof.attn_bias_bwd_elems_per_ns if wants else prof.attn_bias_fwd_elems_per_ns)


# ------------------------------------------------------------------ norms, softmax, losses

def layer_norm(op, base, gpu, allow_tf32):
    x = op.args[1] if base == "native_layer_norm_backward" else op.args[0]
    ns = arg(op, base, "normalized_shape", None)
    n = 1
    for d in (ns or x.shape[-1:]):
        n *= d
    rows = max(1, x.numel // max(n, 1))
    t = _LN_TO_DTYPE.get(x.dtype, "float")
    acc = "double" if x.dtype == "float64" else "float"
    rms = base.startswith("_fused_rms")
    flag = "true" if rms else "false"
    if "backward" not in base:
        name = (f"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<{t}, {acc}, {flag}>"
                f"(int, {acc}, {t} const*, {t} const*, {t} const*, {acc}*, {acc}*, {t}*)")
        specs = [KernelSpec(K.KIND_KERNEL, name, (rows, 1, 1), (32, 4, 1), 39, 24)]
        return Cost(NORM, "layer_norm", 0.0, io_bytes(op)), specs
    mask = arg(op, base, "output_mask", (True, True, True)) or (True, True, True)
    specs = []
    if mask[0]:
        name = (f"void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<{t}, {acc}, {flag}>"
                f"({t} const*, {t} const*, {acc} const*, {acc} const*, {t} const*, {t}*, int)")
        specs.append(KernelSpec(K.KIND_KERNEL, name, (rows, 1, 1), (128, 1, 1), 32, 16, weight=0.34))
    if len(mask) > 1 and (mask[1] or (len(mask) > 2 and mask[2])):
        name = (f"void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<{t}, {acc}, 32u, 32u, "
                f"256u, false, true, {flag}>(long, long, {t} const*, {t} const*, {acc} const*, {acc} const*, {t}*, {t}*)")
        specs.append(KernelSpec(K.KIND_KERNEL, name, (max(1, -(-n // 32)), 1, 1), (32, 32, 1), 31, 8448, weight=0.66))
    return Cost(NORM, "layer_norm_bwd", 0.0, io_bytes(op)), specs


# Native (non-cuDNN) batch norm on NCHW-contiguous input in training: the statistics (forward)
# and the fused backward kernel reduce each channel in one thread block (grid = C), so with
# few channels most SMs idle and the per-block reduction is latency-bound: time grows with
# N*H*W per channel, not with bytes over HBM bandwidth. Fitted on the H200 bf16 kernels of
# tools/holdout/cnn.py (ResNet-18 style, batch 64, C = 64..512, N*H*W = 3k..803k; fits within
# 5% per channel count); an approximation elsewhere: other GPUs keep the per-block rate
# (a latency, not a bandwidth) and only change how many blocks run at once. The rates are
# the profile's bn_block_elems_per_s / bn_block_t0_ns / bn_blocks_per_sm.

_BN_ACC = ("torch::headeronly::detail::GenericPackedTensorAccessor<torch::headeronly::detail::TensorAccessor<"
           "c10::ArrayRef<long>, {t}, {n}ul, torch::headeronly::{traits}, int>, at::detail::IndexBoundsCheck<{d}ul, int>, "
           "{t}, {d}ul, torch::headeronly::{traits}, int>")


def _bn_acc(t: str, dims: int, traits: str = "RestrictPtrTraits") -> str:
    return _BN_ACC.format(t=t, n=dims - 1, d=dims, traits=traits)


def bn_nchw_training(op, base, x: TensorArg) -> bool:
    """Training-mode batch norm of a contiguous (NCHW) input: the channel-block kernels."""
    if len(x.shape) < 3 or not is_contiguous(x):  # channels-last and 2-D inputs take other kernels
        return False
    if "backward" in base:
        return bool(arg(op, base, "train", True))
    if base == "_batch_norm_with_update":
        return True
    return bool(arg(op, base, "training", True))


def bn_strided_training(op, base, x: TensorArg) -> bool:
    """A training-mode batch norm backward whose input and output gradient are not in one memory
    format: one dense in no order (a channel slice of a channels-last map: GhostNet's ghost
    modules backpropagate through `cat(...)[:, :oup]`), or one contiguous and the other
    channels-last. ATen's NCHW and channels-last kernels each need both in their format, so it
    runs the generic ones, a reduction with one block per channel and an element-wise pass (on
    the H200, [256, 12, 56, 56] bf16 with a 24-channel pixel stride: `batch_norm_backward_reduce_
    kernel` on 12 blocks 698 us, `elementwise_kernel` 36 us, where the bandwidth roofline said 39
    us in all; [256, 24, 56, 56] with an NCHW gradient and a channels-last input 656 + 86 us)."""
    if len(x.shape) < 3 or "cudnn" in base:
        return False
    if "backward" not in base:
        return False  # a strided forward: not seen in a profile yet, left to the generic path below
    grad = op.args[0] if isinstance(op.args[0], TensorArg) else x
    orders = (dense_order(x), dense_order(grad))
    if None not in orders and orders[0] == orders[1]:
        return False  # both in one memory format: the NCHW or the channels-last kernels
    return bool(arg(op, base, "train", True))


def bn_channel_block_training(op, base) -> bool:
    """Whether a batch norm runs ATen's kernels with one block per channel (NCHW or strided)."""
    x = op.args[1] if "backward" in base else op.args[0]
    return isinstance(x, TensorArg) and (bn_nchw_training(op, base, x) or bn_strided_training(op, base, x))


def _bn_strided(op, base, gpu, x: TensorArg):
    """A strided training batch norm backward (bn_strided_training): the channel-block model for
    its gradient sums (ATen's generic reduce kernel, ~2x the fused NCHW backward kernel's rate
    per element: it does not also write the input's gradient) and a bandwidth pass for the
    element-wise kernel that does, under the generic kernels' names."""
    t = K.cpp(x.dtype)
    c = x.shape[1]
    acc = f"at::GenericPackedTensorAccessor<{t}, 3ul, at::RestrictPtrTraits, long>"
    e = eff_for("norm", gpu)
    moved = 3 * tensor_bytes(x)  # the gradient and the input read, the input's gradient written
    elemt = e.t0_ns + moved / (hbm_bw(gpu) * e.mem) * 1e9
    reduce_ns = _bn_channel_blocks_ns(x, gpu, "backward_reduce")
    names = (f"void at::native::batch_norm_backward_reduce_kernel<{t}, float, float, long>({acc})",
             f"void at::native::batch_norm_backward_elemt_kernel<{t}, float, float, long>({acc})")
    specs = [KernelSpec(K.KIND_KERNEL, names[0], (c, 1, 1), (512, 1, 1), 32, 0, weight=reduce_ns),
             KernelSpec(K.KIND_KERNEL, names[1], (max(1, -(-x.numel // 512)), 1, 1), (128, 1, 1), 32, 0,
                        weight=elemt)]
    return Cost(NORM, "norm", 0.0, moved, extra_ns=reduce_ns), specs


def _bn_channel_blocks_ns(x: TensorArg, gpu, phase: str) -> float:
    c = x.shape[1]
    per_channel = x.numel // max(c, 1)
    prof = profile_for(gpu)
    waves = math.ceil(c / (gpu.num_sms * prof.bn_blocks_per_sm))
    return prof.bn_block_t0_ns[phase] + per_channel / prof.bn_block_elems_per_s[phase] * 1e9 * waves


def batch_norm_nchw(op, base, gpu, x: TensorArg):
    """Training batch norm on NCHW input: the native kernels' channel-block model above."""
    t = K.cpp(x.dtype)
    w = op.args[2] if "backward" in base else op.args[1]
    ts = K.cpp(w.dtype) if isinstance(w, TensorArg) else t
    c = x.shape[1]
    block = (512, 1, 1) if c <= 128 else ((256, 2, 1) if c <= 256 else (64, 8, 1))
    if "backward" in base:
        ct, rt = _bn_acc(f"{t} const", 3, "DefaultPtrTraits"), _bn_acc(t, 3, "DefaultPtrTraits")
        f1 = _bn_acc("float", 1, "DefaultPtrTraits")
        fc = _bn_acc("float const", 1, "DefaultPtrTraits")
        name = (f"void at::native::batch_norm_backward_kernel<{t}, {ts}, float, int>({ct}, {ct}, {rt}, {f1}, {f1}, "
                f"{fc}, {fc}, {fc}, {fc}, bool, float)")
        total = _bn_channel_blocks_ns(x, gpu, "backward")
        e = eff_for("norm", gpu)
        specs = [KernelSpec(K.KIND_KERNEL, name, (c, 1, 1), block, 30, 256)]
        return Cost(NORM, "norm", 0.0, 0.0, extra_ns=max(0.0, total - e.t0_ns)), specs
    stats = _bn_channel_blocks_ns(x, gpu, "forward")
    f1 = _bn_acc("float", 1)
    stats_name = (f"void at::native::batch_norm_collect_statistics_kernel<at::native::Var, {t}, {t}, float, int>"
                  f"({_bn_acc(f'{t} const', 3)}, float, float, {f1}, {f1})")
    sc = "std::conditional<true, float, float>::type"
    # the template's bool is `train` (the statistics are the batch's): true on this path, float
    # weights or not (every NCHW training batch norm of the kept H200 profiles)
    tr_name = (f"void at::native::batch_norm_transform_input_kernel<{t}, {ts}, float, true, int>"
               f"({_bn_acc(f'{t} const', 3)}, {_bn_acc(t, 3)}, {_bn_acc(sc, 1)}, {_bn_acc(sc, 1)}, "
               f"{_bn_acc('float const', 1)}, {_bn_acc('float const', 1)}, float)")
    transform_bytes = 2 * tensor_bytes(x)
    e = eff_for("norm", gpu)
    transform = e.t0_ns + transform_bytes / (hbm_bw(gpu) * e.mem) * 1e9
    # between them ATen turns the batch variance into invstd over C values: with running
    # statistics one multi-output kernel also updates them (batch_norm_update_stats_and_invert),
    # without (timm's weight standardisation: F.batch_norm(w, None, None, training=True)) a
    # vectorized batch_norm_calc_invstd (H200 profiles: 1.35 / 1.12 us; the launch floor of the
    # unrolled / vectorized element-wise classes, 1.4 / 1.2 us)
    running = isinstance(arg(op, base, "running_mean", None), TensorArg)
    invert_ns = eff_for("unrolled" if running else "vectorized", gpu).t0_ns
    specs = [KernelSpec(K.KIND_KERNEL, stats_name, (c, 1, 1), block, 27, 640, weight=stats),
             KernelSpec(K.KIND_KERNEL, _bn_invert_name(running), (max(1, -(-c // 512)), 1, 1), (128, 1, 1),
                        56 if running else 30, 0, weight=invert_ns),
             KernelSpec(K.KIND_KERNEL, tr_name, (c, 64, 1), (512, 1, 1), 23, 0, weight=transform)]
    return Cost(NORM, "norm", 0.0, transform_bytes, extra_ns=stats + invert_ns), specs


def _bn_invert_name(running: bool) -> str:
    """ATen's kernel that turns a batch norm's variance into invstd (and, with running statistics,
    updates them), as the H200 profiles name it."""
    ns = "at::native::(anonymous namespace)::"
    if running:
        fn = (f"{ns}batch_norm_update_stats_and_invert(at::Tensor const&, at::Tensor const&, at::Tensor const&, "
              f"at::Tensor const&, double, double, long)::{{lambda()#1}}::operator()() const::{{lambda()#2}}::"
              f"operator()() const::{{lambda(float, float, float, float)#1}}")
        calc = "TrivialOffsetCalculator<4, unsigned int>, TrivialOffsetCalculator<3, unsigned int>"
        return (f"void {ns}unrolled_elementwise_kernel_for_multi_outputs<3, {fn}, std::array<char*, 7ul>, {calc} >"
                f"(int, {fn}, std::array<char*, 7ul>, {calc})")
    fn = (f"{ns}batch_norm_calc_invstd(at::Tensor const&, at::Tensor const&, double)::{{lambda()#1}}::"
          f"operator()() const::{{lambda()#2}}::operator()() const::{{lambda(float)#1}}")
    return (f"void at::native::vectorized_elementwise_kernel<4, {fn}, std::array<char*, 2ul> >"
            f"(int, {fn}, std::array<char*, 2ul>)")


def batch_group_norm(op, base, gpu, allow_tf32):
    x = op.args[1] if "backward" in base else op.args[0]
    if "batch_norm" in base and "cudnn" not in base and bn_nchw_training(op, base, x):
        return batch_norm_nchw(op, base, gpu, x)
    if "batch_norm" in base and bn_strided_training(op, base, x):
        return _bn_strided(op, base, gpu, x)
    t = K.cpp(x.dtype)
    c = x.shape[1] if len(x.shape) > 1 else 1
    if "group" in base:
        names = [f"void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<{t}>(long, {t}, {t} const*, {t}*, {t}*)",
                 f"void at::native::(anonymous namespace)::ComputeFusedParamsCUDAKernel<{t}>(long, long, long, {t} const*, {t} const*, {t} const*, {t} const*, {t}*, {t}*)",
                 K.lambda_functor("GroupNormKernelImplInternal", x.dtype, 3)]
    elif "backward" in base:
        names = [f"void at::native::batch_norm_backward_reduce_kernel<{t}, float, float, long>(at::GenericPackedTensorAccessor<{t}, 3ul, at::RestrictPtrTraits, long>)",
                 f"void at::native::batch_norm_backward_elemt_kernel<{t}, float, float, long>(at::GenericPackedTensorAccessor<{t}, 3ul, at::DefaultPtrTraits, long>)"]
    else:
        names = [f"void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, {t}, float, 16, long>(at::GenericPackedTensorAccessor<{t} const, 3ul, at::RestrictPtrTraits, long>, float, float, at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>, at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>)",
                 f"void at::native::batch_norm_transform_input_kernel<{t}, float, float, long, true>(at::GenericPackedTensorAccessor<{t} const, 3ul, at::RestrictPtrTraits, long>)"]
    specs = [KernelSpec(K.KIND_KERNEL, n, (max(1, c), 1, 1), (512, 1, 1), 32, 0) for n in names]
    return Cost(NORM, "norm", 0.0, io_bytes(op) + tensor_bytes(x)), specs


SYNC_BN_OPS = frozenset(("batch_norm_stats", "batch_norm_gather_stats", "batch_norm_gather_stats_with_counts",
                         "batch_norm_elemt", "batch_norm_backward_reduce", "batch_norm_backward_elemt",
                         "batch_norm_update_stats"))


def sync_batch_norm(op, base, gpu, allow_tf32):
    """SyncBatchNorm's steps (torch/nn/modules/_functions.py) with the kernels of
    aten/native/cuda/Normalization.cu: per-channel statistics (`batch_norm_collect_statistics`),
    the group's reduction of every rank's (`batch_norm_reduce_statistics`), the normalisation
    (`batch_norm_transform_input`), the backward's reductions and element-wise pass; the
    channels-last variants for a channels-last input. Timed by the roofline over the bytes each
    reads and writes (approximate: not measured on a GPU; the statistics kernels read the input
    once, the element-wise ones read it and write their output)."""
    x = op.args[1] if base.startswith("batch_norm_backward") else op.args[0]
    t = K.cpp(x.dtype)
    nd = len(x.shape)
    c = x.shape[1] if nd > 1 else 1
    # ATen's batch_norm_use_channels_last_kernels: channels-last, or a 2-D (N, C) batch
    cl = (nd in (4, 5) and not is_contiguous(x) and x.stride[1] == 1) or bn_channels_last_batch(x.shape, x.stride)
    suffix = "_channels_last" if cl else ""
    kernel = {"batch_norm_stats": f"batch_norm_collect_statistics{suffix}_kernel<at::native::InvStd, {t}, float>",
              "batch_norm_update_stats": f"batch_norm_collect_statistics{suffix}_kernel<at::native::Var, {t}, float>",
              "batch_norm_gather_stats": f"batch_norm_reduce_statistics_kernel<{t}, float, float>",
              "batch_norm_gather_stats_with_counts": f"batch_norm_reduce_statistics_kernel<{t}, float, float>",
              "batch_norm_elemt": f"batch_norm_transform_input{suffix}_kernel<{t}, float, float>",
              "batch_norm_backward_reduce": f"batch_norm_backward_reduce{suffix}_kernel<{t}, float, float>",
              "batch_norm_backward_elemt": f"batch_norm_backward_elemt{suffix}_kernel<{t}, float, float>"}[base]
    if base.startswith("batch_norm_gather_stats"):
        nbytes = sum(tensor_bytes(a) for a in op.args[1:] if isinstance(a, TensorArg)) + \
            sum(tensor_bytes(o) for o in _outs(op))
    else:
        nbytes = io_bytes(op)
    spec = KernelSpec(K.KIND_KERNEL, f"void at::native::{kernel}", (max(1, c), 1, 1), (512, 1, 1), 32, 0)
    return Cost(NORM, "norm", 0.0, nbytes), [spec]


def softmax(op, base, gpu, allow_tf32):
    """Softmax and log-softmax, forward and backward, with the kernels torch 2.11 launches on
    the H200 (tools/holdout/real_h200/session24/probe_real.json.gz, rows of 49 to 4,096):
    - rows over the last dim up to 1,024 elements (and 4 KiB) run the persistent warp kernels,
      in the forward up to 2,048 elements (and 8 KiB: fp32 rows of 2,048 too);
    - longer rows: the forward `cunn_SoftMaxForwardReg` (the row in registers, 1,024 threads x
      ILP elements; beyond that the older block kernel, not measured), the backward
      `cunn_SoftMaxBackwardSmem` (the row in shared memory; beyond 48 KiB the older kernel);
    - softmax's backward (not log-softmax's) first multiplies grad by output in an `aten::mul`
      of its own (a vectorized MulFunctor kernel): two kernels, the op's time shared by weight.
    Other dims than the last: the spatial kernels."""
    backward = "backward" in base
    x = op.args[0]
    outs = _outs(op)
    out = outs[0] if outs else x
    dim = arg(op, base, "dim", -1)
    nd = len(x.shape)
    dim = (dim if isinstance(dim, int) else -1) % max(nd, 1)
    size = x.shape[dim] if nd else 1
    rows = max(1, x.numel // max(size, 1))
    log = "log" in base
    t_in, t_out = K.cpp(x.dtype), K.cpp(out.dtype)
    cost = Cost(REDUCTION, "softmax_bwd" if backward else "softmax", 0.0, io_bytes(op))
    pre = []
    if backward and not log and nd > 0:  # grad * output, ATen's own mul before the kernel
        pre = [K.vectorized_kernel(K.binary_functor("mul", x.dtype, False), 3, x.numel, (x.dtype,))]
    limit, row_bytes = (1024, 4096) if backward else (2048, 8192)
    if dim != nd - 1 and nd > 0:
        name = (f"void at::native::(anonymous namespace)::cunn_SpatialSoftMax{'Backward' if backward else 'Forward'}"
                f"<{t_in}, float, {t_out}, at::native::(anonymous namespace)::{'Log' if log else ''}SoftMax"
                f"{'Backward' if backward else 'Forward'}Epilogue>({t_out}*, {t_in} const*, unsigned int, unsigned int, unsigned int)")
        return cost, pre + [KernelSpec(K.KIND_KERNEL, name, (rows, 1, 1), (256, 1, 1), 32, 0)]
    if size <= limit and size * x.itemsize <= row_bytes:
        lg = max(0, math.ceil(math.log2(max(size, 1))))
        params = (f"({t_out}*, {t_in} const*, {t_in} const*, int, int, int, bool const*)" if backward
                  else f"({t_out}*, {t_in} const*, int, int, int, bool const*, int, bool)")
        name = (f"void (anonymous namespace)::softmax_warp_{'backward' if backward else 'forward'}<{t_in}, {t_out}, float, "
                f"{lg}, {'true' if log else 'false'}, false>{params}")
        return cost, pre + [KernelSpec(K.KIND_KERNEL, name, (max(1, -(-rows // 4)), 1, 1), (32, 4, 1), 32, 0)]
    ilp = K.vec_size((x.dtype,))
    epi = f"at::native::(anonymous namespace)::{'Log' if log else ''}SoftMax{'Backward' if backward else 'Forward'}Epilogue"
    if backward:
        block = max(32, min(1024, K.last_pow2(max(1, size // (2 * ilp)))))
        smem = size * x.itemsize + block // 32 * 4
        if smem <= 48 * 1024:
            name = (f"void at::native::(anonymous namespace)::cunn_SoftMaxBackwardSmem<{ilp}, {t_in}, float, {t_out}, {epi}>"
                    f"({t_out}*, {t_in} const*, {t_in} const*, long)")
            return cost, pre + [KernelSpec(K.KIND_KERNEL, name, (rows, 1, 1), (block, 1, 1), 32, smem)]
        name = f"void at::native::(anonymous namespace)::cunn_SoftMaxBackward<{ilp}, {t_in}, float, {t_out}, {epi}>({t_out}*, {t_in} const*, {t_in} const*, long)"
        return cost, pre + [KernelSpec(K.KIND_KERNEL, name, (rows, 1, 1), (512, 1, 1), 32, 2048)]
    if size <= 1024 * ilp:
        name = (f"void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<{t_in}, float, {t_out}, {epi}, long, {ilp}>"
                f"({t_out}*, {t_in} const*, long)")
        return cost, [KernelSpec(K.KIND_KERNEL, name, (rows, 1, 1), (1024, 1, 1), 32, 128)]
    name = f"void at::native::(anonymous namespace)::cunn_SoftMaxForward<{ilp}, {t_in}, float, {t_out}, {epi}>({t_out}*, {t_in} const*, int)"
    return cost, [KernelSpec(K.KIND_KERNEL, name, (rows, 1, 1), (1024, 1, 1), 32, 128)]


def scan(op, base, gpu, allow_tf32):
    """cumsum / cumprod on CUDA (ScanUtils.cuh): the input converted to the output's dtype first
    when they differ (an int mask's cumsum accumulates in int64: `aten::to` inside the op), then
    one scan kernel, over the innermost dim or an outer one. The H200 probe (session 24): an
    [8, 1024] int32 cumsum ran a copy and `tensor_kernel_scan_innermost_dim<long, std::plus<long>>`
    (grid 4, block 256 x 2). Its launch shape here is that one's generalisation; time: roofline."""
    x = op.args[0]
    outs = _outs(op)
    out = outs[0] if outs else x
    nd = len(x.shape)
    dim = arg(op, base, "dim", -1)
    dim = (dim if isinstance(dim, int) else -1) % max(nd, 1)
    size = x.shape[dim] if nd else 1
    rows = max(1, x.numel // max(size, 1))
    t = K.cpp(out.dtype)
    fn = "std::multiplies" if base.startswith("cumprod") else "std::plus"
    specs = []
    if x.dtype != out.dtype:
        specs.append(K.copy_kernel(x.dtype, out.dtype, x.numel, is_contiguous(x)))
    if dim == nd - 1 or nd <= 1:
        bx = max(1, min(256, K.last_pow2(max(1, size))))
        by = max(1, 512 // bx)
        name = (f"void at::native::tensor_kernel_scan_innermost_dim<{t}, {fn}<{t}> >({t}*, {t} const*, unsigned int, "
                f"unsigned int, unsigned int, {t}, {fn}<{t}>)")
        specs.append(KernelSpec(K.KIND_KERNEL, name, (max(1, -(-rows // by)), 1, 1), (bx, by, 1), 32, 2 * bx * by * out.itemsize))
    else:
        inner = max(1, math.prod(x.shape[dim + 1:]))
        outer = max(1, x.numel // max(1, size * inner))
        name = (f"void at::native::tensor_kernel_scan_outer_dim<{t}, {fn}<{t}> >({t}*, {t} const*, unsigned int, "
                f"unsigned int, unsigned int, {t}, {fn}<{t}>)")
        specs.append(KernelSpec(K.KIND_KERNEL, name, (max(1, min(outer, 65535)), max(1, -(-inner // 512)), 1),
                                (min(512, inner), 1, 1), 32, 0))
    return Cost(REDUCTION, "vectorized", 0.0, io_bytes(op) + (tensor_bytes(out) if x.dtype != out.dtype else 0)), specs


def nll_loss(op, base, gpu, allow_tf32):
    """NLL loss: its forward reduction and backward scatter each run in one block (serial)."""
    prof = profile_for(gpu)
    if base.startswith("nll_loss_backward") or base == "nll_loss2d_backward":
        grad_in = _outs(op)[0] if _outs(op) else op.args[1]
        target = op.args[2]
        n = target.numel
        fill = K.fill_kernel(grad_in.dtype, grad_in.numel)
        t = K.cpp(grad_in.dtype)
        red = KernelSpec(K.KIND_KERNEL, f"void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<{t}, long>"
                         f"({t}*, {t} const*, long const*, {t} const*, {t} const*, bool, int, int, long, long)",
                         (1, 1, 1), (512, 1, 1), 32, 0, dur_ns=int(prof.nll_bwd_fixed_ns + prof.nll_bwd_ns_per_row * n))
        return Cost(REDUCTION, "fill", 0.0, tensor_bytes(grad_in)), _split([fill], [grad_in]) + [red]
    x, target = op.args[0], op.args[1]
    n = target.numel
    t = K.cpp(x.dtype)
    name = (f"void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<{t}, float, long>"
            f"({t}*, {t}*, {t} const*, long const*, {t} const*, bool, long, long, long, long)")
    cost = Cost(REDUCTION, "serial", 0.0, target.nbytes + n * x.itemsize,
                extra_ns=prof.nll_serial_t0_ns + prof.nll_serial_ns_per_row * n)
    return cost, [KernelSpec(K.KIND_KERNEL, name, (1, 1, 1), (512, 1, 1), 32, 4096)]


# Reductions whose CUDA kernel ATen sets up with make_reduction_from_out_ty (ReduceOps.cpp): the
# input is read in the output's dtype, so an input of another dtype is first cast (`self.to(dtype)`,
# a copy kernel and a temporary), except a 16-bit float input summed into float32, which the
# kernels read as it is. `mask.sum()` (bool into int64), an int32 sum (into int64), a float32
# sum into bf16 run that cast; `x.sum(dtype=torch.float32)` of bf16 does not.
CAST_BEFORE_REDUCE = frozenset({"sum", "nansum", "prod", "mean"})


# Set by the capture on a `sum.default` whose cast the learned op_children tree already lays out
# inside it (aten::sum > aten::sum > aten::to > ...): the cast's copy kernel is then one of the
# op's own launches (cost/__init__.py `_reduce_cast_input`). No real op has an argument of this name.
CAST_IN_KERNELS_KWARG = "phantora_cast_in_kernels"


def reduction_input_dtype(base: str, in_dtype: str, out_dtype: str) -> str:
    """The dtype a CUDA build's kernel of reduction `base` reads its input in."""
    if base not in CAST_BEFORE_REDUCE or in_dtype == out_dtype:
        return in_dtype
    if in_dtype in ("bfloat16", "float16") and out_dtype == "float32":
        return in_dtype
    return out_dtype


def _reduces_fastest_dim(x: TensorArg, reduced: set[int]) -> bool:
    """Whether the reduction runs along the input's fastest-varying dim in memory, as
    TensorIterator decides it (`reduction_on_fastest_striding_dimension`, after it orders the
    dims by stride): each output then reads contiguous runs. By memory order, not by dim number:
    CaiT's talking-heads bias gradient sums a [B, N, N, heads] view of a [B, heads, N, N] tensor
    over B, N, N, contiguous runs of N x N for each of the 4 heads (priced as 4 strided columns it
    came out 1.4 ms, ~100x a read of its 10 MB). Stride-0 (broadcast) dims do not count; without
    a strided dim, the logical last dim stands in."""
    dims = [i for i, (n, st) in enumerate(zip(x.shape, x.stride)) if n > 1 and st != 0]
    if not dims:
        return (len(x.shape) - 1) in reduced
    fastest = min(dims, key=lambda i: (abs(x.stride[i]), -i))
    return fastest in reduced


def reduction(op, base, gpu, allow_tf32):
    x = op.args[0]
    outs = _outs(op)
    out = outs[0] if outs else None
    n_out = out.numel if out is not None else 1
    reduce_size = max(1, x.numel // max(n_out, 1))
    dims = arg(op, base, "dim", None)
    nd = len(x.shape)
    if isinstance(dims, int):
        dims = (dims,)
    inner = True
    if dims:
        norm = {d % nd for d in dims} if nd else set()
        # memory order promotes a reduction to the inner kind (CaiT's talking heads); it does not
        # demote one whose logical last dim is reduced: channels-last spatial means (SE blocks,
        # kept C fastest) priced as strided columns came out +32..+39% against the real profiles
        # of tv_efficientnet and timm_nfnet, +7..+18% on DeepLabV3 / LR-ASPP (cost_report_all.py,
        # session 55), where the inner pricing was within -7..+11%: the column model is fitted on
        # few outputs with long reductions (a bias gradient), not thousands of short ones
        inner = (nd - 1) in norm or _reduces_fastest_dim(x, norm)
    out_dtype = out.dtype if out is not None else x.dtype
    if base in ("sum", "nansum"):
        fn = K.sum_functor(x.dtype, out_dtype)
    elif base == "mean":
        fn = K.mean_functor(x.dtype, out_dtype)
    else:
        fn = K.generic_reduce_functor(base, x.dtype)
    specs = K.reduce_kernel(fn, x.dtype, out_dtype, reduce_size, n_out, gpu.num_sms, inner)
    column = not inner and n_out > 1
    global_reduce = column and any(s.kind == K.KIND_MEMSET for s in specs)
    cost = Cost(REDUCTION, "reduce_global" if global_reduce else "reduce", 0.0, io_bytes(op))
    if column:
        cost.mem_bw = n_out * profile_for(gpu).reduce_bw_per_column
    return cost, specs


# ------------------------------------------------------------------ gathers / scatters

def gather_like(op, base, gpu, allow_tf32):
    outs = _outs(op)
    out = outs[0] if outs else None
    if base == "embedding":
        idx = op.args[1]
    elif base == "index_select":
        idx = op.args[2]
    else:
        idx = next((t for t in all_inputs(op) if t.dtype in ("int64", "int32")), None)
    if out is None:
        out = first_tensor(op)
    nbytes = (idx.nbytes if idx is not None else 0) + 2 * tensor_bytes(out)
    n_idx = idx.numel if idx is not None else 1
    row = max(1, out.nbytes // max(n_idx, 1))
    if base == "gather":
        if not _gather_expanded_rows(op):
            return Cost(INDEX, "gather", 0.0, nbytes), [_scatter_gather_kernel("gather", out, idx)]
        n_idx = idx.shape[0] if idx is not None and idx.shape else 1  # the row gather: a block per row
        row = max(1, out.nbytes // max(n_idx, 1))
    if base in ("embedding", "index_select", "gather") or (base == "index" and _gathers_rows(op)):
        name = "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)"
        spec = KernelSpec(K.KIND_KERNEL, name, (max(1, n_idx), 1, 1), (max(32, min(1024, row // 16)), 1, 1), 32, 0)
    else:
        functor = K.lambda_functor(f"{base.rstrip('_')}_kernel", out.dtype, 1, anon=True)
        spec = KernelSpec(K.KIND_KERNEL, f"void at::native::index_elementwise_kernel<128, 4, {functor}>(long, {functor})",
                          (max(1, -(-out.numel // 512)), 1, 1), (128, 1, 1), 32, 0)
    return Cost(INDEX, "gather", 0.0, nbytes), [spec]


def _gather_expanded_rows(op) -> bool:
    """`torch.gather(x, 0, idx)` with `idx` a column of row numbers expanded along the other
    dims (stride 0) and `x` contiguous: ATen's expanded-index path, the row gather of
    index_select (the H200 probe, session 24: [1024, 256] gathered by a [512, 1] index expanded to
    [512, 256] ran `vectorized_gather_kernel<16, long>`; DeBERTa's embedding-shaped gathers too)."""
    x = op.args[0] if op.args else None
    dim = arg(op, "gather", "dim")
    idx = op.args[2] if len(op.args) > 2 else op.kwargs.get("index")
    if not isinstance(x, TensorArg) or not isinstance(idx, TensorArg) or not isinstance(dim, int) or len(x.shape) < 2:
        return False
    if dim % len(x.shape) != 0 or not is_contiguous(x) or len(idx.shape) != len(x.shape):
        return False
    return all(st == 0 for sz, st in zip(idx.shape[1:], idx.stride[1:]) if sz > 1)


_SCATTER_GATHER = {
    # base: (is_scatter_like, element type: opaque bytes or the real type, ATen's functor)
    "gather": (False, "opaque", "TensorAssign"),
    "scatter": (True, "opaque", "TensorAssign"), "scatter_": (True, "opaque", "TensorAssign"),
    "scatter_add": (True, "real", "ReduceAdd"), "scatter_add_": (True, "real", "ReduceAdd"),
}


def _scatter_gather_kernel(base: str, x: TensorArg, idx: TensorArg | None, fill: bool = False) -> KernelSpec:
    """ScatterGatherKernel.cu's elementwise kernel, as the H200 ran it (probe, session 24): 8
    index elements per thread of a 128-thread block over the index; gathers and assigning
    scatters move opaque bytes, scatter_add adds in the real type (atomics), a scatter of a
    scalar runs the fill variant."""
    scatter, elem, functor = _SCATTER_GATHER[base]
    n = idx.numel if idx is not None else x.numel
    if fill:
        t = f"at::native::OpaqueType<{x.itemsize}>"
        lam = (f"at::native::_cuda_scatter_fill_internal_kernel<{t}, long>::operator()<at::native::{functor}>"
               f"(at::TensorIterator&, {t}, long, long, long, at::native::{functor} const&)::{{lambda(int)#1}}")
    else:
        t = f"at::native::OpaqueType<{x.itemsize}>" if elem == "opaque" else K.cpp(x.dtype)
        lam = (f"at::native::_cuda_scatter_gather_internal_kernel<{'true' if scatter else 'false'}, {t}, long>"
               f"::operator()<at::native::{functor}>(at::TensorIterator&, long, long, long, "
               f"at::native::{functor} const&)::{{lambda(int)#1}}")
    return KernelSpec(K.KIND_KERNEL, f"void at::native::_scatter_gather_elementwise_kernel<128, 8, {lam}>(int, {lam})",
                      (max(1, -(-n // 1024)), 1, 1), (128, 1, 1), 32, 0)


def _gathers_rows(op) -> bool:
    """`x[idx]`: one index tensor on the first dim of a contiguous tensor, which CUDA's index
    kernel runs as the row gather index_select uses (the H200 probe, session 24: a [169, 12]
    table indexed by 2,401 positions ran `vectorized_gather_kernel<16, long>`, one block per row)."""
    x = op.args[0] if op.args else None
    idx = op.args[1] if len(op.args) > 1 else None
    if not isinstance(x, TensorArg) or not isinstance(idx, tuple) or not idx or not is_contiguous(x):
        return False
    return isinstance(idx[0], TensorArg) and all(i is None for i in idx[1:]) and idx[0].dtype == "int64"


_INDEX_PUTS = ("_index_put_impl_", "index_put_", "index_put")
_SORT_HUB = "at_cuda_detail::cub::detail::radix::policy_hub<long, at::cuda::cub::detail::OpaqueType<8>, unsigned long long>::Policy1000"


def _long_kernel(functor: str, n: int) -> KernelSpec:
    return K.vectorized_kernel(functor, 2, n, ("int64",))


# The longest run of one row's indices of an accumulating index_put_, which decides its
# accumulation kernel's time: data the op's shapes do not carry, so the capture adds it to the
# op's keyword arguments when it knows the index values (runtime/dispatch/capture.py); the cost
# cache keys on it like on any argument. No real op has an argument of this name.
LONGEST_RUN_KWARG = "phantora_longest_run"


@dataclasses.dataclass(frozen=True)
class _IndexGeometry:
    """How ATen's index_put_with_sort_kernel sees an indexing (makeLinearIndex): `n` linear
    indices into `rows` rows (the indexed dims' sizes multiplied), `slice` elements after the
    indexed dims, `before` elements before them."""

    n: int
    rows: int
    slice: int
    before: int


def _index_geometry(x: TensorArg, indices: tuple) -> _IndexGeometry:
    """The geometry of `x[indices]` (indices: a tensor, or None for a dim taken whole, per dim
    from the first; a boolean mask covers as many dims as it has, and stands for as many indices
    as it has elements, an upper bound; adjacent index tensors, the usual case, are assumed)."""
    at = [i for i, t in enumerate(indices) if isinstance(t, TensorArg)]
    shape = tuple(x.shape) or (1,)
    if not at:
        return _IndexGeometry(1, max(1, shape[0]), max(1, math.prod(shape[1:])), 1)
    masks = [indices[i] for i in at if indices[i].dtype in ("bool", "uint8")]
    first, last = at[0], at[-1] + sum(len(m.shape) - 1 for m in masks)
    n = max(1, max(indices[i].numel for i in at))
    return _IndexGeometry(n, max(1, math.prod(shape[first:last + 1])), max(1, math.prod(shape[last + 1:])),
                          max(1, math.prod(shape[:first])))


def index_put_accumulate(op, base, gpu, allow_tf32):
    """`index_put_(..., accumulate=True)` on CUDA (the backward of `x[idx]`: relative position
    biases, gathers by index): ATen's sort-based path (Indexing.cu, index_put_with_sort_kernel).
    The kernels as the H200 ran them for a [169, 12] fp32 table and 2,401 indices (probe,
    session 24): the linear index's remainder / mul / div (int64), an arange of positions, a cub
    radix sort of (index, position) pairs (three memsets, histogram, exclusive sum, one onesweep
    pass per 8 bits of numel / slice: the rows times the elements before them) and the
    accumulation kernel: one warp per index for slices
    up to a warp wide (`_small_stride`), the unrolled kernel above that (ATen's choice; only the
    small-stride variant was measured), or one thread per index for one-element slices
    (`_stride_1`, a table indexed on its last dim: timm LeViT's attention biases), over a grid of
    (indices / 4, slice / 128, elements before the indexed dims) as ATen launches it. The sort
    kernels take the fixed times measured there plus their bytes at HBM bandwidth (approximate
    beyond that size); the accumulation its walk over a row's duplicate indices: the longest run
    of one row's indices decides it, 0.18 + 0.214 us an index on the H200 (LeViT's 24 / 84 / 364,
    Swin's 49, the probe's ~26: within 10%), when the capture knows the index values
    (LONGEST_RUN_KWARG); else priced per mean run, n / rows, at 0.40 us, fitted on relative-position
    tables whose longest run is 1.5-1.9x the mean (Swin's, 3.4x, comes out ~40% short that way, and
    uniform random indices long). Plus its bytes; the index arithmetic is roofline."""
    x = op.args[0]
    indices = op.args[1] if len(op.args) > 1 and isinstance(op.args[1], tuple) else ()
    values = op.args[2] if len(op.args) > 2 and isinstance(op.args[2], TensorArg) else None
    geo = _index_geometry(x, indices)
    n = geo.n
    prof = profile_for(gpu)
    bw = hbm_bw(gpu)
    # cub sorts the row numbers on get_num_bits(largestIndex(self) / sliceSize) bits, 8 a pass
    passes = max(1, -(-max(1, max(1, x.numel // geo.slice).bit_length()) // 8))
    ops_l = "::operator()() const::{lambda()#4}::operator()() const::{lambda(long, long)#1}"
    specs = [
        _long_kernel(f"at::native::BUnaryFunctor<long, long, long, at::native::remainder_kernel_cuda(at::TensorIteratorBase&)"
                     f"::{{lambda()#1}}{ops_l}>", n),
        _long_kernel("at::native::AUnaryFunctor<long, long, long, at::native::binary_internal::MulFunctor<long> >", n),
        _long_kernel(f"at::native::BUnaryFunctor<long, long, long, at::native::binary_internal::div_trunc_kernel_cuda("
                     f"at::TensorIteratorBase&)::{{lambda()#1}}{ops_l}>", n),
    ]
    lam = ("at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}"
           "::operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}")
    specs.append(KernelSpec(K.KIND_KERNEL, f"void (anonymous namespace)::elementwise_kernel_with_index<int, {lam}>(int, {lam}, "
                            f"function_traits<{lam}>::result_type*)", (max(1, -(-n // 64)), 1, 1), (64, 1, 1), 16, 0))
    key_ns = 1e9 * n * 16 / bw  # (index, position) pairs of 8 bytes each, read once per kernel
    rs = "at_cuda_detail::cub::detail::radix_sort::"
    specs += [KernelSpec(K.KIND_MEMSET, K.MEMSET_NAME, nbytes=4, api=K.API_MEMSET),
              KernelSpec(K.KIND_MEMSET, K.MEMSET_NAME, nbytes=256 * 8 * passes, api=K.API_MEMSET),
              KernelSpec(K.KIND_KERNEL, f"void {rs}DeviceRadixSortHistogramKernel<{_SORT_HUB}, (at_cuda_detail::cub::SortOrder)0, "
                         "long, unsigned long long, at_cuda_detail::cub::detail::identity_decomposer_t>(unsigned long long*, "
                         "long const*, unsigned long long, int, int, at_cuda_detail::cub::detail::identity_decomposer_t)",
                         (gpu.num_sms * 7, 1, 1), (128, 1, 1), 72, 8192, dur_ns=int(prof.index_sort_histogram_ns + key_ns / 2)),
              KernelSpec(K.KIND_KERNEL, f"void {rs}DeviceRadixSortExclusiveSumKernel<{_SORT_HUB}, unsigned long long>"
                         "(unsigned long long*)", (1, 1, 1), (256, 1, 1), 32, 2336, dur_ns=int(prof.index_sort_scan_ns))]
    for _ in range(passes):
        specs += [KernelSpec(K.KIND_MEMSET, K.MEMSET_NAME, nbytes=1024, api=K.API_MEMSET),
                  KernelSpec(K.KIND_KERNEL, f"void {rs}DeviceRadixSortOnesweepKernel<{_SORT_HUB}, (at_cuda_detail::cub::SortOrder)0, "
                             "long, at::cuda::cub::detail::OpaqueType<8>, unsigned long long, int, int, "
                             "at_cuda_detail::cub::detail::identity_decomposer_t>(int*, int*, unsigned long long*, unsigned long long "
                             "const*, long*, long const*, at::cuda::cub::detail::OpaqueType<8>*, at::cuda::cub::detail::OpaqueType<8> "
                             "const*, int, int, int, at_cuda_detail::cub::detail::identity_decomposer_t)",
                             (max(1, -(-n // 5760)), 1, 1), (384, 1, 1), 80, 38912,
                             dur_ns=int(prof.index_sort_onesweep_ns + 2 * key_ns))]
    t = K.cpp(x.dtype)
    if geo.slice == 1:
        variant, tmpl = "indexing_backward_kernel_stride_1", t
    elif geo.slice <= 32:
        variant, tmpl = "indexing_backward_kernel_small_stride", t
    else:
        variant, tmpl = "indexing_backward_kernel", f"{t}, 4"
    slices = 3 * (values.numel if values is not None else n * geo.slice * geo.before) * x.itemsize  # values, slices r/w
    # the warp of a row's first index walks the row's duplicates one by one: the longest such chain
    # decides the kernel's time when few rows take many indices (priced per mean run, see above)
    run = op.kwargs.get(LONGEST_RUN_KWARG) if op.kwargs else None
    if run:  # the capture knew the indices' values
        walk = prof.index_accumulate_run_fixed_ns + prof.index_accumulate_per_run_index_ns * run
    else:
        walk = max(prof.index_accumulate_fixed_ns, prof.index_accumulate_per_duplicate_ns * n / geo.rows)
    grid = (max(1, -(-n // 4)), min(65535, max(1, -(-geo.slice // 128))), min(65535, max(1, geo.before)))
    specs.append(KernelSpec(K.KIND_KERNEL, f"void (anonymous namespace)::{variant}<{tmpl}>(long const*, long const*, {t} const*, "
                            f"{t}*, long, long, long, long, bool)", grid, (32, 4, 1), 31, 0,
                            dur_ns=int(walk + 1e9 * slices / bw)))
    nbytes = 4 * n * 8  # the long index arithmetic (the sort and the accumulation are timed above)
    return Cost(INDEX, "scatter", 0.0, nbytes), specs


def _index_put_kernel(x: TensorArg, values: TensorArg | None) -> KernelSpec:
    """`index_put_` without accumulation: TensorIterator's index kernel over the values, the
    element type opaque (the H200 probe: 512 rows of 1,024 bf16 into a [4096, 1024] table)."""
    impl = f"at::native::index_put_kernel_impl<at::native::OpaqueType<{x.itemsize}> >"
    lam = f"{impl}(at::TensorIterator&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{{lambda(char*, char const*, long)#1}}"
    outer = (f"at::native::gpu_index_kernel<{lam}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, "
             f"{lam} const&, bool)::{{lambda(int)#1}}")
    n = values.numel if values is not None else x.numel
    return KernelSpec(K.KIND_KERNEL, f"void at::native::index_elementwise_kernel<128, 4, {outer}>(long, {outer})",
                      (max(1, -(-n // 512)), 1, 1), (128, 1, 1), 36, 0)


def scatter_like(op, base, gpu, allow_tf32):
    x = first_tensor(op)
    if base in _INDEX_PUTS and isinstance(op.args[1] if len(op.args) > 1 else None, tuple):
        accumulate = op.args[3] if len(op.args) > 3 else op.kwargs.get("accumulate", False)
        if accumulate:
            return index_put_accumulate(op, base, gpu, allow_tf32)
        values = op.args[2] if len(op.args) > 2 and isinstance(op.args[2], TensorArg) else None
        return Cost(INDEX, "gather", 0.0, io_bytes(op)), [_index_put_kernel(x, values)]
    if base in _SCATTER_GATHER:
        idx = op.args[2] if len(op.args) > 2 and isinstance(op.args[2], TensorArg) else None
        src = op.args[3] if len(op.args) > 3 and isinstance(op.args[3], TensorArg) else op.kwargs.get("src")
        fill = not isinstance(src, TensorArg)
        nbytes = io_bytes(op)
        if fill and base.endswith("_"):
            # a scalar scattered in place moves the index and the elements it writes, not the
            # whole destination: 1,024 ones into [1024, 50000] fp32 took 5.9 us on the H200
            # (probe, session 24), the destination's bytes would say 250 us. (With a source
            # tensor the bytes stay io_bytes: the family points were fitted with them.)
            nbytes = (idx.nbytes if idx is not None else 0) + (idx.numel if idx is not None else 1) * x.itemsize
        return Cost(INDEX, "scatter", 0.0, nbytes), [_scatter_gather_kernel(base, x, idx, fill)]
    name = K.lambda_functor(f"{base.rstrip('_')}_cuda_kernel", x.dtype, 1, anon=True)
    src = [t for t in all_inputs(op)][1:]
    n = max((t.numel for t in src), default=x.numel)
    spec = KernelSpec(K.KIND_KERNEL, f"void at::native::_scatter_gather_elementwise_kernel<128, 4, {name}>(int, {name})",
                      (max(1, -(-n // 512)), 1, 1), (128, 1, 1), 32, 0)
    return Cost(INDEX, "scatter", 0.0, io_bytes(op)), [spec]


def embedding_dense_backward(op, base, gpu, allow_tf32, tbl=None):
    grad, idx = op.args[0], op.args[1]
    num_weights = arg(op, base, "num_weights", None)
    outs = _outs(op)
    d = grad.shape[-1] if grad.shape else 1
    if outs:
        out = outs[0]
    else:
        out = TensorArg((int(num_weights or 1), d), (d, 1), grad.dtype, grad.device)
    fill = K.fill_kernel(out.dtype, out.numel)
    n_idx = idx.numel
    fill.dur_ns = int(fill_ns(out, gpu))
    t = K.cpp(grad.dtype)
    if n_idx <= 3072:
        name = (f"void at::native::(anonymous namespace)::embedding_backward_feature_kernel<{t}, float, long>"
                f"(long const*, {t} const*, {t}*, int, long, int)")
        # one block per 32 features loops over all indices: latency-bound, ~26 ns per index
        waves = -(-max(1, -(-d // 32)) // gpu.num_sms)
        prof = profile_for(gpu)
        spec = KernelSpec(K.KIND_KERNEL, name, (max(1, -(-d // 32)), 1, 1), (32, 32, 1), 27, 8192,
                          dur_ns=int(prof.emb_feature_fixed_ns + prof.emb_feature_ns_per_index * n_idx * waves))
        return Cost(INDEX, "gather", 0.0, 0.0), [fill, spec]
    specs = None
    if tbl is not None:
        seqs = tbl.lookup_types("aten::embedding_dense_backward", (grad.dtype, idx.dtype))
        if seqs:
            long_seq = max(seqs, key=lambda s: len(s[1]))[1]
            if len(long_seq) > 5:
                specs = [KernelSpec(s.kind, s.name, s.grid, s.block, s.regs, s.smem, s.nbytes, s.api, float(s.dur_ns))
                         for s in long_seq]
                # the zero fill keeps its bandwidth model; the rest share the sort-path time
                for s in specs:
                    if "FillFunctor" in s.name:
                        s.grid = fill.grid
                        s.dur_ns = fill.dur_ns
                        s.weight = 0.0
                    elif s.kind == K.KIND_MEMSET:
                        s.weight = 0.0
    if specs is None:
        names = [
            ("void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<long>", 0.1),
            ("void at_cuda_detail::cub::detail::unique_by_key::DeviceUniqueByKeySweepKernel<long>", 0.05),
            ("void at_cuda_detail::cub::detail::scan::DeviceScanKernel<long>", 0.05),
            (f"void at::native::(anonymous namespace)::compute_grad_weight<{t}, long>(long const*, {t} const*, long const*, long, long, long const*, long const*, at::AccumulateType<{t}, true>::type*, long)", 0.4),
            (f"void at::native::(anonymous namespace)::sum_and_scatter<{t}, long>(long const*, {t}*, long, long const*, long const*, at::AccumulateType<{t}, true>::type const*, long const*, long const*, long, long)", 0.4),
        ]
        specs = [fill] + [KernelSpec(K.KIND_KERNEL, n, (max(1, n_idx // 8), 1, 1), (256, 1, 1), 32, 0, weight=w)
                          for n, w in names]
    return Cost(INDEX, "embedding_bwd", 0.0, grad.nbytes + idx.nbytes, extra_ns=profile_for(gpu).emb_bwd_sort_fixed_ns), specs


def fill_ns(t: TensorArg, gpu) -> float:
    return fill_bytes_ns(tensor_bytes(t), gpu)


def fill_bytes_ns(nbytes: int, gpu) -> float:
    e = eff_for("fill", gpu)
    return e.t0_ns + nbytes / (hbm_bw(gpu) * e.mem) * 1e9


# ------------------------------------------------------------------ optimizers

def fused_optimizer(op, base, gpu, allow_tf32):
    lists = [a for a in op.args if isinstance(a, tuple) and a and isinstance(a[0], TensorArg)]
    if not lists:
        return Cost(OPTIMIZER, "optimizer"), []
    params = lists[0]
    if base in ("_fused_adamw_", "_fused_adam_"):
        amsgrad = bool(arg(op, base, "amsgrad", False))
        state = lists[:5] if amsgrad else lists[:4]
        written = [lists[0], lists[2], lists[3]] + ([lists[4]] if amsgrad and len(lists) > 4 else [])
        depth = 5 if amsgrad else 4
        regs = 60
    else:  # _fused_sgd_
        state = [l for l in lists[:3] if l]
        written = [lists[0]] + ([lists[2]] if len(lists) > 2 and lists[2] else [])
        depth = len(state)
        regs = 40
    nbytes = sum(tensor_bytes(t) for l in state for t in l) + sum(tensor_bytes(t) for l in written for t in l)
    specs = K.multi_tensor_specs(base, [params], depth, params[0].dtype, False, regs)
    extra = eff_for("optimizer", gpu).t0_ns * max(0, len(specs) - 1)
    return Cost(OPTIMIZER, "optimizer", 0.0, nbytes, extra_ns=extra), specs


def foreach_lists(op, base) -> tuple[list[tuple], int]:
    """(the tensor lists of a `_foreach_*` call, its multi_tensor_apply depth): the lists it
    reads, plus the one it writes when it is out of place; a norm's kernel reads its one list
    and writes per-chunk partial norms, not a list (depth 1)."""
    lists = [a for a in op.args if isinstance(a, tuple) and a and isinstance(a[0], TensorArg)]
    if op.kwargs:
        lists += [a for a in op.kwargs.values() if isinstance(a, tuple) and a and isinstance(a[0], TensorArg)]
    if base == "_foreach_norm":
        return lists, 1
    return lists, len(lists) + (0 if base.endswith("_") else 1)


def foreach(op, base, gpu, allow_tf32):
    lists, depth = foreach_lists(op, base)
    if not lists:
        return Cost(OPTIMIZER, "foreach"), []
    inplace = base.endswith("_")
    nbytes = io_bytes(op) + (sum(tensor_bytes(t) for t in lists[0]) if inplace else 0)
    scalar_list = any(isinstance(a, tuple) and a and not isinstance(a[0], TensorArg) for a in op.args[1:])
    scalar_tensor = any(isinstance(a, TensorArg) for a in op.args[1:])
    dtype = lists[0][0].dtype
    if base == "_foreach_norm":
        # ForeachReduceOp.cu: zeros for the per-chunk partial norms (aten::zeros > zero_ > fill_,
        # op_children.json), the chunks' partial norms, then one cleanup block per tensor
        chunks = max(-(-t.numel // K.CHUNK) for t in lists[0])
        partial = TensorArg((len(lists[0]) * chunks,), (1,), "float32" if dtype in ("bfloat16", "float16") else dtype,
                            lists[0][0].device)
        zeros = dataclasses.replace(K.fill_kernel(partial.dtype, partial.numel), nbytes=tensor_bytes(partial))
        specs = ([zeros] + K.multi_tensor_specs(base, [lists[0]], depth, dtype, False, 32, smem=2048)
                 + [K.lpnorm_cleanup_spec(dtype, len(lists[0]))])
        extra = eff_for("foreach", gpu).t0_ns * max(0, len(specs) - 1)
        return Cost(OPTIMIZER, "foreach", 0.0, nbytes, extra_ns=extra), specs
    specs = K.multi_tensor_specs(base, [lists[0]], depth, dtype, scalar_list,
                                 27 if depth == 1 and not scalar_tensor else 32 if depth > 1 else 28,
                                 scalar_tensor=scalar_tensor)
    extra = eff_for("foreach", gpu).t0_ns * max(0, len(specs) - 1)
    return Cost(OPTIMIZER, "foreach", 0.0, nbytes, extra_ns=extra), specs


# ------------------------------------------------------------------ copies, fills, factories

def transposing_copy(src: TensorArg, dst: TensorArg) -> bool:
    """Both dense, in dim orders whose innermost dims differ: the copy reads along one dim and
    writes along another (NCHW <-> channels-last, a transposed sequence made contiguous), which
    TensorIterator's generic kernel does at a fraction of a dense copy's bandwidth (the
    `transpose` efficiency; on the H200 0.5-1 TB/s, against ~4 for a dense copy)."""
    if src.shape != dst.shape:
        return False
    a, b = dense_order(src), dense_order(dst)
    return a is not None and b is not None and bool(a) and bool(b) and a[-1] != b[-1]


def copy_op(op, base, gpu, allow_tf32):
    """Same-device copies and casts (cross-device copies are memcpys, see __init__)."""
    if base == "copy_":
        dst, src = op.args[0], op.args[1]
    else:
        src = op.args[0]
        outs = _outs(op)
        dst = outs[0] if outs else src
    if not isinstance(src, TensorArg):
        return fill_op(op, base, gpu, allow_tf32)
    numel = max(dst.numel, 1)
    # a DtoD memcpy when TensorIterator sees one contiguous block (Copy.cu: iter.is_contiguous()):
    # both contiguous, or the same dense layout (channels-last); two slices with equal strides are not
    same_layout = (src.stride == dst.stride and dense_order(dst) is not None) or (is_contiguous(src) and is_contiguous(dst))
    if src.dtype == dst.dtype and same_layout and src.shape == dst.shape and dst.numel > 0:
        nbytes = dst.nbytes
        return Cost(COPY, "copy", 0.0, 0.0), [KernelSpec(K.KIND_MEMCPY, "Memcpy DtoD (Device -> Device)", nbytes=nbytes,
                                                         api=K.API_MEMCPY, dur_ns=-1)]
    contiguous = is_contiguous(src) and is_contiguous(dst) and src.shape == dst.shape
    spec = K.copy_kernel(src.dtype, dst.dtype, numel, contiguous)
    amp = _short_rows_read_amplification(src, dst)
    if "vectorized" in spec.name:
        eff = "copy"
    elif "unrolled" in spec.name:
        eff = "unrolled_copy"
    elif transposing_copy(src, dst) and amp is None:
        eff = "transpose"
    else:
        eff = "strided"
    nbytes = tensor_bytes(src) * (amp or 1.0) + tensor_bytes(dst)
    return Cost(COPY, eff, 0.0, nbytes), _split([spec], [src, dst])


def _short_rows_read_amplification(src: TensorArg, dst: TensorArg) -> float | None:
    """A transposing copy whose output rows are short (under one 32-byte sector: a few heads)
    and whose next output dim is the input's unit-stride one: a warp's 32 consecutive outputs
    read 32 / row elements from each of `row` input rows, so each input sector is half or wholly
    used, not one element of it. Such a copy runs as a strided elementwise copy with its reads
    amplified by 32 bytes over that run (CaiT's talking heads, [128, 196, 196, 4] bf16 from
    [B, H, N, N]: 53 us on the H100, a 2x read amplification, where the transposes' efficiency,
    fitted on ConvNeXt's NHWC <-> NCHW copies, said 132). None for any other copy."""
    if src.shape != dst.shape or len(dst.shape) < 2:
        return None
    order = dense_order(dst)
    if not order or len(order) < 2:
        return None
    inner, nxt = order[-1], order[-2]
    row = dst.shape[inner]
    if row < 2 or row * dst.itemsize >= 32 or src.stride[nxt] != 1 or src.stride[inner] == 1:
        return None
    run = max(1, 32 // row) * src.itemsize  # bytes of one input row a warp reads together
    return 32.0 / min(32, run)


def topk(op, base, gpu, allow_tf32):
    """torch.topk on CUDA (TensorTopK.cu): a single-block gather per row, or the multi-block
    radix select for many long rows; then a bitonic sort of the k results (kernels.topk_specs).
    MoE routers' top-2 of a few experts per token run the single-block kernel."""
    x = op.args[0]
    k = int(op.args[1]) if len(op.args) > 1 and isinstance(op.args[1], int) else 1
    nd = len(x.shape)
    dim = arg(op, base, "dim", -1)
    dim = (dim if isinstance(dim, int) else -1) % max(nd, 1)
    size = x.shape[dim] if nd else 1
    slices = max(1, x.numel // max(size, 1))
    sort = arg(op, base, "sorted", True)
    specs = K.topk_specs(x.dtype, slices, size, k, bool(sort), profile_for(gpu).topk_ns)
    return Cost(INDEX, "gather", 0.0, io_bytes(op)), specs


def repeat_op(op, base, gpu, allow_tf32):
    """Tensor.repeat on CUDA: the output viewed as the input expanded (unfold views), one strided
    copy into it (TensorIterator's direct copy over the expanded input; the H200 probe)."""
    x = op.args[0]
    outs = _outs(op)
    out = outs[0] if outs else x
    spec = K.copy_kernel(x.dtype, out.dtype, out.numel, False)
    return Cost(COPY, "strided", 0.0, tensor_bytes(out) * 2), _split([spec], [out])


def cat(op, base, gpu, allow_tf32):
    ts = op.args[0] if op.args and isinstance(op.args[0], tuple) else tuple(all_inputs(op))
    outs = _outs(op)
    out = outs[0] if outs else (ts[0] if ts else None)
    if out is None:
        return Cost(COPY, "cat"), []
    item = out.itemsize
    nd = max(1, len(out.shape))
    name = (f"void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized<at::native::(anonymous namespace)::"
            f"OpaqueType<{item}u>, unsigned int, {nd}, 128, 1, 16, {max(1, 16 // item)}>(char*, at::native::(anonymous "
            f"namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<{item}u>, unsigned int, "
            f"128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)")
    per = max((t.numel for t in ts), default=1)
    nbytes = sum(tensor_bytes(t) for t in ts) + tensor_bytes(out)
    spec = KernelSpec(K.KIND_KERNEL, name, (max(1, min(-(-per // 1024), gpu.num_sms * 32)), max(1, len(ts)), 1),
                      (128, 1, 1), 23, 0)
    return Cost(COPY, "cat", 0.0, nbytes), [spec]


def fill_op(op, base, gpu, allow_tf32):
    outs = _outs(op)
    out = outs[0] if outs else first_tensor(op)
    if out is None or out.numel == 0:
        return Cost(MEMSET, "fill"), []
    if dense_order(out) is None:  # a strided view (a slice of a mask being built): TensorIterator's legacy kernel
        spec = K.strided_kernel(f"at::native::FillFunctor<{K.cpp(out.dtype)}>", out.numel, out.dtype)
        return Cost(ELEMENTWISE, "strided", 0.0, tensor_bytes(out)), _split([spec], [out])
    spec = K.fill_kernel(out.dtype, out.numel)
    return Cost(ELEMENTWISE, "fill", 0.0, tensor_bytes(out)), _split([spec], [out])


def arange_op(op, base, gpu, allow_tf32):
    outs = _outs(op)
    out = outs[0] if outs else first_tensor(op)
    if out is None:
        return Cost(ELEMENTWISE, "fill"), []
    t = K.cpp(out.dtype)
    lam = (f"at::native::{base}_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::"
           f"{{lambda()#1}}::operator()() const::{{lambda()#4}}::operator()() const::{{lambda(long)#1}}")
    name = (f"void (anonymous namespace)::elementwise_kernel_with_index<int, {lam}>(int, {lam}, "
            f"function_traits<{lam}>::result_type*)")
    spec = KernelSpec(K.KIND_KERNEL, name, (max(1, -(-out.numel // 64)), 1, 1), (64, 1, 1), 16, 0)
    del t
    return Cost(ELEMENTWISE, "fill", 0.0, tensor_bytes(out)), [spec]


def rng_op(op, base, gpu, allow_tf32):
    outs = _outs(op)
    out = outs[0] if outs else first_tensor(op)
    if out is None:
        return Cost(ELEMENTWISE, "vectorized"), []
    t = K.cpp(out.dtype)
    name = (f"void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
            f"at::native::templates::cuda::{base.rstrip('_')}_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, "
            f"at::CUDAGeneratorImpl*)::{{lambda(curandStatePhilox4_32_10*)#1}}, {t}>(long, at::PhiloxCudaState, "
            f"{t}, {t})")
    grid = (min(gpu.num_sms * 4, max(1, -(-out.numel // 512))), 1, 1)
    return Cost(ELEMENTWISE, "vectorized", 0.0, io_bytes(op)), [KernelSpec(K.KIND_KERNEL, name, grid, (256, 1, 1), 32, 0)]


def dropout(op, base, gpu, allow_tf32):
    x = op.args[0]
    t = K.cpp(x.dtype)
    name = (f"void at::native::(anonymous namespace)::fused_dropout_kernel_vec<{t}, float, unsigned int, 1, "
            f"{K.vec_size((x.dtype,))}, bool>(at::cuda::detail::TensorInfo<{t} const, unsigned int>, "
            f"at::cuda::detail::TensorInfo<{t}, unsigned int>, at::cuda::detail::TensorInfo<bool, unsigned int>, "
            f"unsigned int, float, at::PhiloxCudaState)")
    grid = (min(gpu.num_sms * 16, max(1, -(-x.numel // 1024))), 1, 1)
    return Cost(ELEMENTWISE, "vectorized", 0.0, io_bytes(op)), [KernelSpec(K.KIND_KERNEL, name, grid, (256, 1, 1), 32, 0)]


# ------------------------------------------------------------------ generic TensorIterator op

def elementwise(op, base, gpu, allow_tf32):
    ins = [t for t in all_inputs(op) if t.on_gpu or t.numel > 1]
    outs = _outs(op)
    tensors = ins + outs
    if not tensors:
        return Cost(ELEMENTWISE, "vectorized"), []
    ref = outs[0] if outs else ins[0]
    numel = max(ref.numel, 1)
    # the kernel's operands are the GPU tensors (a CPU one beside them is a host-side list:
    # pack_padded_sequence's lengths)
    dtypes = {t.dtype for t in tensors if t.on_gpu} or {t.dtype for t in tensors}
    broadcast = any(t.numel != numel or 0 in t.stride for t in ins)
    # TensorIterator coalesces operands that share one dense layout (channels-last included)
    noncontig = not one_dense_layout(t for t in tensors if t.numel > 1)
    dtype = ref.dtype
    scalar = len(ins) <= 1 and any(not isinstance(a, TensorArg) and isinstance(a, (int, float))
                                   for a in op.args[1:])
    n_ops = len(tensors) if tensors else 2
    half = dtype in ("bfloat16", "float16")
    if base in ("gelu", "gelu_backward"):
        approx = arg(op, base, "approximate", "none")
        li = 1 if approx == "tanh" else 2
        di = 4 if dtype == "bfloat16" else (3 if dtype == "float16" else 2)
        fn = "GeluBackwardCUDAKernelImpl" if base == "gelu_backward" else "GeluCUDAKernelImpl"
        params = ", ".join([K.cpp(dtype)] * (2 if base == "gelu_backward" else 1))
        functor = (f"at::native::{fn}(at::TensorIteratorBase&, at::native::GeluType)::{{lambda()#{li}}}::operator()() "
                   f"const::{{lambda()#{di}}}::operator()() const::{{lambda({params})#1}}")
    elif base in ("silu", "silu_", "silu_backward"):
        # ActivationSiluKernel.cu: kernels in an anonymous namespace, the inner lambda the
        # dtype's case of the dispatch: silu over floating and complex types, Half, BFloat16;
        # its backward over floating types, Half, BFloat16 (H200 traces of HF LLaMA: bf16 #6, #4)
        bwd = base == "silu_backward"
        cases = ("float64", "float32", "float16", "bfloat16") if bwd else \
            ("float64", "float32", "complex128", "complex64", "float16", "bfloat16")
        functor = K.lambda_functor("silu_backward_kernel" if bwd else "silu_kernel", dtype, 2 if bwd else 1,
                                   anon=True, case=cases.index(dtype) + 1 if dtype in cases else 2)
    elif base.rstrip("_") in ("add", "sub", "mul", "div", "rsub"):
        functor = K.binary_functor(base, dtype, scalar)
    else:
        functor = None
    # kernels whose functor takes the operands' own dtypes (a comparison's bool output, a mask):
    # no casting kernel for them (the H200 probe, session 24)
    typed = K.typed_functor(base, dtype if base == "where" or not ins else ins[0].dtype, scalar)
    vec = None
    if typed is not None:
        functor, vec = typed
    generic = functor is None
    if generic:
        functor = K.lambda_functor(f"{base.rstrip('_')}_kernel_cuda", dtype, max(1, min(len(ins), 3)))
    if broadcast or noncontig:
        spec, eff = K.strided_kernel(functor, numel, ins[0].dtype if typed and ins else dtype,
                                     cast=len(dtypes) > 1 and typed is None), "strided"
        if not broadcast and shared_unit_inner(t for t in tensors if t.numel > 1):
            # operands dense in different orders that share a unit-stride innermost dim (RoPE's
            # and per-head norms' adds and muls on transposed views of q / k): read in coalesced
            # rows, at the strided class's bandwidth but no faster than an element rate that
            # does not follow the bytes (profile `strided_rows`: one operation per element on the
            # fp32 pipes). The sweeps' strided points (an operand read across its layout) priced
            # these 1.7-2.1x slow in 19 real profiles (tools/holdout/real_h200/session51/)
            spec.generic = generic
            return (Cost(ELEMENTWISE, "strided_rows", float(numel), io_bytes(op), peak=gpu.fp32_flops),
                    _split([spec], tensors))
    elif len(dtypes) > 1 and typed is None:
        spec, eff = K.unrolled_kernel(functor, n_ops, numel), "unrolled"
    else:
        spec, eff = K.vectorized_kernel(functor, n_ops, numel, dtypes, vec), "vectorized"
        if half and base.rstrip("_") in TRANSCENDENTAL:
            eff = "transcendental"
        elif half and base.endswith("_backward"):
            eff = "elementwise_bwd"
    spec.generic = generic
    return Cost(ELEMENTWISE, eff, 0.0, io_bytes(op)), _split([spec], tensors)


def roll(op, base, gpu, allow_tf32):
    """torch.roll on CUDA (aten/src/ATen/native/cuda/Roll.cu): one kernel per rolled dimension
    (roll_common rolls several dims one after another; no dims: the flattened tensor once),
    one thread per element, index arithmetic per element and no vectorized loads: its time
    follows the element count, not the bytes. Measured on the H200 (tools/holdout/roll_sweep.py,
    2026-12-02, bf16 / fp16 / fp32 alike): 215 G elements/s from 4M elements up, two dims
    twice one; modelled as one operation per element on the fp32 pipes, whose peak times the
    profile's `roll` compute efficiency is that element rate (other GPUs: the same efficiency,
    not measured)."""
    x = first_tensor(op)
    if x is None:
        return Cost(ELEMENTWISE, "vectorized"), []
    dims = arg(op, base, "dims", ())
    n_kernels = max(1, len(dims) if isinstance(dims, (tuple, list)) else 1)
    t = K.cpp(x.dtype)
    name = f"void at::native::roll_cuda_kernel<{t}>({t} const*, {t}*, long, long, long, long, long, long)"
    spec = KernelSpec(K.KIND_KERNEL, name, (max(1, -(-x.numel // 512)), 1, 1), (512, 1, 1), 32, 0)
    per = 2 * tensor_bytes(x)
    cost = Cost(ELEMENTWISE, "roll", float(x.numel * n_kernels), float(per * n_kernels), peak=gpu.fp32_flops)
    return cost, [dataclasses.replace(spec) for _ in range(n_kernels)]


RNN_GATES = {0: 1, 1: 1, 2: 4, 3: 3}  # cuDNN RNN mode -> gates (RNN_RELU, RNN_TANH, LSTM, GRU)


def _arg_at(op, i: int, default):
    return op.args[i] if len(op.args) > i and op.args[i] is not None else default


def cudnn_rnn(op, base, gpu, allow_tf32):
    """A cuDNN RNN forward or backward: the GEMMs of every gate at every time step.

    FLOPs: 2 x batch x steps x (weight matrix elements) for the forward (each weight element
    is one multiply-add per token; the weight list holds every layer and direction), twice
    that for the backward (input and weight gradients). Bytes: inputs, weights and outputs,
    not the reserve buffer: its size is cuDNN's choice (the runtime allocates the measured
    size, a meta call says 0), and counting it made the roofline 4x larger at run time than
    at calibration. cuDNN runs fp32 RNN GEMMs on TF32 tensor cores unless
    torch.backends.cudnn.allow_tf32 is off (default on). The steps are serial: each layer
    and direction waits for the previous step (the profile's rnn_step_ns each, approximate; the family
    curves, measured, replace this wherever they cover the op)."""
    bwd = base == "_cudnn_rnn_backward"
    x = op.args[0] if op.args else None
    weights = op.args[1] if len(op.args) > 1 and isinstance(op.args[1], tuple) else ()
    layers = _arg_at(op, 13 if bwd else 9, 1)
    batch_first = _arg_at(op, 14 if bwd else 10, False)
    bidir = _arg_at(op, 17 if bwd else 13, False)
    if not isinstance(x, TensorArg) or len(x.shape) < 2:
        return elementwise(op, base, gpu, allow_tf32)
    if len(x.shape) == 3:
        b, t = (x.shape[0], x.shape[1]) if batch_first else (x.shape[1], x.shape[0])
    else:  # packed sequence: (total tokens, features); steps unknown, the longest is at most all
        b, t = x.shape[0], 1
    w2d = sum(w.numel for w in weights if isinstance(w, TensorArg) and len(w.shape) == 2)
    flops = 2.0 * b * t * w2d * (2 if bwd else 1)
    nbytes = sum(a.nbytes for a in all_inputs(op) if a.dtype != "uint8") + \
        sum(o.nbytes for o in _outs(op) if o.dtype != "uint8")
    dtype = x.dtype
    eff = "gemm_tf32" if dtype == "float32" else "gemm"
    peak = gpu.peak_flops(dtype, True)
    steps = t * (layers if isinstance(layers, int) else 1) * (2 if bidir else 1)
    _, specs = elementwise(op, base, gpu, allow_tf32)
    return Cost(GEMM, eff, flops, nbytes, peak, extra_ns=profile_for(gpu).rnn_step_ns * steps * (2 if bwd else 1)), specs


# ------------------------------------------------------------------ dispatch

def _pair(v, default: int) -> tuple[int, int]:
    if isinstance(v, (list, tuple)) and len(v) >= 2:
        return int(v[0]), int(v[1])
    if isinstance(v, (list, tuple)) and len(v) == 1:
        return int(v[0]), int(v[0])
    return (int(v), int(v)) if isinstance(v, int) else (default, default)


def fold_unfold(op, base, gpu, allow_tf32):
    """`F.unfold` / `F.fold` (aten::im2col / col2im) as Im2Col.cu / Col2Im.cu run them (the
    input made contiguous first: cost/__init__.py CONTIGUOUS_OPERANDS):
    - im2col launches `im2col_kernel` once per image (the batch loop is on the host), a grid of
      C x L threads (1,024 a block), each copying its kernel window's taps one after another:
      a few blocks that wait on memory latency per tap, not on bandwidth. Priced per launch as
      taps x im2col_tap_ns per wave of blocks (2 per SM), or by its bytes if longer;
    - col2im launches one `col2im_batched_kernel` over every output element (512 a block), each
      summing the columns of the windows that cover it: priced at col2im_taps_per_ns over those
      reads (kernel area / stride^2 of them per output), or by its bytes if longer.
    Both rates were measured on an H100 at one shape (VOLO-D1's outlook attention at batch 128:
    128 x 4.5 us and 885 us, where the bandwidth roofline said 58 us in all); approximate
    elsewhere (profile im2col_tap_ns / col2im_taps_per_ns)."""
    x = op.args[0]
    outs = _outs(op)
    out = outs[0] if outs else x
    prof = profile_for(gpu)
    t = K.cpp(x.dtype)
    batched = len(x.shape) == (4 if base == "im2col" else 3)
    n = x.shape[0] if batched else 1
    bw = hbm_bw(gpu) * eff_for("copy", gpu).mem
    kh, kw = _pair(arg(op, base, "kernel_size", None), 1)
    if base == "im2col":
        c = x.shape[-3]
        ncol = out.shape[-1] if out.shape else 1
        threads = c * ncol
        blocks = max(1, -(-threads // 1024))
        waves = -(-blocks // (2 * gpu.num_sms))
        per_image = (tensor_bytes(x) + tensor_bytes(out)) / max(n, 1)
        dur = max(kh * kw * prof.im2col_tap_ns * waves, 1e9 * per_image / bw)
        name = (f"void at::native::im2col_kernel<{t}>(long, {t} const*, long, long, long, long, long, long, long, long, "
                f"long, long, long, long, long, long, {t}*)")
        specs = [KernelSpec(K.KIND_KERNEL, name, (blocks, 1, 1), (1024, 1, 1), 44, 0, dur_ns=int(dur)) for _ in range(n)]
        return Cost(ELEMENTWISE, "copy", 0.0, io_bytes(op)), specs
    sh, sw = _pair(arg(op, base, "stride", None), 1)
    taps = max(1.0, (kh / max(sh, 1)) * (kw / max(sw, 1)))
    elems = out.numel
    dur = max(elems * taps / prof.col2im_taps_per_ns, 1e9 * (tensor_bytes(x) + tensor_bytes(out)) / bw)
    name = (f"void at::native::col2im_batched_kernel<{t}>(long, {t} const*, long, long, long, long, long, long, long, "
            f"long, long, long, long, long, long, long, {t}*)")
    blocks = max(1, -(-elems // 512))
    return Cost(ELEMENTWISE, "copy", 0.0, io_bytes(op)), [KernelSpec(K.KIND_KERNEL, name, (blocks, 1, 1), (512, 1, 1),
                                                                      32, 0, dur_ns=int(dur))]


def handler_for(base: str):
    if base in GEMM_OPS:
        return gemm
    if base == "_grouped_mm":
        return grouped_mm
    if base in ("convolution", "_convolution", "cudnn_convolution", "convolution_backward",
                "cudnn_convolution_transpose", "_convolution_mode"):
        return convolution
    if base in ATTN_OPS:
        return attention
    if base in ("native_layer_norm", "native_layer_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward"):
        return layer_norm
    if base in ("_cudnn_rnn", "_cudnn_rnn_backward"):
        return cudnn_rnn
    if base in ("native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
                "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional", "cudnn_batch_norm",
                "cudnn_batch_norm_backward", "native_group_norm", "native_group_norm_backward",
                "_batch_norm_with_update", "batch_norm_backward"):
        return batch_group_norm
    if base in SYNC_BN_OPS:
        return sync_batch_norm
    if base in ("_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data"):
        return softmax
    if base.startswith("nll_loss"):
        return nll_loss
    if base in REDUCE_OPS:
        return reduction
    if base in ("embedding", "index_select", "gather", "index", "_unsafe_index", "take"):
        return gather_like
    if base in ("scatter", "scatter_", "scatter_add", "scatter_add_", "index_put_", "_index_put_impl_", "index_put",
                "index_add_", "index_add", "index_copy_", "index_fill_", "scatter_reduce", "scatter_reduce_",
                "_unsafe_index_put", "masked_scatter_"):
        return scatter_like
    if base == "embedding_dense_backward":
        return embedding_dense_backward
    if base in ("_fused_adamw_", "_fused_adam_", "_fused_sgd_"):
        return fused_optimizer
    if base.startswith("_foreach_"):
        return foreach
    if base in COPY_OPS:
        return copy_op
    if base in ("cat", "stack", "_cat"):
        return cat
    if base in FILL_OPS:
        return fill_op
    if base in ("arange", "linspace", "logspace"):
        return arange_op
    if base == "roll":
        return roll
    if base in ("cumsum", "cumsum_", "cumprod", "cumprod_"):
        return scan
    if base == "repeat":
        return repeat_op
    if base == "topk":
        return topk
    if base in ("im2col", "col2im"):
        return fold_unfold
    if base in RNG_OPS:
        return rng_op
    if base == "sort":
        return sort_op
    if base in ("native_dropout", "native_dropout_backward") and base == "native_dropout":
        return dropout
    return elementwise
