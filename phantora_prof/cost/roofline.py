"""Roofline time per op: FLOPs, bytes moved, op class, efficiencies.

    time = t0 + extra + max(C, M)
    C = flops * mult / (peak(dtype) * eff_compute),  M = bytes / (hbm_bandwidth * eff_mem)

GEMMs: M covers A and B (they stream through the main loop, overlapped with the math);
`extra` is the epilogue (reading C/bias, writing the output), which the H200 references
show is NOT overlapped: the LM head's 8192x768x50304 forward (824 MB output) takes 858 us
while its backward GEMMs with the same FLOPs and small outputs take 680-686 us. `mult`
is the wave tail: 1 + 0.25 * SMs / (128x128 output tiles), so a 768x768 weight gradient
(36 tiles) runs at half the rate of a large GEMM, as measured.
Attention: `extra` is the tail of the causal tile schedule, proportional to s_k * d.

FLOPs follow torch.utils.flop_counter (mm/addmm/bmm/baddbmm: 2*M*N*K; convolution:
2 * batch * prod(weight) * prod(out spatial); SDPA forward: 2 bmm, backward: 5 bmm incl.
the recomputed scores, as torch 2.13's flop_counter), with
one deliberate difference: causal attention counts only the (s+1)/(2s) of score tiles it
computes (flop_counter counts the full square).

Bytes: the sum of input and output tensor sizes, counting a broadcast (stride 0)
dimension once; special cases: gathers (embedding, index_select) read only the rows they
gather; fused optimizers read every list and write back params and states; nll_loss reads
one logit per row.

Efficiencies are per op class (and per op where the reference showed a clear
difference), calibrated on the gpt_small trace and checked on gpt_b32 without retuning;
they and every other fitted or hand-set constant of the kernel model live in the GPU's
profile (cost/data/profiles/<gpu>.json, cost/profiles.py) with the source of each.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from phantora_prof.cost.profiles import Eff, profile_for
from phantora_prof.protocol import TensorArg

CHANNEL_ALIGNMENT = 8  # tensor-core convolutions take channel counts in multiples of 8 (16-bit)


def padded_channels(c: int) -> int:
    """A channel count rounded up to CHANNEL_ALIGNMENT, as cuDNN pads 16-bit operands (ops.convolution;
    families.unaligned_channels_part names the classes that pad)."""
    return -(-c // CHANNEL_ALIGNMENT) * CHANNEL_ALIGNMENT

# op classes (also the calibration report's rows)
GEMM = "gemm"
ATTENTION = "attention"
ELEMENTWISE = "elementwise"
NORM = "norm"
REDUCTION = "reduction"
INDEX = "index"
OPTIMIZER = "optimizer"
COPY = "copy"
MEMSET = "memset"
MEMCPY = "memcpy"
CLASSES = (GEMM, ATTENTION, ELEMENTWISE, NORM, REDUCTION, INDEX, OPTIMIZER, COPY, MEMSET, MEMCPY)


def hbm_bw(gpu) -> float:
    """The HBM bandwidth (bytes/s) the cost model's memory efficiencies apply to: the datasheet
    figure times the share this GPU sustains relative to the reference H200 (its profile's
    `hbm_sustained_ratio`, 1 on the H200)."""
    return gpu.hbm_bandwidth * profile_for(gpu).hbm_sustained_ratio


def eff_for(key: str, gpu) -> Eff:
    """The efficiency of kernel class `key` on `gpu` (its profile: cost/profiles.py)."""
    return profile_for(gpu).efficiency(key)


# ------------------------------------------------------------------ tensor helpers

def tensor_bytes(t: TensorArg) -> int:
    """Bytes a kernel touches for this tensor: broadcast (stride-0) dimensions count once."""
    n = 1
    st = t.stride
    for i, s in enumerate(t.shape):
        if s == 0:
            return 0
        if i < len(st) and st[i] == 0:
            continue
        n *= s
    return n * t.itemsize


def is_contiguous(t: TensorArg) -> bool:
    return contiguous_strides(t.shape, t.stride)


def contiguous_strides(shape: tuple, stride: tuple) -> bool:
    """Whether these strides are a contiguous tensor's (size-1 dims' strides do not matter)."""
    expected = 1
    for s, st in zip(reversed(shape), reversed(stride)):
        if s != 1 and st != expected:
            return False
        expected *= s
    return True


def bn_channels_last_batch(shape, stride) -> bool:
    """A contiguous tensor whose dim 1 has stride 1 (a 2-D (N, C) batch), which ATen's
    batch_norm_use_channels_last_kernels sends to the channels-last batch-norm kernels
    (LeViT's BatchNorm1d over tokens on the H200); the op tree (engine/op_children.py), the
    family classes and SyncBatchNorm's kernels (ops.sync_batch_norm) read a batch norm's
    layout by it."""
    return len(shape) >= 2 and len(stride) == len(shape) and stride[1] == 1 and contiguous_strides(shape, stride)


def dense_order(t: TensorArg) -> tuple[int, ...] | None:
    """The dims of `t` from outermost to innermost if it is dense and non-overlapping in some
    order (contiguous, channels-last, any permutation of contiguous), else None. Size-1 dims
    are left out (their stride does not matter)."""
    dims = [i for i, s in enumerate(t.shape) if s != 1]
    order = sorted(dims, key=lambda i: -t.stride[i])
    expected = 1
    for i in reversed(order):
        if t.stride[i] != expected:
            return None
        expected *= t.shape[i]
    return tuple(order)


def blas_needs_copy(shape: tuple, stride: tuple) -> bool:
    """Whether cuBLAS can take this GEMM operand as it is, by aten's rules
    (cuda/Blas.cpp: prepare_matrix_for_cublas for a 2-D matrix, prepare_batch_matrix_for_cublas
    for the matrices of a batch): dense and non-overlapping, or one unit stride with a leading
    stride of at least the other dim. Anything else (an expanded, stride-0 gradient such as
    `loss.sum().backward()` makes, a matrix sliced from a wider one's columns with both strides
    above 1) is first cloned contiguous inside the GEMM op: one more copy kernel, one more
    transient allocation."""
    if len(shape) < 2 or len(stride) < 2:
        return False
    rows, cols = shape[-2], shape[-1]
    s_rows, s_cols = stride[-2], stride[-1]
    if len(shape) == 2 and dense_order(TensorArg(tuple(shape), tuple(stride), "float32", 0)) is not None:
        return False
    if s_cols == 1 and s_rows >= max(1, cols):
        return False
    if s_rows == 1 and s_cols >= max(1, rows):
        return False
    return True


def one_dense_layout(tensors) -> bool:
    """Whether TensorIterator sees these operands as one contiguous block: all of the same
    shape, each dense in the same dim order (so a channels-last op runs the vectorized kernel
    a contiguous one does; broadcast or mixed layouts take the strided kernel)."""
    tensors = list(tensors)
    if not tensors:
        return True
    shape = tensors[0].shape
    order = dense_order(tensors[0])
    if order is None:
        return False
    for t in tensors[1:]:
        if t.shape != shape or dense_order(t) != order:
            return False
    return True


ROWS_MIN_RUN = 16  # the shortest shared row the real profiles measured (session 51): 16 elements


def shared_unit_inner(tensors) -> bool:
    """Whether operands that are each dense but in different dim orders (a transposed view beside
    a contiguous tensor: RoPE's and per-head norms' ops on `q.view(B, S, H, D).transpose(1, 2)`)
    share their innermost dim, which is then unit-stride in every one of them, and at least
    ROWS_MIN_RUN long: TensorIterator's strided kernel reads each operand in contiguous rows
    (coalesced), not across its layout. Shorter rows were not measured (they stay `mixed`)."""
    inner = None
    for t in tensors:
        order = dense_order(t)
        if not order:
            return False
        if inner is None:
            inner = order[-1]
            if t.shape[inner] < ROWS_MIN_RUN:
                return False
        elif order[-1] != inner:
            return False
    return inner is not None


def iter_tensors(values):
    for a in values:
        if isinstance(a, TensorArg):
            yield a
        elif isinstance(a, tuple):
            for t in a:
                if isinstance(t, TensorArg):
                    yield t


def all_inputs(op):
    yield from iter_tensors(op.args)
    if op.kwargs:
        yield from iter_tensors(op.kwargs.values())


def io_bytes(op) -> int:
    n = 0
    for t in all_inputs(op):
        n += tensor_bytes(t)
    for t in iter_tensors(op.outputs):
        n += tensor_bytes(t)
    return n


# ------------------------------------------------------------------ arguments by name

# The argument names the cost model reads by name; their positions per aten op come from
# data/aten_arg_positions.json (generated from torch's schemas by calibrate/schema_args.py,
# so this package does not import torch).
SCHEMA_ARGS = ("amsgrad", "approximate", "beta", "custom_mask_type", "dim", "dims", "is_causal", "kernel_size",
               "normalized_shape", "num_weights", "output_mask", "running_mean", "sorted", "stride", "train", "training", "transposed")


@lru_cache(maxsize=1)
def _arg_positions() -> dict[str, dict[str, int]]:
    path = Path(__file__).parent / "data" / "aten_arg_positions.json"
    return json.loads(path.read_text())["positions"]


def split_name(name: str) -> tuple[str, str]:
    """("aten", "addmm") for "aten::addmm.out": an op name's namespace and base, without the
    overload (a name without a namespace is aten's)."""
    ns, sep, rest = name.partition("::")
    if not sep:
        ns, rest = "aten", name
    return ns, rest.split(".", 1)[0]


def _arg_index(base: str, argname: str) -> int:
    """The position of `argname` in aten::`base`'s schema (-1: keyword-only or absent)."""
    if argname not in SCHEMA_ARGS:
        raise KeyError(f"{argname!r} is not in roofline.SCHEMA_ARGS: add it and run "
                       "`phantora-prof calibrate schema-args`")
    return _arg_positions()[argname].get(base, -1)


def arg(op, base: str, name: str, default=None):
    """A call's argument by schema name: from kwargs, else from its schema position."""
    kw = op.kwargs
    if kw and name in kw:
        return kw[name]
    i = _arg_index(base, name)
    if 0 <= i < len(op.args):
        return op.args[i]
    return default


def first_tensor(op) -> TensorArg | None:
    for t in all_inputs(op):
        return t
    return None


# ------------------------------------------------------------------ FLOP formulas

def mm_flops(m: int, k: int, n: int, batch: int = 1) -> float:
    return 2.0 * batch * m * n * k


def conv_flops(x_shape, w_shape, out_shape, transposed: bool) -> float:
    """torch.utils.flop_counter.conv_flop_count."""
    batch = x_shape[0]
    conv_shape = (x_shape if transposed else out_shape)[2:]
    c_out, c_in, *filt = w_shape
    flop = batch
    for d in conv_shape:
        flop *= d
    flop *= c_out * c_in
    for d in filt:
        flop *= d
    return 2.0 * flop


def sdpa_flops(q_shape, k_shape, v_shape, causal: bool, backward: bool) -> float:
    """torch.utils.flop_counter's sdpa formulas (fwd: 2 bmm, bwd: 5 bmm), causal-trimmed."""
    *bh, s_q, d_q = q_shape
    s_k = k_shape[-2]
    d_v = v_shape[-1]
    b = 1
    for x in bh:
        b *= x
    f = 2.0 * b * s_q * s_k * d_q + 2.0 * b * s_q * s_k * d_v
    if backward:  # recompute scores, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q
        f = 2.0 * b * s_q * s_k * (3 * d_q + 2 * d_v)
    if causal:
        f *= causal_fraction(s_q, s_k)
    return f


def causal_fraction(s_q: int, s_k: int) -> float:
    if s_q <= 0 or s_k <= 0:
        return 1.0
    if s_q == s_k:
        return (s_q + 1) / (2.0 * s_q)
    # bottom-right aligned mask for s_q < s_k; top-left for s_q > s_k (approximate)
    full = s_q * s_k
    tri = min(s_q, s_k) * (min(s_q, s_k) + 1) / 2.0
    rect = max(0, s_k - s_q) * s_q if s_q < s_k else 0
    return (tri + rect) / full


# ------------------------------------------------------------------ time

@dataclass(slots=True)
class Cost:
    cls: str  # op class for reports
    eff: str  # efficiency key of the GPU profile
    flops: float = 0.0
    nbytes: float = 0.0
    peak: float = 0.0  # FLOP/s of the math the op uses (0: memory only)
    extra_ns: float = 0.0  # additional fixed time (attention tails, serial kernels, GEMM epilogues)
    compute_mult: float = 1.0  # >1 when the op cannot fill the GPU (GEMM wave tail)
    mem_bw: float = 0.0  # bytes/s cap below eff.mem * HBM (parallelism-limited kernels); 0 = none
    notes: dict = field(default_factory=dict)


def op_time_ns(cost: Cost, gpu) -> float:
    e = eff_for(cost.eff, gpu)
    c = cost.flops * cost.compute_mult / (cost.peak * e.compute) * 1e9 if cost.peak > 0 and cost.flops > 0 else 0.0
    bw = hbm_bw(gpu) * e.mem
    if cost.mem_bw > 0:
        bw = min(bw, cost.mem_bw)
    m = cost.nbytes / bw * 1e9 if cost.nbytes > 0 else 0.0
    return e.t0_ns + cost.extra_ns + max(c, m)


def carried_time_ns(t_ref: float, w_ref: float, w_gpu: float, ref, gpu) -> float:
    """A time measured on GPU `ref` as it would be on `gpu` (the same architecture's kernels),
    given the op's roofline time on each (w_ref, w_gpu: `op_time_ns`).

    The roofline ratio w_gpu / w_ref applies to the share of the measured time the roofline
    explains, u = w_ref / t_ref (at most 1): a kernel near its roofline is bound by the resource
    the roofline names (HBM bandwidth, tensor-core peak) and moves with it. The rest of the
    time, that of a kernel running far below its roofline (ATen's depthwise convolution
    backward at ~5% of HBM bandwidth, latency-bound launches, atomics), is bound by what its
    SMs do and moves with their throughput (count x clock), which an H100 and an H200 share.
    Before session 32 the whole time moved with the roofline ratio: on the H100 (HBM 3.35
    against 4.8 TB/s) such kernels came out up to 1.43x slower than measured there
    (tools/holdout/real_h200/session32/README.md)."""
    if not (t_ref > 0 and w_ref > 0):
        return t_ref * w_gpu / max(w_ref, 1.0)
    u = min(1.0, w_ref / t_ref)
    sm_ratio = (ref.num_sms * ref.sm_clock_mhz) / (gpu.num_sms * gpu.sm_clock_mhz)
    return t_ref * (u * w_gpu / w_ref + (1.0 - u) * sm_ratio)


def memset_ns(nbytes: int, gpu) -> float:
    prof = profile_for(gpu)
    return prof.memset_fixed_ns + nbytes / (hbm_bw(gpu) * prof.efficiency("memset").mem) * 1e9
