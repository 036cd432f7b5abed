"""Kernel-time model: which GPU activities an aten op launches and how long each takes.

    from phantora_prof.cost import estimate, get_gpu
    kernels = estimate(op_call, get_gpu("h200"), allow_tf32=False)

`estimate` consumes a protocol.OpCall captured at the __torch_dispatch__ level and returns
the kernels, memcpys and memsets the real GPU would run for it, in launch order, each
with the exact name the real trace shows, its launch configuration and duration. Ops
without GPU work (views, allocation, metadata, host-only ops, collectives, which the
network simulator times) give [].

Where the time comes from, in order:
0. A kernel database of the user's own (source "measured"; a CostModel's source, filled by
   `phantora-prof db build` / `--kernel-times measure`, read with `--kernel-db`): the
   kernels the exact same call launched on a real GPU. On another GPU of the same
   architecture the durations are scaled as the table's are; on another architecture it
   is not used.
1. Host<->device copies (op.kind == MEMCPY or a copy whose ends are on different devices):
   latency + bytes / bandwidth, by direction and pinnedness (GpuSpec calibrated on the
   H200 `streams` reference). Named "Memcpy HtoD (Pinned -> Device)", ... exactly as the
   profiler names them; _local_scalar_dense (.item()) is a DtoH into pinned memory.
2. The measured H200 table (source "table"): when the call's op name, tensor arguments
   (shapes, dtypes, strides) and outputs match a call in the references, its kernels with
   their measured mean durations. On another GPU of the same architecture (H100) the
   durations are carried there by the op's roofline on both (roofline.carried_time_ns: the
   share of the time the roofline explains moves with its ratio, the rest with the SMs'
   throughput; memory terms at the GPU's sustained bandwidth, roofline.hbm_bw); on another
   architecture (A100) the table is used only for ops whose kernels are not
   architecture-specific library kernels (nvjet, cudnn, xmma, ...).
3. Curves measured on an H200 over a sweep of shapes (source "interpolated", see
   measured.py and phantora_prof/measure/measure_kernels.py): GEMMs (the roofline times a correction
   interpolated over log M, N, K per dtype and alignment), fused attention (efficiency
   over sequence length and batch*heads per backend, direction, causal flag, head dim),
   memory-bound ops (time over log elements per op and dtype, launch floor below, last
   bandwidth above). Kernel names and launch configs come from the generators below;
   other GPUs carry the H200 time as the table does (roofline.carried_time_ns);
   like the table, GEMMs and attention are not carried to another architecture (A100),
   whose library kernels differ. Same-device contiguous copies (Memcpy DtoD) use the
   measured DtoD curve. estimate(use_table=False) alone turns this off too (roofline
   only); use_measured=True with it keeps the curves.
3a. Foreach ops (`_foreach_*`, source "launches"): each multi_tensor_apply launch timed from
   its largest chunk's loop latency and its bytes (multi_tensor.py), fitted on the launches
   of real H200 training profiles.
3b. The in-training family sweep (source "family", see families.py): ops and classes the
   isolated sweep does not cover (convolutions, batch norm, pooling, channels-last, strided and
   broadcast elementwise ops, permute copies, attention with dropout, masks or grouped-query
   heads, group norm, cuDNN RNNs, ...), interpolated over the roofline time and the first
   tensor's dimensions among the points of the same op and class. When both sweeps cover an
   op the isolated one answers: on the GPT references (exact table off) it is closer for
   attention and log_softmax (the family sweep's few vocabulary sizes mislead it there).
4. The roofline (source "roofline", see roofline.py and ops.py): FLOPs and bytes of the
   op, per-class efficiencies, kernel names and launch configs from generators (and the
   table's per-dtype kernel sequences for ops with no generator).

TF32: fp32 matmuls/convolutions use the TF32 tensor-core peak only with allow_tf32=True
(the caller passes torch.backends.cuda.matmul.allow_tf32 as the script set it; the
default, like PyTorch's, is False).

OpKind.MEMSET: PyTorch implements zero_/fill_/zeros with a FillFunctor kernel, not
cudaMemset, so those ops give that kernel whatever their kind; cudaMemsetAsync
("Memset (Device)") appears inside ops that really call it (cuBLAS/cuDNN workspaces,
reduction semaphores) and for MEMSET-kind calls of other names.

estimate() is deterministic and cached by (op name, kind, GPU, flags, arguments, outputs).
"""
from __future__ import annotations

import dataclasses

from phantora_prof import hostcost
from phantora_prof.cost import cat_paths
from phantora_prof.cost import families as _FAM
from phantora_prof.cost import kernels as _K
from phantora_prof.cost import measured as _M
from phantora_prof.cost import ops as _ops
from phantora_prof.cost import roofline as _R
from phantora_prof.cost import skinny_gemm as _skinny
from phantora_prof.cost.gpus import GPUS, DEFAULT_GPU, GpuSpec, get_gpu
from phantora_prof.cost.kernels import Kernel, KernelSpec, table
from phantora_prof.cost.memory_format import dense_in as _dense_in, dense_strides as _dense_strides
from phantora_prof.cost.memory_format import strides_like_channels_last, suggested_format  # noqa: F401 (re-exported)
from phantora_prof.cost.profiles import profile_for
from phantora_prof.cost.roofline import CLASSES
from phantora_prof.protocol import OpCall, OpKind, TensorArg

__all__ = ["Kernel", "GpuSpec", "GPUS", "DEFAULT_GPU", "get_gpu", "estimate", "op_class", "op_flops",
           "CLASSES", "clear_cache", "materialize"]

_CACHE: dict = {}
_CACHE_MAX = 1 << 16
_NAMES: dict[str, bool] = {}  # op name -> never launches GPU work
_NO_GPU_NAMESPACES = frozenset(("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd",
                                "prim", "profiler", "_dtensor", "record_param_comms"))


def clear_cache() -> None:
    _CACHE.clear()


def _hashable(v):
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    return v


def estimate(op: OpCall, gpu: GpuSpec | str | None = None, *, allow_tf32: bool = False,
             use_table: bool = True, use_measured: bool | None = None, use_family: bool | None = None) -> list[Kernel]:
    """The GPU activities `op` launches on `gpu`, in launch order ([] when none).

    use_table=False skips the exact-shape reference table; use_measured the interpolated
    sweep curves, and it follows use_table unless given: use_table=False alone is the
    roofline only (as before the sweep existed), use_table=False, use_measured=True the
    interpolation before the roofline. use_family (default: as use_measured) turns the
    in-training family curves (families.py) on or off on their own.
    """
    if use_measured is None:
        use_measured = use_table
    if use_family is None:
        use_family = use_measured
    if op.kind == OpKind.HOST:
        return []
    nb = _NAMES.get(op.name)
    if nb is None:
        ns, base = _R.split_name(op.name)
        nb = _NAMES[op.name] = ns in _NO_GPU_NAMESPACES or base in _ops.NO_GPU_WORK
    if nb:
        return []
    spec = gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
    gkey = spec.key if GPUS.get(spec.key) is spec else spec
    key, hit = cache_lookup(_CACHE, op, (gkey, allow_tf32, use_table, use_measured, use_family))
    if hit is not None:
        return list(hit)
    res = tuple(estimate_uncached(op, spec, allow_tf32, use_table, use_measured, use_family, None))
    cache_store(_CACHE, key, res)
    return list(res)


def estimate_uncached(op: OpCall, gpu: GpuSpec, allow_tf32: bool, use_table: bool, use_measured: bool,
                      use_family: bool, source=None) -> list[Kernel]:
    """An op's kernels from the sources in order (`_estimate`), then what an attention bias adds
    to them; `estimate` and CostModel.estimate cache around it."""
    return _with_attention_bias(op, _estimate(op, gpu, allow_tf32, use_table, use_measured, use_family, source), gpu)


def _with_attention_bias(op: OpCall, kernels: list[Kernel], gpu: GpuSpec) -> list[Kernel]:
    """`kernels` with what an attention bias adds (ops.attention_bias_ns) on the longest one:
    every source of attention times (table, family, sweep) was measured without a bias."""
    extra = _ops.attention_bias_ns(op, _R.split_name(op.name)[1], gpu) if kernels else 0.0
    if extra <= 0:
        return kernels
    main = max(range(len(kernels)), key=lambda i: kernels[i].duration_ns)
    return [dataclasses.replace(k, duration_ns=k.duration_ns + int(extra)) if i == main else k
            for i, k in enumerate(kernels)]


def cache_lookup(cache: dict, op: OpCall, context: tuple) -> tuple:
    """(key, cached kernels or None) of a call in `cache`: its name, kind, arguments and
    `context` (what else decided the answer: GPU, TF32, sources)."""
    try:
        key = (op.name, op.kind, context, op.args, tuple(op.kwargs.items()) if op.kwargs else (), op.outputs)
        return key, cache.get(key)
    except TypeError:  # an unhashable scalar (a list in kwargs): normalise
        key = (op.name, op.kind, context, _hashable(op.args), _hashable(op.kwargs or {}), op.outputs)
        return key, cache.get(key)


def cache_store(cache: dict, key: tuple, kernels: tuple) -> None:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = kernels


def op_class(op: OpCall) -> str:
    """The op's class (gemm, attention, elementwise, norm, ...) for summaries."""
    ns, base = _R.split_name(op.name)
    if op.kind == OpKind.MEMCPY or base == "_local_scalar_dense" or _cross_device(op, base):
        return _R.MEMCPY
    h = _ops.handler_for(base)
    try:
        return h(op, base, get_gpu(DEFAULT_GPU), False)[0].cls
    except Exception:  # noqa: BLE001 - a malformed call still gets a class
        return _R.ELEMENTWISE


def op_flops(op: OpCall, allow_tf32: bool = False) -> float:
    return sum(k.flops for k in estimate(op, DEFAULT_GPU, allow_tf32=allow_tf32))


# ------------------------------------------------------------------ internals

def _gpu_tensors(op) -> bool:
    for t in _R.all_inputs(op):
        if t.on_gpu:
            return True
    for t in _R.iter_tensors(op.outputs):
        if t.on_gpu:
            return True
    return False


def _copy_ends(op, base):
    if base == "copy_" or base == "_copy_from":
        dst, src = (op.args[0], op.args[1]) if base == "copy_" else (op.args[1], op.args[0])
    else:
        src = _R.first_tensor(op)
        outs = [t for t in _R.iter_tensors(op.outputs)]
        dst = outs[0] if outs else None
    if not isinstance(src, TensorArg):
        src = None
    if not isinstance(dst, TensorArg):
        dst = None
    return src, dst


def _trivial_power(op, base: str) -> OpCall | None:
    """`pow(t, 1)` and `pow(t, 0)` as a CUDA build runs them: ATen's pow_Tensor_Scalar_out copies
    the base (`out.copy_(base)`) or fills ones (`out.fill_(1)`) instead of launching the power
    kernel (Pow.cpp). Autograd's PowBackward0 of `x.pow(2)` computes `x.pow(1)`: a Memcpy DtoD
    under `aten::pow` in HF LLaMA's RMSNorm backward on the H200 (17 a step). None otherwise."""

    if base != "pow" or len(op.args) < 2 or not isinstance(op.args[0], TensorArg) or \
            isinstance(op.args[1], TensorArg) or isinstance(op.args[1], bool) or op.args[1] not in (0, 1):
        return None
    outs = [t for t in _R.iter_tensors(op.outputs)]
    if not outs:
        return None
    if op.args[1] == 1:
        return dataclasses.replace(op, name="aten::copy_", args=(outs[0], op.args[0]), kwargs={})
    return dataclasses.replace(op, name="aten::fill_.Scalar", args=(outs[0], 1), kwargs={})


def _over_no_elements(op, base: str) -> bool:
    """A copy or an elementwise op of an empty tensor, which launches nothing on a CUDA build:
    ATen's copy_ returns before any memcpy or cast kernel when the destination is empty
    (Copy.cpp, copy_impl), and TensorIterator's gpu_kernel when the iteration has no elements
    (HF GPT-2 moves a (0,)-shaped tensor to the GPU twelve times a step: no Memcpy HtoD in its
    H200 profile). Fills and reductions are left to their handlers (a sum over nothing still
    writes its zeros)."""
    if base in _ops.COPY_OPS or base == "to":
        src, dst = _copy_ends(op, base)
        return (src is not None and src.numel == 0) or (dst is not None and dst.numel == 0)
    if _ops.handler_for(base) is _ops.elementwise:
        outs = [t for t in _R.iter_tensors(op.outputs)]
        return bool(outs) and all(t.numel == 0 for t in outs)
    return False


def _cross_device(op, base) -> bool:
    if base not in _ops.COPY_OPS:
        return False
    src, dst = _copy_ends(op, base)
    if src is None or dst is None:
        return False
    return src.device != dst.device


def _estimate(op: OpCall, gpu: GpuSpec, allow_tf32: bool, use_table: bool,
              use_measured: bool = True, use_family: bool = True, source=None) -> list[Kernel]:
    """The sources in order (see the module docstring); `source` is a kernel database
    (measure/source.py) consulted first, given by the rank's CostModel (cost/model.py)."""
    ns, base = _R.split_name(op.name)
    if op.kind == OpKind.HOST or ns in _NO_GPU_NAMESPACES or base in _ops.NO_GPU_WORK:
        return []
    if not _gpu_tensors(op):
        return []
    if _over_no_elements(op, base):
        return []
    if base == "_local_scalar_dense":
        t = _R.first_tensor(op)
        return [_memcpy(gpu, t, TensorArg((), (), t.dtype, -1, True), t.itemsize)]
    if op.kind == OpKind.MEMCPY or _cross_device(op, base):
        res = _memcpy_op(op, base, gpu)
        if res is not None:
            return res
    if op.kind == OpKind.MEMSET and base not in _ops.FILL_OPS:
        outs = [t for t in _R.iter_tensors(op.outputs)] or [_R.first_tensor(op)]
        nbytes = sum(t.nbytes for t in outs if t is not None)
        return [Kernel(_K.KIND_MEMSET, _K.MEMSET_NAME, int(_R.memset_ns(nbytes, gpu)), bytes=nbytes,
                       launch_api=_K.API_MEMSET, source="roofline")]
    trivial = _trivial_power(op, base)
    if trivial is not None:
        return _estimate(trivial, gpu, allow_tf32, use_table, use_measured, use_family, source)
    if base in BLAS_OPERANDS or base in CONTIGUOUS_OPERANDS or base in CONV_OPERANDS or base in FORMAT_OPERANDS \
            or base in SOFTMAX_OPERANDS:
        parts = _operand_copies(op, base)
        if parts is not None:  # operands cloned contiguous first, then the op on the copies
            return [k for part in parts for k in _estimate(part, gpu, allow_tf32, use_table, use_measured,
                                                           use_family, source)]
    handler = _ops.handler_for(base)
    tbl = table("h200")
    if handler is _ops.embedding_dense_backward:
        cost, specs = handler(op, base, gpu, allow_tf32, tbl)
    else:
        cost, specs = handler(op, base, gpu, allow_tf32)
    if source is not None and use_table:
        res = _from_source(op, gpu, cost, source)
        if res is not None:
            return res
    if use_table and tbl is not None:
        res = _from_table(op, base, gpu, allow_tf32, tbl, cost)
        if res is not None:
            return res
    skinny = _skinny.estimate(op, base, gpu) if handler is _ops.gemm else None
    if skinny is not None:  # a matmul over many rows with a tiny inner or output dim (cost/skinny_gemm.py)
        return skinny
    column_sum = _as_column_sum(op, base)
    if column_sum is not None:  # not in the exact table: priced as the 2-D column sum it runs
        return _estimate(column_sum, gpu, allow_tf32, use_table, use_measured, use_family, source)
    split = _SPLITS.get(base)
    parts = split(op) if split is not None else None
    if parts is not None:  # an op a CUDA build runs as two (see _SPLITS)
        return [k for part in parts for k in _estimate(part, gpu, allow_tf32, use_table, use_measured, use_family,
                                                       source)]
    direct = _ops.direct_depthwise(op, base, gpu) if handler is _ops.convolution else None
    if direct is not None:  # cuDNN's direct grouped kernels, which no family point ran
        return materialize(*direct, 0.0, gpu, source="family")
    if handler is _ops.elementwise and tbl is not None and specs and specs[0].generic:
        specs = _table_names(op, base, tbl, specs, gpu)
    if use_family and handler is _ops.foreach and any(_multi_tensor([s]) for s in specs):
        res = _foreach_launches(op, base, gpu, cost, specs)
        if res is not None:
            return res
    total = _R.op_time_ns(cost, gpu)
    fam_args = _family_frame(op, base, gpu, handler, allow_tf32, cost, specs, total) if use_family and specs else None
    hit = _family_table(op, base, gpu, handler, False) if fam_args is not None else (None, None, None)
    if _answers_first(hit, gpu):
        # measured on this GPU, or cold, in training context: before the H200's isolated sweep
        res = _family(op, base, gpu, False, handler, *fam_args, hit)
        if res is not None:
            return res
    if use_measured and specs:
        res = _interpolated(op, base, gpu, allow_tf32, handler, cost, specs, total)
        if res is not None:
            return res
    if hit[2] is not None:
        res = _family(op, base, gpu, False, handler, *fam_args, hit)
        if res is not None:
            return res
    res = _fp32_attention_with_dropout(op, base, gpu, allow_tf32, use_table, use_measured, use_family, source)
    if res is not None:
        return res
    return materialize(cost, specs, total, gpu)


def _fp32_attention_with_dropout(op, base, gpu, allow_tf32, use_table, use_measured, use_family, source):
    """fp32 fused attention with dropout, which no sweep measured: the same call without dropout
    (the fp32 points) plus what dropout adds to the 16-bit kernels at this shape (the family's
    bf16 points with and without it). Dropout's work (a Philox draw and a mask per score) does not
    depend on the operands' dtype, so its cost is added, not scaled: BERT-base fp32's attention
    backward (dropout 0.1, [32, 12, 512, 64]) took 2.17 ms per call on an H100; the fp32 roofline
    said 3.77, added 2.24, scaled by the bf16 ratio 2.89 (session 50). None where the op is not
    such a call or a part is not covered."""
    pos = _FAM.attention_dropout_position(base)
    if pos is None or pos >= len(op.args):
        return None
    dropout = op.args[pos]
    first = _R.first_tensor(op)
    if not isinstance(dropout, (int, float)) or dropout <= 0 or first is None or first.dtype != "float32":
        return None

    def variant(dtype: str, p: float) -> OpCall:
        def cast(a):  # the [B, H, S, D] / [B, S, H, D] operands and outputs; not the log-sum-exp
            return dataclasses.replace(a, dtype=dtype) if isinstance(a, TensorArg) and a.dtype == "float32" \
                and len(a.shape) == 4 else a
        args = [cast(a) for a in op.args]
        args[pos] = p
        return dataclasses.replace(op, args=tuple(args), outputs=tuple(cast(o) for o in op.outputs))

    parts = [_estimate(variant(dt, p), gpu, allow_tf32, use_table, use_measured, use_family, source)
             for dt, p in (("float32", 0.0), ("bfloat16", dropout), ("bfloat16", 0.0))]
    without, with16, without16 = parts
    if not without or any(k.source == "roofline" for part in parts for k in part if k.kind == _K.KIND_KERNEL):
        return None
    added = max(0, sum(k.duration_ns for k in with16) - sum(k.duration_ns for k in without16))
    main = max(range(len(without)), key=lambda i: without[i].duration_ns)
    return [dataclasses.replace(k, duration_ns=k.duration_ns + added) if i == main else k
            for i, k in enumerate(without)]


# handlers whose fp32 time depends on a TF32 switch, and of them those whose fp32 family points
# ran with TF32 allowed: cuDNN's switches default to TF32 (convolutions, RNNs), the matmul one
# does not (its points are IEEE fp32)
_TF32_HANDLERS = frozenset({_ops.gemm, _ops.grouped_mm, _ops.convolution, _ops.cudnn_rnn})
_FAMILY_TF32_HANDLERS = frozenset({_ops.convolution, _ops.cudnn_rnn})


def _family_frame(op, base, gpu, handler, allow_tf32: bool, cost, specs, total) -> tuple | None:
    """(cost, specs, total) of the op as the family tables place it, or None where they cannot
    answer. The family sweep ran under torch's default TF32 switches and `calibrate families`
    placed every point by its roofline without TF32: a query is placed the same way (else a
    TF32 roofline 7x shorter lands among much smaller points: ResNet-50's fp32 convolutions came
    out 50-80% fast, session 50), and a matmul with TF32 on has no points that ran its kernels."""
    first = _R.first_tensor(op)
    if handler not in _TF32_HANDLERS or first is None or first.dtype != "float32":
        return cost, specs, total  # the switches change nothing but fp32 GEMM-like math
    if handler not in _FAMILY_TF32_HANDLERS:
        # a matmul's fp32 points are IEEE: with TF32 on, none ran its kernels
        return None if allow_tf32 else (cost, specs, total)
    # cuDNN's points ran with TF32; with its switch turned off they still answer (approximate,
    # not measured: such a run is slower than the family says)
    if not allow_tf32:
        return cost, specs, total
    c, sp = handler(op, base, gpu, False)
    return c, sp, _R.op_time_ns(c, gpu)


def _conv_forward_bias_split(op: OpCall) -> tuple[OpCall, OpCall] | None:
    """A convolution with a bias, as the two things a CUDA build runs: cuDNN's convolution
    without the bias (`cudnn_convolution` takes none), then `output.add_(bias.view(1, C, 1, 1))`
    (ATen's _convolution; measured in the H200 traces of timm's ViT patch embedding and
    ConvNeXt's depthwise convolutions). None without a bias tensor."""
    bias = op.args[2] if len(op.args) > 2 else None
    out = op.outputs[0] if op.outputs and isinstance(op.outputs[0], TensorArg) else None
    if not isinstance(bias, TensorArg) or out is None or len(out.shape) < 3:
        return None
    conv = dataclasses.replace(op, args=op.args[:2] + (None,) + op.args[3:])
    c = out.shape[1]
    view = TensorArg((1, c) + (1,) * (len(out.shape) - 2), (1,) * len(out.shape), bias.dtype, bias.device)
    add = dataclasses.replace(op, name="aten::add_.Tensor", args=(out, view), kwargs={}, outputs=(out,))
    return conv, add


def _conv_bias_split(op: OpCall) -> tuple[OpCall, OpCall] | None:
    """A convolution backward that also wants the bias gradient, as the two things it runs.

    ATen computes the bias gradient outside the convolution library, as `grad_output.sum`
    over every dim but the channels (Convolution.cpp), after the cuDNN data / weight gradient
    kernels; those kernels are the same with or without a bias. So the op is costed as the
    convolution backward without the bias (the family sweep measured that) followed by that
    sum (measured as a reduction). Returns None when the op has no bias gradient to compute.
    """
    mask = op.args[10] if len(op.args) > 10 else None
    grad = op.args[0] if op.args else None
    if not isinstance(mask, (tuple, list)) or len(mask) < 3 or not mask[2] or not isinstance(grad, TensorArg) \
            or len(grad.shape) < 3:
        return None
    c = grad.shape[1]
    outs = op.outputs
    if outs and isinstance(outs[-1], TensorArg) and tuple(outs[-1].shape) == (c,):
        outs = outs[:-1]  # the bias gradient is the sum's output
    conv = dataclasses.replace(op, args=op.args[:10] + ((mask[0], mask[1], False),) + op.args[11:], outputs=outs)
    dims = (0,) + tuple(range(2, len(grad.shape)))
    bias = TensorArg((c,), (1,), grad.dtype, grad.device)
    total = dataclasses.replace(op, name="aten::sum.dim_IntList", args=(grad, dims, False), kwargs={},
                                outputs=(bias,))
    return conv, total


# ops whose biased form a CUDA build runs as the unbiased op and the bias's own kernel
# GEMM ops whose matrix operands go through aten's prepare_(batch_)matrix_for_cublas, and
# the positions of those operands
BLAS_OPERANDS = {"mm": (0, 1), "addmm": (1, 2), "_addmm_activation": (1, 2), "bmm": (0, 1), "baddbmm": (1, 2),
                  "addbmm": (1, 2)}
# ops whose CUDA kernels take an operand contiguous (`expect_contiguous` in layer_norm_cuda and
# its backward, which the fused RMS norm shares), and its positions: a non-contiguous one (a
# transposed sequence, as HF whisper's encoder carries its hidden states from the conv front
# end: 13 layer norms and their backwards a step, each with a strided copy kernel inside, on the
# H200) is cloned inside the op first
CONTIGUOUS_OPERANDS = {"native_layer_norm": (0,), "native_layer_norm_backward": (0, 1), "_fused_rms_norm": (0,),
                       "_fused_rms_norm_backward": (0, 1), "im2col": (0,), "col2im": (0,)}
# Softmax and log-softmax do the same (`input_.contiguous()` in SoftMax.cu's host_softmax, the
# gradient and the output in its backward), and then pick their kernel by the dim's place in the
# contiguous copy: CaiT's talking-heads softmax over the last dim of a permuted [128, 4, 196, 196]
# view ran a strided copy then the warp kernel on the H100 (68 + 53 us), where pricing the
# strides as they came chose the spatial kernel (97 + 172 us). Split only for the last dim: over
# another dim the spatial kernel runs either way, and the family points of such calls (a
# channels-last segmentation map's log-softmax over its classes: copy + spatial kernel) price
# them whole within a few percent, better than the copy and the kernel priced apart (DeepLabV3's
# reductions +6% whole, +25% apart). Operands, and the dim's position
SOFTMAX_OPERANDS = {"_softmax": ((0,), 1), "_log_softmax": ((0,), 1), "_softmax_backward_data": ((0, 1), 2),
                    "_log_softmax_backward_data": ((0, 1), 2)}
# upsampling backwards and their gradient's position: ATen's CUDA kernels take the gradient dense
# in the memory format it suggests (`grad_output_.contiguous(grad_output_.suggest_memory_format())`
# in UpSampleBilinear2d.cu / UpSampleNearest2d.cu), so a channel slice of a concatenated gradient
# (DeepLabV3's ASPP and SegFormer's decode head upsample branches that are then concatenated) is
# copied dense channels-last first: on the H200 a 56 us copy, then the x64 NHWC backward (2.2 ms),
# where the strided gradient alone was priced as one 25 us copy. The forwards copy an input that
# suggests channels-last dense into it (`input.contiguous(ChannelsLast)` before the NHWC kernel);
# the NCHW kernels take any strides
FORMAT_OPERANDS = {"upsample_bilinear2d_backward": (0,), "upsample_nearest2d_backward": (0,),
                   "upsample_bilinear2d": (0,), "upsample_nearest2d": (0,)}
# convolutions and the positions of (input, weight[, grad_output]): ATen hands cuDNN every operand
# in one memory format, channels-last when the input or the weight is (cudnn_conv_suggest_memory
# _format), else contiguous, and copies those in another first (`input.contiguous(format)` in
# _convolution and convolution_backward, `weight.contiguous(format)` in cuDNN's wrapper).
# PoolFormer's 1x1 convolutions take the NCHW output of a GroupNorm with channels-last weights:
# on the H200 a strided copy to channels-last (117 us for 128x64x56x56 bf16), then the
# channels-last kernel (84 us), where the NCHW point priced the call as NCHW cuDNN
CONV_OPERANDS = {"convolution": (0, 1), "_convolution": (0, 1), "cudnn_convolution": (0, 1),
                 "convolution_backward": (0, 1, 2)}


def copied_operands(name: str, args: tuple) -> list[int]:
    """Positions of the operands a CUDA build clones contiguous inside op `name` ("aten::mm",
    an overload's name too) before its kernels run (GEMM operands cuBLAS cannot take,
    BLAS_OPERANDS; operands of ops that need them contiguous, CONTIGUOUS_OPERANDS). `args` hold
    TensorArgs or tensors (shape, stride)."""
    base = _R.split_name(name)[1]
    if base in BLAS_OPERANDS:
        positions, needs = BLAS_OPERANDS[base], _R.blas_needs_copy
    elif base in CONTIGUOUS_OPERANDS:
        positions, needs = CONTIGUOUS_OPERANDS[base], _not_contiguous
    elif base in SOFTMAX_OPERANDS:
        positions, at = SOFTMAX_OPERANDS[base]
        shape, _ = _shape_stride(args[positions[0]] if args else None)
        dim = args[at] if at < len(args) else -1
        if shape is None or not isinstance(dim, int) or dim % max(len(shape), 1) != len(shape) - 1:
            return []
        needs = _not_contiguous
    elif base in CONV_OPERANDS:
        return _conv_copied_operands(base, args)
    elif base in FORMAT_OPERANDS:
        if base.endswith("_backward"):
            if _upsample_same_size(base, args):
                return []  # copied as it is (_upsample_identity_split)
            positions, needs = FORMAT_OPERANDS[base], _not_dense_in_suggested_format
        else:
            positions, needs = FORMAT_OPERANDS[base], _channels_last_not_dense
    else:
        return []
    out = []
    for i in positions:
        shape, stride = _shape_stride(args[i] if i < len(args) else None)
        if shape is not None and needs(shape, stride):
            out.append(i)
    return out


def _shape_stride(t) -> tuple[tuple | None, tuple | None]:
    """(shape, strides) of a TensorArg or a tensor; (None, None) for anything else."""
    if t is None or not hasattr(t, "shape") or not hasattr(t, "stride") or isinstance(t, (list, tuple)):
        return None, None
    return tuple(t.shape), (tuple(t.stride) if isinstance(t, TensorArg) else tuple(t.stride()))


def _conv_copied_operands(base: str, args: tuple) -> list[int]:
    """The operands of a convolution not in the memory format cuDNN runs it in (CONV_OPERANDS)."""
    fmt = _conv_format(base, args)
    if fmt is None:
        return []
    out = []
    for i in CONV_OPERANDS[base]:
        shape, stride = _shape_stride(args[i] if i < len(args) else None)
        if shape is not None and len(shape) == fmt[0] and not _dense_in(shape, stride, fmt[1]):
            out.append(i)
    return out


def _conv_format(base: str, args: tuple) -> tuple[int, str] | None:
    """(rank, "c" / "cl") of the memory format a convolution op's operands run in, from its
    input and weight (conv_memory_format); None for anything but 4-D / 5-D ones."""
    inp, weight = (1, 2) if base == "convolution_backward" else (0, 1)
    shape, stride = _shape_stride(args[inp] if inp < len(args) else None)
    fmt = conv_memory_format(shape, stride, *_shape_stride(args[weight] if weight < len(args) else None))
    return None if fmt is None else (len(shape), fmt)


def conv_memory_format(shape, stride, wshape, wstride) -> str | None:
    """"cl" or "c": the memory format ATen runs a cuDNN convolution in, channels-last (-3d) when
    the input or the weight suggests it, else contiguous. None for anything but 4-D / 5-D
    operands."""
    if shape is None or wshape is None or len(shape) not in (4, 5) or len(wshape) != len(shape):
        return None
    cl = strides_like_channels_last(shape, stride) or strides_like_channels_last(wshape, wstride)
    return "cl" if cl else "c"


def _in_format(t: TensorArg, fmt: str = "c") -> TensorArg:
    """`t` copied dense into memory format `fmt`, as `t.contiguous(format)` makes it."""
    return TensorArg(t.shape, _dense_strides(t.shape, fmt), t.dtype, t.device)


def _not_contiguous(shape: tuple, stride: tuple) -> bool:
    return not _R.contiguous_strides(shape, stride)


def _channels_last_not_dense(shape: tuple, stride: tuple) -> bool:
    """Whether a tensor suggests channels-last and `t.contiguous(channels_last)` copies it."""
    return suggested_format(shape, stride) == "cl" and _not_dense_in_suggested_format(shape, stride)


def _not_dense_in_suggested_format(shape: tuple, stride: tuple) -> bool:
    """Whether `t.contiguous(t.suggest_memory_format())` copies."""
    dense = _in_format(TensorArg(tuple(shape), tuple(stride), "float32", 0), suggested_format(shape, stride))
    return any(n != 1 and a != b for n, a, b in zip(shape, stride, dense.stride))


def _operand_copies(op: OpCall, base: str) -> list[OpCall] | None:
    """An op with operands its CUDA kernels cannot take as they are (`copied_operands`: a GEMM's
    expanded, stride-0 gradient, as `loss.sum().backward()` gives the first backward GEMMs; a
    layer norm's transposed input; a convolution's operand in another memory format than cuDNN
    is given), as what a CUDA build runs: each operand's clone in the layout the kernels take
    (contiguous; cuDNN's format for a convolution), then the op on the clones. Measured on the H200: a clone and a
    transient allocation of the operand's size inside the op (session 20's memory traces, session
    21's whisper profile). None when every operand is usable."""
    positions = copied_operands(op.name, op.args)
    if not positions:
        return None
    args = list(op.args)
    copies = []
    fmt = _conv_format(base, args)[1] if base in CONV_OPERANDS else "c"
    for i in positions:
        t = args[i]
        dense = _in_format(t, suggested_format(t.shape, t.stride) if base in FORMAT_OPERANDS else fmt)
        copies.append(dataclasses.replace(op, name="aten::clone", args=(t,), kwargs={}, outputs=(dense,)))
        args[i] = dense
    return copies + [dataclasses.replace(op, args=tuple(args))]


def _baddbmm_self_split(op: OpCall) -> tuple[OpCall, OpCall] | None:
    """baddbmm with beta != 0 as the two things ATen's CUDA kernel runs: `result.copy_(self)`
    (self expanded to the result's shape: ALiBi's (B*H, 1, S) bias becomes a (B*H, S, S) copy),
    then the batched GEMM with beta = 1, which reads that full-size C in its epilogue (ops.gemm,
    the profile's `gemm_c_read`). BLOOM's
    attention scores on the H200 (session 29): a 0.54 ms broadcast copy and a 0.42 ms GEMM per
    layer for (64, 2048, 2048) bf16, where the same bmm without C takes 0.16 ms. None for beta 0
    or for the GEMM part itself (its self is the result)."""
    out = op.outputs[0] if op.outputs and isinstance(op.outputs[0], TensorArg) else None
    c = op.args[0] if op.args else None
    if out is None or not isinstance(c, TensorArg) or c is out or _R.arg(op, "baddbmm", "beta", 1) == 0:
        return None
    expanded = TensorArg(out.shape, _expanded_strides(c, out.shape), c.dtype, c.device)
    copy = dataclasses.replace(op, name="aten::copy_", args=(out, expanded), kwargs={}, outputs=(out,))
    gemm = dataclasses.replace(op, args=(out,) + tuple(op.args[1:]))
    return copy, gemm


def _expanded_strides(t: TensorArg, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of `t.expand(shape)`: dims t lacks (leading) or broadcasts (size 1) get 0."""
    pad = len(shape) - len(t.shape)
    sizes, strides = (1,) * pad + tuple(t.shape), (0,) * pad + tuple(t.stride)
    return tuple(0 if n == 1 and d != 1 else st for n, st, d in zip(sizes, strides, shape))


_SIZES_COPIED = "_phantora_sizes_copied"  # a kwarg marking the kernel part of a _sizes_copy_split


def _sizes_copy_split(op: OpCall) -> tuple[OpCall, OpCall] | None:
    """`split_with_sizes_copy` and `_chunk_cat` (FSDP2's copy-out and reduce-scatter copy-in) as
    the two things their CUDA kernels launch: the per-tensor pointers and sizes, packed on the
    host, copied to the GPU from pinned memory (a `to` / `copy_` child with a Memcpy HtoD in the
    real FSDP2 profile, tests/data/real/h200x2/traces/fsdp_rank0), then the copy kernel.
    Approximate: the metadata's size is taken as three int64s per tensor of the list."""
    if op.kwargs.get(_SIZES_COPIED):
        return None
    lists = [a for a in (*op.args, *op.kwargs.values()) if isinstance(a, (list, tuple)) and a
             and all(isinstance(t, TensorArg) for t in a)]
    gpu = _R.first_tensor(op)
    if not lists or gpu is None:
        return None
    n = 3 * max(len(x) for x in lists)
    meta = TensorArg((n,), (1,), "int64", -1, True)
    dst = TensorArg((n,), (1,), "int64", gpu.device)
    copy = dataclasses.replace(op, name="aten::copy_", args=(dst, meta), kwargs={}, outputs=(dst,),
                               kind=OpKind.MEMCPY)
    kernel = dataclasses.replace(op, kwargs={**op.kwargs, _SIZES_COPIED: True})
    return copy, kernel


def _upsample_same_size(base: str, args: tuple) -> bool:
    """An upsampling (or its backward) to the size it starts from, which ATen runs as a copy."""
    if base.endswith("_backward"):
        g = args[0] if args else None
        size = args[2] if len(args) > 2 else None
        return isinstance(g, TensorArg) and isinstance(size, (list, tuple)) and tuple(g.shape) == tuple(size)
    x = args[0] if args else None
    size = args[1] if len(args) > 1 else None
    return isinstance(x, TensorArg) and isinstance(size, (list, tuple)) and len(x.shape) == 2 + len(size) and \
        tuple(x.shape[2:]) == tuple(size)


def _upsample_identity_split(op: OpCall) -> tuple[OpCall, ...] | None:
    """An upsampling to its input's own size as what ATen's CUDA kernels do for it
    (UpSampleBilinear2d.cu / UpSampleNearest2d.cu): the forward copies the input into the output;
    the backward zeroes the gradient's buffer, then copies the incoming gradient into it. SegFormer's
    decode head resizes its first-stage features to their own size: on the H200 a fill and a 198 us
    copy for (16, 256, 128, 128) fp32, where the NHWC backward kernel was priced (566 us). None
    for a real resize."""
    base = _R.split_name(op.name)[1]
    out = op.outputs[0] if op.outputs and isinstance(op.outputs[0], TensorArg) else None
    src = op.args[0] if op.args and isinstance(op.args[0], TensorArg) else None
    if out is None or src is None or not _upsample_same_size(base, op.args):
        return None
    copy = dataclasses.replace(op, name="aten::copy_", args=(out, src), kwargs={}, outputs=(out,))
    if not base.endswith("_backward"):
        return (copy,)
    zero = dataclasses.replace(op, name="aten::fill_.Scalar", args=(out, 0), kwargs={}, outputs=(out,))
    return zero, copy


def _masked_fill_split(op: OpCall) -> tuple[OpCall, OpCall] | None:
    """Out-of-place `masked_fill` as ATen runs it on CUDA (TensorAdvancedIndexing.cpp): the input
    cloned contiguous, then `masked_fill_` on the clone. HF Mixtral's router on the H200: a 155 us
    DtoD copy and a 200 us broadcast-mask fill for (16384, 3584) fp32, where one fill kernel was
    priced (165 us). None for the in-place op or a malformed call."""
    out = op.outputs[0] if op.outputs and isinstance(op.outputs[0], TensorArg) else None
    src = op.args[0] if op.args and isinstance(op.args[0], TensorArg) else None
    if out is None or src is None:
        return None
    clone = dataclasses.replace(op, name="aten::clone", args=(src,), kwargs={}, outputs=(out,))
    fill = dataclasses.replace(op, name=op.name.replace("masked_fill", "masked_fill_", 1),
                               args=(out,) + tuple(op.args[1:]), outputs=(out,))
    return clone, fill


def _list_op_args(op: OpCall) -> tuple[tuple[TensorArg, ...], TensorArg, int] | None:
    """(input tensors, output, dim) of a cat or stack call, or None when its record lacks them."""
    inputs = op.args[0] if op.args and isinstance(op.args[0], tuple) else None
    out = op.outputs[0] if op.outputs and isinstance(op.outputs[0], TensorArg) else None
    if not inputs or out is None or not all(isinstance(t, TensorArg) for t in inputs):
        return None
    dim = op.args[1] if len(op.args) > 1 and isinstance(op.args[1], int) else op.kwargs.get("dim", 0)
    return inputs, out, dim


def _slice_copies(op: OpCall, inputs, out: TensorArg, dim: int) -> tuple[OpCall, ...] | None:
    """A cat of `inputs` into `out` along `dim` as a CUDA build runs it when it cannot batch them
    (cost/cat_paths.py, way 3): one `copy_` per input into the output's narrowed slice, each priced
    as the copy it is. None when the batched copy kernels run."""
    if not cat_paths.copies_per_input(inputs, out):
        return None
    return tuple(dataclasses.replace(op, name="aten::copy_", args=(dst, src), kwargs={}, outputs=(dst,))
                 for src, dst in cat_paths.copied_slices(inputs, out, dim))


def _cat_copy_split(op: OpCall) -> tuple[OpCall, ...] | None:
    """A cat a CUDA build runs as one copy per input (mixed dtypes, one input, more than 4 dims, ...)."""
    args = _list_op_args(op)
    return _slice_copies(op, *args) if args is not None else None


def _stack_copy_split(op: OpCall) -> tuple[OpCall, ...] | None:
    """A stack whose cat (cost/cat_paths.py `as_cat`) a CUDA build runs as one copy per input."""
    args = _list_op_args(op)
    cat = cat_paths.as_cat(*args) if args is not None else None
    return _slice_copies(op, *cat) if cat is not None else None


def _reduce_cast_input(op: OpCall) -> tuple[OpCall, ...] | None:
    """A reduction whose kernel reads its input cast to the output's dtype (ops.reduction_input_dtype):
    priced on the cast tensor; the cast itself is the `aten::to` the capture records inside it, or,
    for a `sum.default` whose learned children lay that out already (ops.CAST_IN_KERNELS_KWARG),
    a copy kernel of the op's own before the reduction. None when it reads the input as it is."""
    x = op.args[0] if op.args and isinstance(op.args[0], TensorArg) else None
    out = op.outputs[0] if op.outputs and isinstance(op.outputs[0], TensorArg) else None
    if x is None or out is None:
        return None
    base = op.name.split("::", 1)[-1].split(".", 1)[0]
    dtype = _ops.reduction_input_dtype(base, x.dtype, out.dtype)
    if dtype == x.dtype:
        return None
    # `to` keeps a dense tensor's strides (preserve_format); anything else it makes contiguous
    stride = x.stride if _R.dense_order(x) is not None else _dense_strides(x.shape)
    cast = TensorArg(x.shape, stride, dtype, x.device)
    kwargs = {k: v for k, v in op.kwargs.items() if k != _ops.CAST_IN_KERNELS_KWARG}
    reduce = dataclasses.replace(op, args=(cast, *op.args[1:]), kwargs=kwargs)
    if not op.kwargs.get(_ops.CAST_IN_KERNELS_KWARG):
        return (reduce,)
    return dataclasses.replace(op, name="aten::copy_", args=(cast, x), kwargs={}, outputs=(cast,)), reduce


_SPLITS = {"convolution": _conv_forward_bias_split, "_convolution": _conv_forward_bias_split,
           "convolution_backward": _conv_bias_split, "baddbmm": _baddbmm_self_split,
           "split_with_sizes_copy": _sizes_copy_split, "_chunk_cat": _sizes_copy_split, "masked_fill": _masked_fill_split,
           "cat": _cat_copy_split, "stack": _stack_copy_split,
           **{name: _reduce_cast_input for name in _ops.CAST_BEFORE_REDUCE},
           **{name: _upsample_identity_split for name in ("upsample_bilinear2d", "upsample_nearest2d",
                                                          "upsample_bilinear2d_backward",
                                                          "upsample_nearest2d_backward")}}


def _family_class(fam, base: str, key: str, handler) -> tuple[str, str, tuple | None] | None:
    """(op name, class key, composed keys or None) of the family points that answer for an op of
    `base` and class `key`, or None when the sweep has nothing for it: its own class; an
    attention variant composed from measured ones; an in-place op's out-of-place twin (relu_ ->
    relu; stack runs cat's); a sibling elementwise class; a swept max-pool window (families.py)."""
    if fam.covers(base, key):
        return base, key, None
    composed = _FAM.composed_attention_keys(fam, base, key)
    if composed is not None:
        return base, key, composed
    twin = "cat" if base == "stack" else base.rstrip("_")
    if base == "copy_" and key.endswith("|bcast"):
        twin = "clone"  # an expanded source: the same TensorIterator copy kernel as clone's (swept)
    if twin != base and fam.covers(twin, key):
        return twin, key, None
    if handler in (_ops.elementwise, _ops.copy_op, _ops.fill_op):
        sibling = _FAM.sibling_elementwise_class(fam, base, key)
        if sibling is not None:
            return sibling[0], sibling[1], None
    window = _FAM.swept_pool_window(fam, base, key)  # a max-pool window not swept: a swept one
    if window is not None:
        return base, window, None
    return None


def _family_table(op, base, gpu, handler, allow_tf32: bool = False):
    """(family model, the GPU it was measured on, what answers in it) for the op: of the tables of
    GPUs of this architecture that measured its class (this GPU's own, the reference H200's, any
    other; another GPU's times are carried below, roofline.carried_time_ns), the one with the
    point nearest the op (_nearest_table); (None, None, None) when none covers it. Library
    kernels differ per architecture, so another architecture (A100) takes none (the roofline's
    own efficiencies).

    A class measured cold (the L2 overwritten before each call) answers before the same class
    measured warm, whichever GPU measured it: a training step's column sums read gradients
    other kernels have pushed out of the L2 (the H100's cold grid, carried to the H200, puts
    2,883 column sums of 39 H200 profiles at 1.01x their real time in the median, 0.99x in
    total, where the H200's own warm points said 0.89x and 0.84x; session 33).

    A class no table measured may have a stand-in that runs the same kernels
    (families.stand_in_keys: a padded convolution's aligned class); the class itself, in any
    table, answers before a stand-in."""
    tables = [(get_gpu(g), _FAM.model(g)) for g in sorted(_FAM.measured_gpus(), key=lambda k: k != gpu.key)]
    tables = [(ref, fam) for ref, fam in tables if fam is not None and ref.arch == gpu.arch]
    if not tables:
        return None, None, None
    key = _FAM.class_key(op, base)
    for k in (key, *_FAM.stand_in_keys(base, key)):
        hits = []
        for ref, fam in tables:
            found = _family_class(fam, base, k, handler)
            if found is None:
                continue
            if fam.cold(found[0], found[1]):
                return fam, ref, found
            hits.append((fam, ref, found))
        if hits:
            return _nearest_table(op, base, handler, allow_tf32, hits, gpu)
    return None, None, None


def _nearest_table(op, base, handler, allow_tf32: bool, hits: list[tuple], gpu) -> tuple:
    """Of the tables that measured an op's class, the one whose nearest point is nearest the
    op; this GPU's own table (hits[0] when it has one) wins unless another's nearest point is
    nearer by more than the profile's `family_own_gpu_margin`: a carried point adds the
    roofline's scaling between the GPUs to its error. An H100 sweep of a few sizes of a class
    (conv_maps: 3x3 convolutions over maps of 9..75, session 38) then answers for those sizes,
    and the H200's full grid, carried, for the rest."""
    if len(hits) == 1 or any(h[2][2] is not None for h in hits):  # composed attention: the first
        return hits[0]
    scored = []
    for fam, ref, found in hits:
        name, key, _ = found
        rc = _cost_on(handler, op, base, ref, allow_tf32)
        w = _R.op_time_ns(rc, ref)
        scored.append((fam.nearest_distance(name, key, w, _FAM.shape_features(op, name)), (fam, ref, found)))
    best_d, best = min(scored, key=lambda x: x[0])
    own_d, own = scored[0]
    if own[1].key == gpu.key and own_d <= best_d * profile_for(gpu).family_own_gpu_margin:
        return own
    return best


def _as_column_sum(op: OpCall, base: str) -> OpCall | None:
    """A sum over the dims that are outermost in memory, as the 2-D column sum it is.

    TensorIterator coalesces a dense tensor's dims before it reduces, so a channels-last
    [N, C, H, W] bias gradient summed over N, H, W runs the very kernel, launch and memory
    traffic of a [N*H*W, C] sum over dim 0 (a linear's bias gradient). Priced as its own class it
    took the H200's few warm channels-last points and a roofline 5x off the 2-D one's
    (100 such sums in the H200 profiles: 0.72x real in the median, 20% of them within
    0.8-1.25x); as the 2-D sum it takes the cold column-sum grid (session 33). None for
    anything else (the 2-D sum itself included)."""
    if base != "sum" or not op.args or not isinstance(op.args[0], TensorArg):
        return None
    t = op.args[0]
    if _R.dense_order(t) is None or _FAM.reduction_kind(op, t) not in ("outer", "outer_u"):
        return None
    red = _FAM.reduced_dims(op, t)
    if len(t.shape) == 2 and tuple(red) == (0,) and t.stride == (t.shape[1], 1):
        return None  # already the 2-D column sum
    rows = 1
    for d in red:
        rows *= t.shape[d]
    cols = t.numel // max(rows, 1)
    outs = [o for o in op.outputs if isinstance(o, TensorArg)]
    out = TensorArg((cols,), (1,), outs[0].dtype if outs else t.dtype, t.device)
    return dataclasses.replace(op, args=(TensorArg((rows, cols), (cols, 1), t.dtype, t.device), [0]) + tuple(op.args[2:]),
                               outputs=(out,))


def _answers_first(hit: tuple, gpu) -> bool:
    """Whether the family table `hit` (from _family_table) answers for the op before the H200's
    isolated sweep: where this GPU (not the reference) measured the class itself, or where it was
    measured cold (the H100's column sums over a dense grid, session 33: the isolated sweep
    smoothed a [50176, 192] bias gradient to 48 us against the H100's 96, the in-model time)."""
    fam, ref, found = hit
    if found is None:
        return False
    return (ref.key == gpu.key and gpu.key != _FAM.GPU_KEY) or fam.cold(found[0], found[1])


def _family(op, base, gpu, allow_tf32, handler, cost, specs, total, hit: tuple) -> list[Kernel] | None:
    """Kernels from the in-training family sweep (families.py) of the table `hit` (from
    _family_table), or None when the op's class is not covered."""
    if len(specs) == 1 and specs[0].kind == _K.KIND_MEMCPY:
        return None  # a plain DtoD copy: the copy model's bandwidth curve
    if handler is _ops.batch_group_norm and base.startswith("native_batch_norm") and \
            _ops.bn_channel_block_training(op, base):
        return None  # NCHW / strided batch norm: the channel-block model (ops.batch_norm_nchw) follows C, w does not
    fam, ref, found = hit
    if found is None:
        return None
    name, key, composed = found
    w = sum(k.duration_ns for k in materialize(cost, specs, total, gpu))
    if gpu.key == ref.key:
        w_ref = w
    else:
        rc = _cost_on(handler, op, base, ref, allow_tf32)
        w_ref = sum(k.duration_ns for k in materialize(rc, specs, _R.op_time_ns(rc, ref), ref))
    # a foreach op over a parameter list: its first tensor says nothing of the work (HF wav2vec2's
    # is a 768-element embedding, whisper's a convolution weight; their AdamW steps moved the same
    # bytes per element on the H200 while first-tensor features priced them 2.5x apart), so its
    # points are neighbours by roofline time (total bytes) alone
    feats = () if _multi_tensor(specs) else _FAM.shape_features(op, name)
    w_query = _list_op_roofline(op, base, handler, ref, allow_tf32) if name in ("cat", "stack") else w_ref
    if composed is not None:  # t(without dropout) x t(dropout only) / t(plain), same shape
        hits = [fam.predict(name, k, w_query, feats) for k in composed]
        if any(h is None for h in hits):
            return None
        hit = (hits[0][0] * hits[1][0] / max(hits[2][0], 1.0), hits[0][1])
    else:
        # a point measured on this very GPU at this very shape answers as measured; another GPU's
        # is carried and blended (an H100 point carried to the H200 is a prediction, and the
        # blend of DeepLabV3's dilated convolutions came nearer their H200 profile: 1.22 ms real,
        # 1.2 blended, 0.80 from the H100's own point)
        hit = fam.predict(name, key, w_query, feats, exact=gpu.key == ref.key)
    if hit is None:
        return None
    t, near = hit
    if gpu.key != ref.key:
        t = _R.carried_time_ns(t, w_ref, w, ref, gpu)
    if _multi_tensor(specs):
        # a foreach op: as many launches as ATen's multi_tensor_apply splits these tensors into
        # (kernels.multi_tensor_launches), not as the nearest measured point had: the time is
        # the family's, shared by the launches' elements
        return materialize(cost, specs, t, gpu, "family")
    scale = t / max(near["t"], 1)
    own = _own_casting_kernel(handler, specs, near, fam)
    point = near["k"]
    groups = _FAM.conv_groups(op, base)
    if groups is not None:
        # cuDNN's per-group loops launch as many kernels as the op has groups, not as its
        # nearest point had (families.regroup); the interpolated time is shared by them
        at = _FAM.point_groups(name, key, near)
        regrouped = _FAM.regroup(point, at, groups) if at is not None else point
        if regrouped is not point:
            point = regrouped
            varying = sum(k[-1] for k in point if k[0] != _K.KIND_MEMSET)
            fixed = sum(k[-1] for k in point if k[0] == _K.KIND_MEMSET)
            scale = max(t - fixed, 0.0) / max(varying, 1)
    if base == "_cudnn_rnn" and key.endswith("|bfloat16") and _FAM.class_key(op, base).endswith("|float16"):
        point = _FAM.autocast_rnn_inner(fam.names, point)  # the autocast sweep's point for the inner call
    if base == "where":
        # the sweep's points are HF masks, where(mask, x, scalar): the scalar's fill kernel is
        # scalar_tensor's (captured as its own op here), and their broadcast mask ran the strided
        # kernel where a full-size one runs the vectorized kernel this op's own spec names
        point = [k for k in point if "FillFunctor" not in fam.names[k[1]]] or point
        if len(point) == 1 and len(specs) == 1 and "vectorized" in specs[0].name:
            own = specs[0]
    out = []
    for kind, ni, gx, gy, gz, bx, by, bz, regs, smem, nbytes, ai, dur in point:
        d = dur if kind == _K.KIND_MEMSET else dur * scale
        name, api = fam.names[ni], fam.apis[ai]
        if own is not None:
            name, api, (gx, gy, gz), (bx, by, bz), regs = own.name, own.api, own.grid, own.block, own.regs
        out.append(Kernel(kind, name, max(profile_for(gpu).kernel_floor_ns, int(round(d))), (gx, gy, gz), (bx, by, bz), regs,
                          smem, nbytes, api, cost.flops * (d / max(t, 1.0)) if kind == _K.KIND_KERNEL else 0.0,
                          "family"))
    return out


def _own_casting_kernel(handler, specs, near, fam):
    """The op's own kernel where it casts and its nearest family point does not: an elementwise
    op over operands of two dtypes (HF GPT-2's `bf16 * fp32` in its GELU, HF LLaMA's RoPE
    products) runs TensorIterator's casting kernel (unrolled with LoadWithCast when contiguous,
    `gpu_kernel_impl` when strided), while the class (keyed by the first operand's dtype)
    holds single-dtype points that ran the vectorized one. The point's time stands (the sweep's
    in-training times put these within ~5% of the H200 profile's), its name does not. None
    when the point's own kernel applies."""
    if handler is not _ops.elementwise or len(specs) != 1 or len(near["k"]) != 1 or specs[0].generic:
        return None
    if not _K.casts(specs[0].name) or _K.casts(fam.names[near["k"][0][1]]):
        return None
    return specs[0]


def _list_op_roofline(op, base, handler, ref, allow_tf32) -> float:
    """A cat's (stack's) roofline time on the reference GPU as its family points have it:
    calibration rebuilds a list op from a trace with its input list standing for its outputs
    (calibrate.families.to_opcall; the trace does not record outputs), which the roofline prices
    differently from the real output (7.6 against 13.7 us for cat([empty, keys]) of (16, 8, 1500,
    64) bf16). Costed the same way here, the measured time / roofline ratios apply as measured."""
    lst = next((a for a in op.args if isinstance(a, tuple) and a and isinstance(a[0], TensorArg)), None)
    cal = op if lst is None else dataclasses.replace(op, outputs=lst)
    c, sp = handler(cal, base, ref, allow_tf32)
    return sum(k.duration_ns for k in materialize(c, sp, _R.op_time_ns(c, ref), ref))


def _foreach_launches(op, base, gpu, cost, specs) -> list[Kernel] | None:
    """A foreach op's launches, each timed by the multi_tensor_apply launch model
    (cost/multi_tensor.py: the latency of its largest chunk against its bytes), source
    "launches"; None when the launches do not line up with the op's kernel specs."""
    from phantora_prof.cost.multi_tensor import foreach_launch_times

    lists, depth = _ops.foreach_lists(op, base)
    launch_times = foreach_launch_times(base, lists, depth, gpu)
    if sum(1 for s in specs if _multi_tensor([s])) != len(launch_times):
        return None
    times = iter(launch_times)
    timed = []
    for s in specs:
        if _multi_tensor([s]):
            t = next(times)
        elif "FillFunctor" in s.name:  # a norm's zeroed partial norms (ntensors x chunks, ops.foreach)
            t = _ops.fill_bytes_ns(s.nbytes, gpu)
        else:  # a norm's lpnorm_cleanup: one block per tensor over its few partials
            t = profile_for(gpu).lpnorm_cleanup_ns
        timed.append(dataclasses.replace(s, dur_ns=max(1, int(round(t)))))
    return materialize(cost, timed, 0.0, gpu, "launches")


def _multi_tensor(specs) -> bool:
    return bool(specs) and all(s.kind == _K.KIND_KERNEL and "multi_tensor_apply_kernel" in s.name for s in specs)


def _interpolated(op, base, gpu, allow_tf32, handler, cost, specs, total) -> list[Kernel] | None:
    """Kernels timed from the measured H200 sweep (measured.py), or None when not covered."""
    q = _M.query_for(op, base, allow_tf32)
    if q is None:
        return None
    ref = get_gpu(_M.GPU_KEY)
    if gpu.arch != ref.arch and q[0] in ("gemm", "attention"):
        return None  # other library kernels (cuBLAS/cuDNN pick per architecture): the roofline's own efficiencies
    same = gpu.key == ref.key or gpu is ref
    ref_total = total if same else _R.op_time_ns(_cost_on(handler, op, base, ref, allow_tf32), ref)
    if q[0] == "gemm":
        q = q + (ref_total,)
    t = _M.model().predict(q)
    if t is None or not t > 0:
        return None
    if not same:
        t = _R.carried_time_ns(t, ref_total, total, ref, gpu)
    if q[0] == "memcpy":  # a same-device copy: the measured DtoD curve
        if len(specs) != 1 or specs[0].kind != _K.KIND_MEMCPY:
            return None
        s = specs[0]
        return [Kernel(_K.KIND_MEMCPY, s.name, max(profile_for(gpu).kernel_floor_ns, int(round(t))), bytes=int(s.nbytes),
                       launch_api=_K.API_MEMCPY, source="interpolated")]
    if any(s.kind == _K.KIND_MEMCPY for s in specs):
        return None
    fixed = sum(_R.memset_ns(s.nbytes, gpu) if s.kind == _K.KIND_MEMSET else float(s.dur_ns)
                for s in specs if s.kind == _K.KIND_MEMSET or s.dur_ns > 0)
    weighted = max(t - fixed, float(profile_for(gpu).kernel_floor_ns))
    return materialize(cost, specs, weighted, gpu, "interpolated")


def _table_names(op, base, tbl, specs, gpu):
    """Ops whose functor the generator does not know: the names the table has for the dtypes.

    A single table kernel of the generator's family lends its name (the generator keeps the
    launch config, which depends on the size); a multi-kernel sequence is taken whole.
    """
    types = tuple(_types_of(op))
    in_bytes = sum(t.nbytes for t in _R.all_inputs(op))
    seq = tbl.nearest("aten::" + base, types, in_bytes)
    if not seq or (gpu.arch != tbl.arch and _K.arch_specific(seq)):
        return specs
    if len(seq) == 1:
        if seq[0].kind != _K.KIND_KERNEL or _K.family(seq[0].name) != _K.family(specs[0].name):
            return specs
        return [KernelSpec(s.kind, seq[0].name, s.grid, s.block, seq[0].regs, seq[0].smem, s.nbytes, seq[0].api,
                           s.weight) for s in specs]
    total = sum(max(s.dur_ns, 1) for s in seq if s.kind == _K.KIND_KERNEL) or 1
    out = []
    for s in seq:
        w = max(s.dur_ns, 1) / total if s.kind == _K.KIND_KERNEL else 0.0
        dur = -1 if s.kind == _K.KIND_MEMCPY else 0
        out.append(KernelSpec(s.kind, s.name, s.grid, s.block, s.regs, s.smem, s.nbytes, s.api, w, dur))
    return out


def _types_of(op):
    for a in list(op.args) + list((op.kwargs or {}).values()):
        if isinstance(a, TensorArg):
            yield a.dtype
        elif isinstance(a, tuple) and a and isinstance(a[0], TensorArg):
            yield "list"


def _from_table(op, base, gpu, allow_tf32, tbl, cost) -> list[Kernel] | None:
    kin, kout = _K.table_key(op.args, op.kwargs, op.outputs)
    scalars = tuple(a for a in op.args)
    specs = tbl.lookup("aten::" + base, kin, kout, scalars)
    if specs is None:
        return None
    if gpu.arch != tbl.arch and _K.arch_specific(specs):
        return None
    tot = sum(s.dur_ns for s in specs if s.kind == _K.KIND_KERNEL) or 1
    scale = 1.0 if gpu.key == tbl.gpu else _carried_scale(cost, tot, get_gpu(tbl.gpu), gpu)
    out = []
    for s in specs:
        if s.kind == _K.KIND_MEMSET:
            dur = s.dur_ns
        else:
            dur = s.dur_ns * scale
        fl = cost.flops * s.dur_ns / tot if s.kind == _K.KIND_KERNEL else 0.0
        out.append(Kernel(s.kind, s.name, max(profile_for(gpu).kernel_floor_ns, int(round(dur))), s.grid, s.block, s.regs, s.smem,
                          s.nbytes, s.api, fl, "table"))
    return out


def _cost_on(handler, op, base, ref, allow_tf32):
    """The op's roofline Cost on the GPU `ref` a measurement was made on (the embedding
    backward's handler also reads the kernel table)."""
    if handler is _ops.embedding_dense_backward:
        return handler(op, base, ref, allow_tf32, table("h200"))[0]
    return handler(op, base, ref, allow_tf32)[0]


def _carried_scale(cost, measured_ns: float, ref, gpu) -> float:
    """The factor that carries kernels measured on `ref` (measured_ns in all) to `gpu`, by the
    op's roofline on both (roofline.carried_time_ns)."""
    return _R.carried_time_ns(measured_ns, _R.op_time_ns(cost, ref), _R.op_time_ns(cost, gpu), ref, gpu) / measured_ns


def _from_source(op, gpu, cost, source) -> list[Kernel] | None:
    """Kernels from the user's kernel database, scaled to `gpu` when it was measured on another
    GPU of the same architecture (another architecture: None, the source says so once)."""
    measured = source.kernels(op)
    if measured is None:
        return None
    db_gpu = getattr(getattr(source, "db", None), "gpu", None)
    tot = sum(k.duration_ns for k in measured if k.kind == _K.KIND_KERNEL) or 1
    scale = 1.0
    if db_gpu is not None and db_gpu != gpu.key:
        ref = GPUS.get(db_gpu)
        if ref is None or ref.arch != gpu.arch:
            warn = getattr(source, "warn_other_arch", None)
            if warn is not None:
                warn(db_gpu, gpu.key)
            return None
        scale = _carried_scale(cost, tot, ref, gpu)
    out = []
    for k in measured:
        fl = cost.flops * k.duration_ns / tot if k.kind == _K.KIND_KERNEL else 0.0
        dur = k.duration_ns if k.kind == _K.KIND_MEMSET else k.duration_ns * scale
        out.append(Kernel(k.kind, k.name, max(profile_for(gpu).kernel_floor_ns, int(round(dur))), tuple(k.grid), tuple(k.block),
                          k.registers_per_thread, k.shared_memory, k.bytes, k.launch_api, fl, "measured"))
    return out


def materialize(cost, specs, total_ns: float, gpu, source: str = "roofline") -> list[Kernel]:
    """Kernels of the op: `total_ns` shared among `specs` by their weights (memsets and copies
    timed by their own models, table kernels keep their measured time)."""
    wsum = sum(s.weight for s in specs if s.kind == _K.KIND_KERNEL and s.dur_ns <= 0)
    out = []
    for s in specs:
        if s.kind == _K.KIND_MEMSET:
            dur = _R.memset_ns(s.nbytes, gpu)
            fl = 0.0
        elif s.kind == _K.KIND_MEMCPY:
            dur = _dtod_ns(s.nbytes, gpu)
            fl = 0.0
        elif s.dur_ns > 0:
            dur = float(s.dur_ns)
            fl = 0.0
        else:
            share = s.weight / wsum if wsum > 0 else 1.0
            dur = total_ns * share
            fl = cost.flops * share
        api = s.api if s.kind == _K.KIND_KERNEL else (_K.API_MEMSET if s.kind == _K.KIND_MEMSET else _K.API_MEMCPY)
        out.append(Kernel(s.kind, s.name, max(profile_for(gpu).kernel_floor_ns, int(round(dur))), tuple(s.grid), tuple(s.block),
                          s.regs, s.smem, s.nbytes, api, fl, source))
    return out


def _dtod_ns(nbytes: int, gpu) -> float:
    prof = profile_for(gpu)
    return prof.dtod_fixed_ns + nbytes / (_R.hbm_bw(gpu) * prof.dtod_fraction) * 1e9


def _memcpy(gpu, src: TensorArg | None, dst: TensorArg | None, nbytes: int) -> Kernel:
    name = _K.memcpy_name(src, dst)
    if "HtoD" in name:
        bw = gpu.h2d_pinned_bw if src is not None and src.pinned else gpu.h2d_pageable_bw
        dur = gpu.memcpy_latency_ns * 0.5 + nbytes / bw * 1e9
    elif "DtoH" in name:
        bw = gpu.d2h_pinned_bw if dst is not None and dst.pinned else gpu.d2h_pageable_bw
        dur = gpu.memcpy_latency_ns + nbytes / bw * 1e9
    elif "PtoP" in name:
        dur = gpu.memcpy_latency_ns + nbytes / gpu.p2p_bandwidth * 1e9
    else:
        dur = _dtod_ns(nbytes, gpu)
    return Kernel(_K.KIND_MEMCPY, name, max(profile_for(gpu).kernel_floor_ns, int(round(dur))), bytes=int(nbytes),
                  launch_api=_K.API_MEMCPY, source="bandwidth")


def _memcpy_op(op, base, gpu) -> list[Kernel] | None:
    src, dst = _copy_ends(op, base)
    if src is None and dst is None:
        return None
    if dst is None:
        # _to_copy without a recorded output: the other side of the copy
        dev = op.device if not src.on_gpu else -1
        dst = TensorArg(src.shape, src.stride, src.dtype, dev)
    if src is None:
        src = TensorArg(dst.shape, dst.stride, dst.dtype, -1 if dst.on_gpu else op.device)
    if src.on_gpu and dst.on_gpu and src.device == dst.device:
        return None  # a same-device copy: the handler decides (DtoD memcpy or cast kernel)
    out = []
    if src.on_gpu and not dst.on_gpu and (src.dtype != dst.dtype or not _R.is_contiguous(src)):
        # DtoH with a cast or a strided source: converted on the GPU first, then copied
        spec = _K.copy_kernel(src.dtype, dst.dtype, max(src.numel, 1), _R.is_contiguous(src))
        cost = _R.Cost(_R.COPY, "copy" if "vectorized" in spec.name else "unrolled", 0.0,
                       _R.tensor_bytes(src) + src.numel * dst.itemsize)
        out.extend(materialize(cost, [spec], _R.op_time_ns(cost, gpu), gpu))
    copy = _memcpy(gpu, src, dst, dst.nbytes)
    if op.name == "aten::_to_copy" and src.on_gpu and not dst.on_gpu and not dst.pinned:
        # `.cpu()` / `.to("cpu")` copies into new pageable memory: from 32 MiB up, fresh pages that
        # the driver's staged copy faults in one by one (hostcost.fresh_pages_ns); a copy_ into a
        # host tensor made earlier does not pay it
        fresh = hostcost.fresh_pages_ns(dst.nbytes)
        if fresh:
            copy = dataclasses.replace(copy, duration_ns=copy.duration_ns + fresh)
    out.append(copy)
    return out
