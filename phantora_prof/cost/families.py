"""Kernel times from the in-training family sweep: measured curves per op and op class.

`python -m phantora_prof.measure.sweep_families` ran small forward + backward programs per kernel family on an
H200 (convolution blocks over kernel sizes, strides, groups, layouts and dtypes; pooling;
activations on contiguous, channels-last and strided tensors; permutes, RoPE, cat,
repeat_interleave; attention per backend with dropout, GQA, masks; norms; losses; embedding;
foreach / fused optimizers; cuDNN RNNs) the way training runs them (kernels back to back, a
warm L2) and profiled them; `phantora-prof calibrate families` (calibrate/families.py)
turned every dispatch-level op of that trace into a point: the op's class key (below), its
roofline time on the H200 `w` (roofline.py: what the op reads, writes and computes against
the GPU's peaks), the measured time `t` and the kernels it launched. The data is
`data/h200_families.json.gz`.

A query op is answered from the points of the same op name and class key: the ratio t / w
is interpolated (Gaussian kernel regression) over log w and the log of each dimension of the
op's first tensor, with bandwidths `BANDWIDTH` and `DIM_BANDWIDTH` in natural-log units, so a
point of the same shape dominates and neighbours in size and aspect fill in; outside the
measured range the ratio of the nearest points holds (time scales with the roofline); below
the smallest measured size, a convolution's kernels that do not fill the GPU keep their time
(`FamilyModel.small_grid_floor`: an implicit-GEMM block computes a fixed tile, so cuDNN's
per-group kernels of 8 blocks take the same time for fewer of them). The
kernels (names, launch configs) are those of the nearest point, their durations scaled to the
interpolated total. Ops or classes the sweep did not cover return None and the next source
answers (the isolated-op sweep, then the roofline).

The class key is what changes the kernel a library picks or the access pattern, beyond
size: dtype and memory layout of the first tensor (contiguous, channels-last, strided), and
per family the kernel size / stride / groups of a convolution, the pooling window, the
attention variant (causal, dropout, mask, grouped-query, head dim). It is computed the same
way at calibration and at run time (`class_key`), from the captured call alone.

Approximate: kernel launch configs are the nearest point's, not recomputed for the query's
shape (cuDNN's per-group loops launch one round per group of the query, `regroup`, their time
interpolated all the same); a class with one point scales by the roofline from it; measured on one H200 (torch 2.11, cuDNN 9.19), other
GPUs carry its times as the other sources do (roofline.carried_time_ns).
A GPU with a table of its own (`data_path`: the H100's holds what was swept there) answers from it
first, its times as measured; a class only another GPU measured is taken from that GPU, carried
the same way (`measured_gpus`).
"""
from __future__ import annotations

import gzip
import json
import math
from functools import lru_cache
from pathlib import Path

from phantora_prof.cost.roofline import CHANNEL_ALIGNMENT, split_name
from phantora_prof.cost.roofline import arg as schema_arg
from phantora_prof.protocol import TensorArg

DATA = Path(__file__).parent / "data" / "h200_families.json.gz"
SCHEMA = "phantora-families/1"
GPU_KEY = "h200"
BANDWIDTH = 0.35  # natural-log units of roofline time (a factor of ~1.4)
DIM_BANDWIDTH = 0.5  # natural-log units of each dimension of the first tensor (a factor of ~1.6)
OUTER_COLUMNS_BANDWIDTH = 0.1  # a column sum's column count (see _dim_bandwidths; ~10%)
UPSAMPLE_SCALE_BANDWIDTH = 0.15  # an upsampling's scale factor (see shape_features; x2 / x4 apart)

CONV_OPS = frozenset(("convolution", "convolution_backward", "cudnn_convolution", "_convolution"))
ATTN_OPS = frozenset((
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
))
POOL_OPS = frozenset(("max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
                      "avg_pool2d_backward"))


def _first_tensor(op) -> TensorArg | None:
    """The op's first tensor argument; in a tensor list, the first non-empty one (`cat` skips
    empty tensors, and HF's key/value caches start as one: `cat([empty, keys])` is keyed by the
    keys' dtype, layout and shape, not by an empty placeholder's)."""
    for a in op.args:
        if isinstance(a, TensorArg):
            return a
        if isinstance(a, tuple) and a and isinstance(a[0], TensorArg):
            return next((t for t in a if isinstance(t, TensorArg) and t.numel), a[0])
    return None


def layout(t: TensorArg | None) -> str:
    """c: contiguous, cl: channels-last (4-D), cl3d: channels-last-3d (5-D), s: anything else
    (strided, broadcast)."""
    if t is None or not t.shape:
        return "c"
    shape, stride = t.shape, t.stride
    expect = 1
    contiguous = True
    for size, st in zip(reversed(shape), reversed(stride)):
        if size != 1 and st != expect:
            contiguous = False
            break
        expect *= size
    if contiguous:
        return "c"
    if len(shape) == 4:
        n, c, h, w = shape
        cl = (1, w * c, c)  # strides of C, H, W in channels-last
        if all(s == 1 or st == e for s, st, e in zip((c, h, w), stride[1:], cl)):
            return "cl"
    if len(shape) == 5:
        n, c, d, h, w = shape
        cl = (1, h * w * c, w * c, c)  # strides of C, D, H, W in channels-last-3d
        if all(s == 1 or st == e for s, st, e in zip((c, d, h, w), stride[1:], cl)):
            return "cl3d"
    return "s"


def _arg(op, i, default=None):
    return op.args[i] if len(op.args) > i else default


def _conv_args(op, base: str) -> tuple:
    """(input, weight, stride, groups, output mask or None) of a convolution or its backward."""
    if base == "convolution_backward":
        return _arg(op, 1), _arg(op, 2), _arg(op, 4), _arg(op, 9), _arg(op, 10)
    return _arg(op, 0), _arg(op, 1), _arg(op, 3), _arg(op, 8), None


def _dilation_arg(base: str) -> int | None:
    """Where the convolution op's schema has its dilation."""
    if base in ("convolution", "_convolution"):
        return 5
    if base == "convolution_backward":
        return 6
    return 4 if base == "cudnn_convolution" else None


def _dilated(op, base: str) -> bool:
    """Whether a convolution is dilated (atrous): cuDNN runs other kernels for those (an
    "indexed" weight gradient; sweep conv_dilated, session 33), so they are a class of their own."""
    i = _dilation_arg(base)
    d = _arg(op, i) if i is not None else None
    return isinstance(d, (tuple, list)) and any(isinstance(v, int) and v > 1 for v in d)


def _spatial_dims(x: TensorArg, w: TensorArg) -> int:
    """1, 2 or 3: the convolution's spatial dimensions. cuDNN runs a 1-D convolution as a 2-D
    one of height 1 (`cudnn_convolution` gets (N, C, 1, L) and a (C_out, C_in/g, 1, k) weight),
    which counts as 1-D here like the (N, C, L) call around it."""
    nd = len(x.shape) - 2
    if nd == 2 and len(w.shape) == 4 and x.shape[2] == 1 and w.shape[2] == 1:
        return 1
    return nd


def _group_width(op, base: str) -> int | None:
    """Input channels per group of a grouped (not depthwise, not dense) convolution."""
    x, _, _, groups, _ = _conv_args(op, base)
    if not isinstance(x, TensorArg) or len(x.shape) < 2 or not isinstance(groups, int):
        return None
    cin = x.shape[1]
    return cin // groups if 1 < groups < cin else None




def unaligned_channels_part(cin: int, cout: int) -> str:
    """"pad4", "pad2" or "pad1" for a dense convolution with a channel count of 8 or more that is not
    a multiple of 8 (the largest power of two dividing every such count), "" otherwise.

    cuDNN pads such channels-last operands to the next multiple of 8 (`nhwcAddPaddingKernel`, one
    per padded operand; bf16 and TF32 alike) and runs CUTLASS s16816 / sm80 kernels rather than
    Hopper's implicit GEMMs (NCHW bf16 ones run Winograd kernels instead); multiples of 4 also
    convert layouts (`convertTensor_kernel`):
    timm's HRNet (18 / 36 channels) on the H100, session 37; sweep conv_unaligned. Fewer than 8
    channels (an RGB stem, a mask head) are left to the classes the stems were measured in. A
    class no table measured falls back to the aligned class of the same key (stand_in_keys)."""
    counts = [c for c in (cin, cout) if c >= CHANNEL_ALIGNMENT and c % CHANNEL_ALIGNMENT]
    if not counts:
        return ""
    align = min(c & -c for c in counts)  # the lowest set bit: 4 for 36, 2 for 18, 1 for 45
    return f"pad{align}"


def stand_in_keys(base: str, key: str) -> tuple[str, ...]:
    """Classes that answer for `key` where no table measured it, because a CUDA build runs the
    same kernels for them: a convolution over channel counts that are not multiples of 8 takes
    its aligned class (what every convolution took before the padded classes were measured)."""
    if base in CONV_OPS:
        aligned = without_unaligned_part(key)
        if aligned is not None:
            return (aligned,)
        return _swept_multiplier_keys(key)
    if base in RNN_OPS and key.endswith("|float16"):
        # an fp16 cuDNN RNN (autocast's inner call, runtime/dispatch/autocast_rnn.py): the `rnn`
        # sweep measured those under autocast, where the calibration keyed the wrapper's call (its
        # fp32 input, its weights labelled by the autocast dtype) and the backward by its fp16
        # gradient; autocast_rnn_inner drops the wrapper's own kernels from the forward's points
        x, lay, cell, _ = key.split("|")
        return tuple(dict.fromkeys(f"{d}|{lay}|{cell}|bfloat16" for d in (x, "float32")))
    if key.endswith("|mixed"):  # operands dense in different orders: the strided kernel's class
        return (key[: -len("mixed")] + "strided",)
    return ()


_AUTOCAST_RNN_WRAPPER = ("FillFunctor<c10::Half>", "float16_copy_kernel")


def autocast_rnn_inner(names: list[str], point: list) -> list:
    """A forward `rnn` point measured under autocast, less the kernels of autocast's wrapper that
    come first in it (the flat weight buffer's fill, the weights' and inputs' casts to fp16): the
    simulation captures those as ops of their own, and the point stands for the inner fp16 call."""
    i = 0
    while i < len(point) and any(m in names[point[i][1]] for m in _AUTOCAST_RNN_WRAPPER):
        i += 1
    return point[i:] or point


def _dw_multiplier(part: str) -> int | None:
    """The channel multiplier a class key's groups part names: 1 for "dw", m for "dwm{m}"
    (_conv_key), None for any other part."""
    if part == "dw":
        return 1
    return int(part[3:]) if part.startswith("dwm") and part[3:].isdigit() else None


def _swept_multiplier_keys(key: str) -> tuple[str, ...]:
    """A depthwise convolution of a channel multiplier no sweep measured ("dwm3", "dwm8") takes
    the measured multipliers' classes of the same kernel, stride, dtype and layout, the nearest
    multiplier first: the same cuDNN paths (a grouped direct kernel, a loop over the groups),
    whose time follows the output's size, which the roofline carries. Approximate: the
    conv_dw_multiplier sweep measured multipliers 2 and 4 only."""
    parts = key.split("|")
    for i, part in enumerate(parts):
        m = _dw_multiplier(part)
        if m is not None and m > 1:
            near = sorted((x for x in _measured_multipliers() if x != m), key=lambda x: (abs(x - m), x))
            return tuple("|".join(parts[:i] + [f"dwm{x}"] + parts[i + 1:]) for x in near)
    return ()


@lru_cache(maxsize=None)
def _measured_multipliers() -> frozenset[int]:
    """The depthwise channel multipliers some GPU's table has convolution points of."""
    found = set()
    for gpu in measured_gpus():
        fam = model(gpu)
        for op, key in (fam.points if fam is not None else ()):
            if op in CONV_OPS:
                found.update(m for m in map(_dw_multiplier, key.split("|")) if m is not None and m > 1)
    return frozenset(found)


def conv_groups(op, base: str) -> int | None:
    """A grouped convolution's group count (None for a dense one or another op)."""
    if base not in CONV_OPS:
        return None
    _, _, _, groups, _ = _conv_args(op, base)
    return groups if isinstance(groups, int) and groups > 1 else None


def point_groups(base: str, key: str, point: dict) -> int | None:
    """The group count of a grouped convolution's measured point, from its recorded shape (the
    first tensor: the input of a forward, the output gradient of a backward) and its class key:
    depthwise ("dw", "dwmN": C_in groups; a backward's first tensor has m x C_in channels) or
    grouped ("g", "gn": the shape ends with the group width, shape_features)."""
    if base not in CONV_OPS:
        return None
    parts = key.split("|")
    shape = point.get("s") or []
    if len(shape) < 2:
        return None
    for part in parts:
        m = _dw_multiplier(part)
        if m is not None:
            return shape[1] // m if base == "convolution_backward" else shape[1]
        if part in ("g", "gn") and len(shape) >= 3 and shape[-1] > 0:
            return shape[1] // shape[-1]
    return None


def regroup(point: list, groups_at: int, groups: int) -> list:
    """A point's kernels with cuDNN's per-group loop run for `groups` groups instead of the
    point's `groups_at`. The loop's kernels are those whose names occur a multiple of
    `groups_at` times (a strided depthwise convolution with a channel multiplier: one forward
    kernel per group; a grouped 1 x 1 backward: four slices, a memset, a dgrad, a wgrad and a
    reduction per group, interleaved over cuDNN's streams); group g's share of them is the g-th
    run of each name's occurrences, in the point's order. Those rounds are cycled through for
    `groups` groups (their durations as measured); the kernels before the loop stay before it,
    the others after it. The point unchanged where the counts agree, the point has fewer than
    three groups (a name that occurs twice is no loop) or the loop is not most of its kernels.
    The caller rescales durations to the interpolated time."""
    if groups_at < 3 or groups <= 1 or groups == groups_at:
        return point
    counts: dict[int, int] = {}
    for k in point:
        counts[k[1]] = counts.get(k[1], 0) + 1
    looped = {n for n, c in counts.items() if c % groups_at == 0}
    at = [i for i, k in enumerate(point) if k[1] in looped]
    if 2 * len(at) < len(point):
        return point
    first, last = at[0], at[-1]
    occurrences: dict[int, list[int]] = {}
    for i in at:
        occurrences.setdefault(point[i][1], []).append(i)
    rounds = []
    for g in range(groups_at):
        members = sorted(i for ids in occurrences.values()
                         for i in ids[g * len(ids) // groups_at:(g + 1) * len(ids) // groups_at])
        rounds.append([point[i] for i in members])
    between = [point[i] for i in range(first, last + 1) if point[i][1] not in looped]
    return point[:first] + [k for g in range(groups) for k in rounds[g % groups_at]] + between + point[last + 1:]


def without_unaligned_part(key: str) -> str | None:
    """The class key without its pad part (unaligned_channels_part), or None when it has none."""
    parts = key.split("|")
    kept = [p for p in parts if not (p.startswith("pad") and p[3:].isdigit())]
    return "|".join(kept) if len(kept) != len(parts) else None


def _conv_key(op, base: str) -> list[str]:
    x, w, stride, groups, mask = _conv_args(op, base)
    if not isinstance(w, TensorArg) or not isinstance(x, TensorArg):
        return []
    nd = _spatial_dims(x, w)
    k = w.shape[-1] if w.shape else 1
    strides = tuple(stride) if isinstance(stride, (tuple, list)) else (stride,)
    s = strides[-1] if nd == 1 else strides[0] if strides else 1
    if nd == 3 and len(w.shape) == 5:  # temporal x spatial kernel and stride: (3, 7, 7) / (1, 2, 2) -> 3x7, 1x2
        k, s = f"{w.shape[2]}x{k}", f"{strides[0]}x{strides[-1]}"
    elif nd == 2 and len(w.shape) == 4 and w.shape[2] != w.shape[3]:
        # a factorised 1 x 7 / 7 x 1 kernel (Inception): its own class, not the k x k one of its width
        # (sweep conv_maps, session 38)
        k = f"{w.shape[2]}x{w.shape[3]}"
    cin = x.shape[1] if len(x.shape) > 1 else 1
    g = groups if isinstance(groups, int) else 1
    # grouped: "g" for a power-of-two group width, "gn" for any other (24, 40, 56, ...): cuDNN
    # wraps most of those in tensor-transform kernels that pad the groups (sweep conv_grouped2,
    # measured 2026-12-02: 0.1-3.7 ms of transforms per block in channels-last)
    gw = cin // g if g > 0 else cin
    gk = "dw" if g > 1 and g == cin else ("1" if g <= 1 else ("g" if gw & (gw - 1) == 0 else "gn"))
    if gk == "dw" and len(w.shape) > 1 and w.shape[0] != cin:
        # a channel multiplier (C_out = m x C_in, "dwm2"): cuDNN runs no depthwise kernel for most of
        # these but a grouped direct one, or one launch per group (sweep conv_dw_multiplier, session 53)
        gk = f"dwm{w.shape[0] // cin}"
    # ATen hands cuDNN a 1-D convolution's input contiguous (a copy before it when it is not:
    # a transposed (N, L, C) sequence, as speech models pass it)
    parts = [f"k{k}", f"s{s}", gk, "c" if nd == 1 else layout(x)]
    if nd != 2:  # 1-D and 3-D convolutions take other algorithms than 2-D ones: their own points
        parts.insert(0, f"{nd}d")
    if k != 1 and _dilated(op, base):
        parts.append("dil")
    if g <= 1 and len(w.shape) > 1:
        pad = unaligned_channels_part(cin, w.shape[0] if w.shape[1] * g == cin else w.shape[1] * g)
        if pad:
            parts.append(pad)
    if mask is not None:
        parts.append("m" + "".join("1" if b else "0" for b in mask))
    return parts


# positions in each fused attention op's schema: (query, key, attn_bias, dropout_p, is_causal)
_ATTN_ARGS = {
    "_scaled_dot_product_cudnn_attention": (0, 1, 3, 5, 6),
    "_scaled_dot_product_cudnn_attention_backward": (1, 2, 8, 13, 14),
    "_scaled_dot_product_flash_attention": (0, 1, None, 3, 4),
    "_scaled_dot_product_flash_attention_backward": (1, 2, None, 10, 11),
    "_scaled_dot_product_efficient_attention": (0, 1, 3, 5, 6),
    "_scaled_dot_product_efficient_attention_backward": (1, 2, 4, 9, 11),
}


def attention_dropout_position(base: str) -> int | None:
    """The positional index of a fused attention op's dropout_p (None for other ops)."""
    entry = _ATTN_ARGS.get(base)
    return entry[3] if entry else None


def _attn_key(op, base: str) -> list[str]:
    qi, ki, bi, di, ci = _ATTN_ARGS[base]
    q, k = _arg(op, qi), _arg(op, ki)
    if not isinstance(q, TensorArg) or not isinstance(k, TensorArg):
        return []
    kw = op.kwargs or {}
    gqa = len(q.shape) == 4 and len(k.shape) == 4 and q.shape[1] != k.shape[1]
    dropout = _arg(op, di, kw.get("dropout_p", 0.0))
    causal = _arg(op, ci, kw.get("is_causal", False))
    bias = _arg(op, bi) if bi is not None else None
    return [f"d{q.shape[-1]}", "causal" if causal is True else "full",
            "drop" if isinstance(dropout, (int, float)) and dropout > 0 else "nodrop", _mask_kind(bias),
            "gqa" if gqa else "mha"]


def _mask_kind(bias) -> str:
    """nomask; mask: one broadcast over heads and query rows (padding), cheap to read; bias: a
    per-head score matrix (T5's learned relative positions, ALiBi), which the kernels read in
    full and, when it is learned, write its gradient of the same size."""
    if not isinstance(bias, TensorArg) or bias.numel == 0:
        return "nomask"
    s = bias.shape
    per_head = len(s) >= 3 and s[-3] > 1 and s[-2] > 1 and bias.stride[-3] != 0 and bias.stride[-2] != 0
    return "bias" if per_head else "mask"


def class_key(op, base: str) -> str:
    """The op's class within its name (see the module docstring); '' parts are omitted."""
    t = _first_tensor(op)
    parts = [t.dtype if t is not None else "-"]
    if base in CTC_OPS:
        # the recursions read the log-probabilities element by element whatever their layout
        # (HF passes them transposed from (N, T, C)); the features carry the sizes
        return "|".join(parts + ["ctc"])
    if base in CONV_OPS:
        parts += _conv_key(op, base)
    elif base in ATTN_OPS:
        parts += _attn_key(op, base)
    elif base in POOL_OPS:
        # (grad_output, self, kernel_size, stride, ...) for the backward ops, (self, kernel_size,
        # stride, ...) forward; an empty stride is the kernel size
        at = 2 if base.endswith("_backward") else 1
        ks, st = _arg(op, at), _arg(op, at + 1)
        k = ks[0] if isinstance(ks, (tuple, list)) and ks else ks
        s = st[0] if isinstance(st, (tuple, list)) and st else (st if isinstance(st, int) else k)
        parts += [f"k{k}s{s}", layout(t)]
    elif base in RNN_OPS:
        # the weights' dtype too: under autocast the input stays fp32 and cuDNN runs the cell
        # in half precision on half weights (2x faster than the fp32 run of the same call)
        mode = _arg(op, 6 if base == "_cudnn_rnn" else 10)
        ws = _arg(op, 1)
        wdt = ws[0].dtype if isinstance(ws, tuple) and ws and isinstance(ws[0], TensorArg) else "-"
        parts += [layout(t), {0: "rnn_relu", 1: "rnn_tanh", 2: "lstm", 3: "gru"}.get(mode, "rnn"), wdt]
    elif base == "cat" and _has_empty_input(op):
        # onto an empty tensor (HF's key/value caches on their first update): ATen runs its
        # non-vectorized batched copy, at one rate per element whatever the dtype or the inputs'
        # layout (sweep cat_cache, H200: 77 us for (16, 8, 1500, 64) in bf16 and fp32, against
        # 25 / 50 us for a vectorized dense cat)
        parts.append("empty")
    elif base in _INPUT_LAYOUT_OPS:
        lay = layout(t)
        from phantora_prof.cost.roofline import bn_channels_last_batch

        if base in BN_OPS and lay == "c" and t is not None and bn_channels_last_batch(t.shape, t.stride):
            lay = "cl"
        parts.append(lay)
    elif _elementwise(base):
        parts.append(_operand_layout(op))
    else:
        lay = _first_layout(t)
        if base in _REDUCTIONS:
            kind = reduction_kind(op, t)
            if lay == "perm" and _logical_kind_agrees(op, t, kind):
                lay = "dense"
            parts += [lay, kind]
        else:
            if base in _COPIES:
                lay = _copy_layout(op, base, lay)
            parts.append(lay)
    return "|".join(str(p) for p in parts)


_COPIES = frozenset(("clone", "_to_copy", "copy_"))


def _copy_layout(op, base: str, lay: str) -> str:
    """A copy's class by how it moves the data: `transpose` when source and destination are
    dense in orders whose innermost dims differ (NCHW <-> channels-last, a transposed sequence
    made contiguous: no swept class; ops.copy_op prices it with the `transpose` efficiency),
    `perm` when the orders differ but the innermost run is kept (a head permute: the swept
    `perm` points), else the first tensor's layout. A copy_'s first tensor is its destination,
    which alone made a permuted source's copy into a contiguous tensor a dense one (priced from
    the dense copies' Memcpy DtoD points: timm ConvNeXt's NHWC -> NCHW copy of 64x7x7x768 bf16
    at 5.9 us against 13.8 on the H200)."""
    from phantora_prof.cost.ops import transposing_copy
    from phantora_prof.cost.roofline import dense_order

    if base == "copy_":
        dst, src = (op.args[0] if op.args else None), (op.args[1] if len(op.args) > 1 else None)
    else:
        src = op.args[0] if op.args else None
        dst = op.outputs[0] if op.outputs else None
    if not isinstance(src, TensorArg) or not isinstance(dst, TensorArg) or src.shape != dst.shape:
        return lay
    if transposing_copy(src, dst):
        return "transpose"
    src_lay = _first_layout(src)
    if src_lay in ("bcast", "strided") and lay not in ("bcast", "strided"):
        # an expanded or strided source into a dense destination (baddbmm's `result.copy_(self)`
        # of an expanded bias) runs TensorIterator's elementwise kernel, never the DtoD memcpy
        # the dense class's points are
        return src_lay
    a, b = dense_order(src), dense_order(dst)
    if a is not None and b is not None and a != b:
        return "perm"
    return lay


def _logical_kind_agrees(op, t: TensorArg | None, kind: str) -> bool:
    """A reduction over a tensor dense in another dim order whose reduced dims are the innermost
    (or the outermost) both logically and in memory: TensorIterator permutes and coalesces the
    dims, so it runs the same reduction as on the contiguous tensor of the same physical shape
    (a transposed view's per-head RMSNorm weight gradient, [B, S, H, D] summed over B, S, H,
    is a [B*S*H, D] column sum). Such a call belongs to the contiguous class: `ops.reduction`
    prices it as that one (its roofline time follows the logical dims, which agree), while the
    `perm` class holds channels-last reductions, logically inner but outer in memory, whose
    points were fitted with the other roofline (a per-head norm's gradient looked up there came
    out 4.5x the H200's time: 622 against 138 us for [4, 2048, 16, 128] in float32)."""
    red = reduced_dims(op, t)
    if red is None or t is None or kind not in ("inner", "outer", "outer_u"):
        return False
    logical_inner = (len(t.shape) - 1) in red
    return logical_inner == (kind == "inner")


# ops whose kernel choice follows the input's memory format (cuDNN / native NHWC kernels)
BN_OPS = frozenset(("native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
                    "_batch_norm_with_update"))


_INPUT_LAYOUT_OPS = frozenset(("native_batch_norm", "native_batch_norm_backward", "cudnn_batch_norm",
                               "cudnn_batch_norm_backward", "_native_batch_norm_legit", "_adaptive_avg_pool2d",
                               "_adaptive_avg_pool2d_backward", "mean", "native_group_norm",
                               "native_group_norm_backward",
                               # NCHW and channels-last upsampling run different kernels (NCHW's loops
                               # over N x C per output pixel: 2.5-35x slower over wide, small maps;
                               # sweep `upsample`, session 29)
                               "upsample_bilinear2d", "upsample_bilinear2d_backward", "upsample_nearest2d",
                               "upsample_nearest2d_backward"))


_REDUCTIONS = frozenset(("sum", "mean", "amax", "amin", "max", "min", "prod", "norm", "linalg_vector_norm", "var",
                         "var_mean", "std", "std_mean", "argmax", "argmin", "any", "all", "logsumexp"))


def reduced_dims(op, t: TensorArg | None) -> list[int] | None:
    """The dims a reduction reduces (normalised, size-1 dims left out), or None for all."""
    if t is None:
        return None
    # by schema position: `linalg_vector_norm(self, ord, dim, ...)` and `norm(self, p, dim, ...)`
    # take their dims third (F.normalize's norm over a head dim read as a reduction to one value
    # before session 46, when the second argument was read for every reduction)
    dims = schema_arg(op, split_name(op.name)[1], "dim")
    if isinstance(dims, int):
        dims = (dims,)
    if not isinstance(dims, (tuple, list)) or not dims or not all(isinstance(d, int) for d in dims):
        return None
    rank = max(len(t.shape), 1)
    return sorted({d % rank for d in dims if t.shape and t.shape[d % rank] != 1})


def reduction_kind(op, t: TensorArg | None) -> str:
    """How the reduction lies in memory, which decides TensorIterator's reduction strategy.

    all: to one value; inner: the reduced dims are the innermost in memory (each output reads
    a contiguous run); outer: the kept dims are innermost (outputs side by side, each reading
    a strided column: a channels-last bias gradient, a linear's bias gradient); mixed: other.
    Physical, not logical: a channels-last map reduced over N, H, W is an outer reduction."""
    from phantora_prof.cost.roofline import dense_order

    outs = [o for o in op.outputs if isinstance(o, TensorArg)]
    if t is None or not outs or outs[0].numel <= 1:
        return "all"
    red = reduced_dims(op, t)
    if red is None:
        return "all"
    order = dense_order(t)
    if order is None:  # not dense: the logical order stands in for the memory order
        order = tuple(i for i, s in enumerate(t.shape) if s != 1)
    order = [d for d in order if d in red or t.shape[d] != 1]
    k = len(red)
    if k == 0:
        return "all"
    if set(order[-k:]) == set(red):
        return "inner"
    if set(order[:k]) == set(red):
        # TensorIterator vectorizes an outer reduction 4 outputs per thread only when the
        # innermost (kept) size divides by 4; then a skinny one runs up to 4x slower than
        # its unvectorized neighbour (sweep reductions_cols: [49152, 196] bf16 52 us, [49152,
        # 197] 12 us), so the two are separate classes
        return "outer" if t.shape[order[-1]] % 4 == 0 else "outer_u"
    return "mixed"


def _has_empty_input(op) -> bool:
    lists = [a for a in op.args if isinstance(a, tuple) and a and isinstance(a[0], TensorArg)]
    return bool(lists) and any(isinstance(t, TensorArg) and t.numel == 0 for t in lists[0])


def _elementwise(base: str) -> bool:
    from phantora_prof.cost import ops

    return ops.handler_for(base) is ops.elementwise


def _first_layout(t: TensorArg | None) -> str:
    """Ops with operands of different shapes (norms and their statistics, losses, copies): the
    layout of the main (first) tensor: dense in some dim order, bcast (a stride of 0), strided."""
    from phantora_prof.cost.roofline import dense_order

    if t is None:
        return "dense"
    if any(st == 0 and sz > 1 for sz, st in zip(t.shape, t.stride)):
        return "bcast"
    order = dense_order(t)
    if order is None:
        return "strided"
    return "dense" if list(order) == sorted(order) else "perm"  # contiguous, or dense in another order


def _operand_layout(op) -> str:
    """How TensorIterator sees the operands: dense (one dense layout, any dim order),
    bcast (an operand broadcast: stride 0 or fewer elements), mixed (each dense, in different
    dim orders), strided (anything else)."""
    from phantora_prof.cost.roofline import dense_order, iter_tensors, one_dense_layout, shared_unit_inner

    lists = [a for a in op.args if isinstance(a, tuple) and a and isinstance(a[0], TensorArg)]
    if lists:  # foreach ops, cat, stack: many tensors, each its own; strided elements read slowly
        return "list" if all(dense_order(t) is not None for t in lists[0]) else "list-strided"
    tensors = [t for t in iter_tensors(op.args) if t.numel > 1]
    outs = [t for t in iter_tensors(op.outputs) if t.numel > 1]
    if not tensors:
        return "dense"
    numel = max(t.numel for t in tensors)
    if any(t.numel != numel or 0 in t.stride for t in tensors):
        return "bcast"
    if all(t.numel == numel for t in outs):
        if one_dense_layout(tensors + outs):
            return "dense"
        # each operand dense, in different dim orders (an NCHW map plus a channels-last one,
        # a sequence plus a transposed one): one of them is read across its layout; or, where
        # they share a unit-stride innermost dim (a transposed view of heads beside a contiguous
        # tensor), each is read in rows ("rows": no sweep measured it, the roofline's
        # strided_rows class prices it, cost/ops.py elementwise)
        if not all(dense_order(t) is not None for t in tensors + outs):
            return "strided"
        return "rows" if shared_unit_inner(tensors + outs) else "mixed"
    return "dense" if all(dense_order(t) is not None for t in tensors) else "strided"  # reductions


class FamilyModel:
    """The sweep's points per (op name, class key), sorted by roofline time."""

    def __init__(self, doc: dict):
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"family data has schema {doc.get('schema')!r}, expected {SCHEMA!r}")
        self.names: list[str] = doc["names"]
        self.apis: list[str] = doc["apis"]
        self.points: dict[tuple[str, str], tuple] = {}
        for op, classes in doc["ops"].items():
            for key, pts in classes.items():
                pts = sorted(pts, key=lambda p: p["w"])
                feats = [_features(p["w"], p["s"]) for p in pts]
                self.points[(op, key)] = (feats, pts)

    def covers(self, op_name: str, key: str) -> bool:
        return (op_name, key) in self.points

    def cold(self, op_name: str, key: str) -> bool:
        """Whether every point of the class was measured with the L2 overwritten before each call
        (a sweep configuration's `cold`: reductions_outer), rather than on the warm L2 of a
        configuration repeated on the same data."""
        entry = self.points.get((op_name, key))
        return entry is not None and all(p.get("cold") for p in entry[1])

    def _distances(self, op_name: str, key: str, w_ns: float, shape: tuple,
                   clamp: bool = True) -> tuple[list[float], float] | None:
        """Each point's squared distance from the query in bandwidths (roofline time, clamped to
        the measured range unless `clamp` is off, then the shape features), and the query's log
        roofline time; None when not covered."""
        entry = self.points.get((op_name, key))
        if entry is None or not w_ns > 0:
            return None
        feats, _ = entry
        lw = math.log(w_ns)
        lo, hi = feats[0][0], feats[-1][0]
        q = _features(w_ns, shape)
        if clamp:
            q = (min(max(lw, lo), hi),) + q[1:]  # outside the range: the ratio at the nearest end
        dim_bw = _dim_bandwidths(op_name, key, len(q) - 1)
        out = []
        for f in feats:
            d2 = ((f[0] - q[0]) / BANDWIDTH) ** 2
            if len(f) == len(q):
                d2 += sum(((a - b) / bw) ** 2 for a, b, bw in zip(f[1:], q[1:], dim_bw))
            elif len(q) > 1 and len(f) > 1:
                # a point of another rank (a 1-D or 3-D block's batch norm beside 2-D ones): no
                # dimension to compare, so it counts as a neighbour one bandwidth off in each
                # of the query's dimensions, never nearer than a same-rank point of equal size
                d2 += len(q) - 1
            out.append(d2)
        return out, lw

    def nearest_distance(self, op_name: str, key: str, w_ns: float, shape: tuple = ()) -> float:
        """The squared distance (in bandwidths) of the class's point nearest the query; inf when
        not covered. Tells which of two tables measured something closer to it, so the roofline
        time is not clamped to the table's range (a query beyond it is far from every point)."""
        got = self._distances(op_name, key, w_ns, shape, clamp=False)
        return min(got[0]) if got is not None else float("inf")

    def predict(self, op_name: str, key: str, w_ns: float, shape: tuple = (),
                exact: bool = False) -> tuple[float, dict] | None:
        """(time in ns, nearest point) for an op of roofline time w_ns whose first tensor has
        `shape`, or None when not covered. `exact`: a point measured at the query's very shape
        answers as measured, not blended with its neighbours (the caller asks it where the table
        was measured on the GPU simulated)."""
        got = self._distances(op_name, key, w_ns, shape)
        if got is None:
            return None
        dists, lw = got
        feats, pts = self.points[(op_name, key)]
        lo = feats[0][0]
        best, best_d = 0, float("inf")
        num = den = 0.0
        for i, d2 in enumerate(dists):
            if d2 < best_d:
                best, best_d = i, d2
            if d2 > 72:
                continue
            wt = math.exp(-0.5 * d2)
            num += wt * math.log(pts[i]["t"] / pts[i]["w"])
            den += wt
        near = pts[best]
        if exact and best_d < EXACT_D2:
            # the kernel-weighted mean smooths noise between neighbours, but where the time does not
            # follow the size (cuDNN's grouped wide-kernel 1-D convolutions: 12.2 ms measured at
            # (8, 768, 199), 9.6 ms blended with the neighbouring lengths and batches, 12.3 ms in
            # HF wav2vec2's profile) it moves a measured shape off its measurement
            return near["t"] * w_ns / near["w"], near
        t = near["t"] * w_ns / near["w"] if den <= 1e-12 else w_ns * math.exp(num / den)
        if lw < lo and op_name in CONV_OPS:
            # below every measured size: the work shrinks, but a kernel that leaves most SMs idle
            # does not get faster (small_grid_floor). Convolutions only: cuDNN's implicit-GEMM
            # kernels give each block a fixed output tile; kernels whose blocks loop over the
            # data (sorts, scans, reductions: an embedding backward's) get faster with less of it
            t = max(t, self.small_grid_floor(near, w_ns / near["w"]))
        return t, near

    def small_grid_floor(self, point: dict, r: float) -> float:
        """The point's time with the work scaled by `r` (< 1), kernel by kernel: a kernel whose
        grid does not fill half the GPU's SMs (cuDNN's legacy per-group kernels: 8 blocks) keeps
        its time, each block computing a fixed tile; any other (a persistent Hopper kernel has a
        block per SM and loops over tiles; many-wave grids) and other work (memsets, copies)
        scale by r."""
        from phantora_prof.cost.gpus import get_gpu
        from phantora_prof.cost.kernels import KIND_KERNEL

        sms = get_gpu(GPU_KEY).num_sms
        total = 0.0
        for kind, _ni, gx, gy, gz, _bx, _by, _bz, _regs, _smem, _nbytes, _ai, dur in point["k"]:
            small = kind == KIND_KERNEL and gx * gy * gz < sms / 2
            total += dur if small else dur * r
        return total


def composed_attention_keys(model: "FamilyModel", name: str, key: str) -> tuple[str, str, str] | None:
    """An attention variant the sweep did not measure as such, built from ones it did.

    Dropout together with a mask or bias (T5: dropout 0.1 and a learned position bias), with
    causality or with grouped-query heads was not swept; each was, alone. Returns (key without dropout, the dropout-only key, the plain key) so
    that t = t(without dropout) x t(dropout only) / t(plain) at the same shape: dropout's cost
    taken as a factor that does not depend on the mask. Approximate (effects assumed to
    multiply); None when any of the three is not covered."""
    if name not in ATTN_OPS:
        return None
    parts = key.split("|")
    if len(parts) != 6 or parts[3] != "drop" or model.covers(name, key):
        return None
    without = "|".join(parts[:3] + ["nodrop"] + parts[4:])
    # dropout's factor measured on the same causality and heads where swept, else on full
    # multi-head attention (HF GPT-2: causal attention with dropout 0.1, whose cuDNN forward ran
    # 104 us on the H200 where the causal point without dropout says ~46)
    for drop_only, plain in (("|".join(parts[:3] + ["drop", "nomask"] + parts[5:]),
                              "|".join(parts[:3] + ["nodrop", "nomask"] + parts[5:])),
                             ("|".join(parts[:2] + ["full", "drop", "nomask", "mha"]),
                              "|".join(parts[:2] + ["full", "nodrop", "nomask", "mha"]))):
        if drop_only != key and all(model.covers(name, k) for k in (without, drop_only, plain)):
            return without, drop_only, plain
    return None


# binary elementwise ops whose kernels are the same TensorIterator template over the same bytes
_BINARY_SIBLINGS = ("add", "mul", "div", "sub")


MAX_POOL_OPS = frozenset(("max_pool2d_with_indices", "max_pool2d_with_indices_backward"))


def swept_pool_window(fam: "FamilyModel", base: str, key: str) -> str | None:
    """A max-pool class whose window was not swept answers from a swept window of the same
    stride (else the nearest), dtype and layout: CUDA runs the same kernels (max_pool_forward_* /
    max_pool_backward_nhwc / _nchw, the backward after zeroing its gradient) for any window, which
    is a runtime argument. GoogLeNet's 2x2 / 2 pool over 832 channels (bf16, channels-last) took
    the roofline's single generic kernel where the H200 ran max_pool_forward_nhwc (63.7 us) and a
    fill + max_pool_backward_nhwc (138 us): -47% and -65%; from the swept 3x3 / 2 points +41% and
    +24% (the sweep has 3x3 / 1 and 3x3 / 2 only). An approximation: a window's size changes how
    many inputs each output reads."""
    want = _pool_class(key) if base in MAX_POOL_OPS else None
    if want is None:
        return None
    dtype, k, s, lay = want
    best, best_d = None, None
    for (op, other) in fam.points:
        have = _pool_class(other) if op == base else None
        if have is None or (have[0], have[3]) != (dtype, lay):
            continue
        dist = (0 if have[2] == s else 100) + abs(have[1] - k)
        if best_d is None or (dist, other) < (best_d, best):
            best, best_d = other, dist
    return best


def _pool_class(key: str) -> tuple[str, int, int, str] | None:
    """(dtype, window, stride, layout) of a pooling class key ("bfloat16|k3s2|cl"), or None."""
    dtype, _, rest = key.partition("|")
    ks, _, lay = rest.partition("|")
    if not ks.startswith("k") or "s" not in ks:
        return None
    try:
        k, s = (int(x) for x in ks[1:].split("s", 1))
    except ValueError:
        return None
    return dtype, k, s, lay


def sibling_elementwise_class(model: "FamilyModel", base: str, key: str) -> tuple[str, str] | None:
    """A measured class that runs the kernel this elementwise op would, when the op's own class
    was not swept: the same op in the other 16-bit dtype (float16 for bfloat16 and back: same
    bytes, same kernel template), and for a binary op another binary op. An in-place add_ of a
    broadcast bias in fp16 (ViT's MHA projection) runs ATen's generic offset-calculator kernel
    at half the bandwidth, as the broadcast bf16 mul / div points show, not at the roofline's
    full bandwidth. Approximate: the functor's arithmetic is taken as free against the memory
    traffic. None when no sibling is covered."""
    name = base.rstrip("_")
    dtype, _, rest = key.partition("|")
    dtypes = [dtype] + ([{"float16": "bfloat16", "bfloat16": "float16"}[dtype]]
                        if dtype in ("float16", "bfloat16") else [])
    names = (name,) + (tuple(o for o in _BINARY_SIBLINGS if o != name) if name in _BINARY_SIBLINGS else ())
    for dt in dtypes:
        for sib in names:
            k = f"{dt}|{rest}"
            if model.covers(sib, k):
                return sib, k
    return None


def _dim_bandwidths(op_name: str, key: str, n: int) -> tuple[float, ...]:
    """The interpolation's bandwidth per shape feature. A column sum's time is not smooth in its
    column count (ATen's reduction splits the columns over warps of 32 and vectorises them by 4:
    on the H100's cold grid [50176, 160 / 192 / 320] took 97-98 us, [50176, 128 / 256 / 384]
    52-65 us), so its outputs feature takes a narrow bandwidth: a measured column count answers
    for itself, not averaged with its neighbours."""
    if n == 2 and op_name in _REDUCTIONS and key.endswith(("|outer", "|outer_u")):
        return (OUTER_COLUMNS_BANDWIDTH, DIM_BANDWIDTH)
    if op_name in UPSAMPLE_OPS and n >= 2:
        return (DIM_BANDWIDTH,) * (n - 1) + (UPSAMPLE_SCALE_BANDWIDTH,)
    return (DIM_BANDWIDTH,) * n


# squared distance (in bandwidths) under which a point is the query's own shape: its features
# (log roofline time and log sizes) agree to ~1e-3
EXACT_D2 = 1e-5


def _features(w_ns: float, shape) -> tuple[float, ...]:
    return (math.log(w_ns),) + tuple(math.log(max(int(d), 1)) for d in shape)


UPSAMPLE_OPS = frozenset(("upsample_bilinear2d", "upsample_bilinear2d_backward", "upsample_nearest2d",
                          "upsample_nearest2d_backward"))
NORM_OPS = frozenset(("native_layer_norm", "native_layer_norm_backward", "_fused_rms_norm",
                      "_fused_rms_norm_backward"))
RNN_OPS = frozenset(("_cudnn_rnn", "_cudnn_rnn_backward"))
_NORMALIZED_SHAPE_ARG = {"native_layer_norm": 1, "native_layer_norm_backward": 2, "_fused_rms_norm": 1,
                         "_fused_rms_norm_backward": 2}


def shape_features(op, base: str) -> tuple:
    """The sizes the curves interpolate over besides the roofline time (see the module docstring).

    Mostly the first tensor's shape. Where the kernel's behaviour follows other sizes, those:
    a norm's (rows, row length) whatever the rank of its input (a per-row kernel: one block
    per row, so short rows leave the GPU idle); a reduction's (outputs, elements per output);
    a grouped convolution's shape and its group width (channels per group: cuDNN's grouped
    kernels run 2x to 200x their roofline time from 128 channels per group down to 4)."""
    if base in CTC_OPS:
        return _ctc_features(op, base)
    t = _first_tensor(op)
    if t is None:
        return ()
    if base in CONV_OPS:
        gw = _group_width(op, base)
        if gw is not None:
            return tuple(t.shape) + (gw,)
    if base in UPSAMPLE_OPS:
        scale = _upsample_scale(op, base, t)
        if scale is not None:
            return tuple(t.shape) + (scale,)
    if base in NORM_OPS:
        x = _arg(op, 1) if base.endswith("_backward") else t
        ns = _arg(op, _NORMALIZED_SHAPE_ARG[base])
        if isinstance(x, TensorArg) and isinstance(ns, (tuple, list)) and ns and all(isinstance(d, int) for d in ns):
            n = 1
            for d in ns:
                n *= d
            return (max(x.numel // max(n, 1), 1), n)
    if base in _REDUCTIONS:
        red = reduced_dims(op, t)
        if red is not None:
            r = 1
            for d in red:
                r *= t.shape[d]
            return (max(t.numel // max(r, 1), 1), r)
    return tuple(t.shape)


CTC_OPS = frozenset(("_ctc_loss", "_ctc_loss_backward"))


def _ctc_features(op, base: str) -> tuple:
    """CTC loss: (frames, utterances, classes, longest target). ATen's alpha / beta kernels run
    one block row per utterance over 2 x target + 1 states and step through the frames one by
    one, so the target length sets the work as much as the log-probabilities' size does; the
    backward's first tensor is the loss's gradient, so both read the log-probabilities' shape."""
    lp, lengths = (_arg(op, 0), _arg(op, 3)) if base == "_ctc_loss" else (_arg(op, 1), _arg(op, 4))
    if not isinstance(lp, TensorArg) or len(lp.shape) != 3:
        return ()
    s = max(lengths) if isinstance(lengths, (list, tuple)) and lengths and all(isinstance(x, int) for x in lengths) \
        else 1
    return tuple(lp.shape) + (max(int(s), 1),)


def _upsample_scale(op, base: str, t: TensorArg) -> int | None:
    """An upsampling's scale factor (output height over input height, at least 1): the backward's
    atomic adds contend scale^2 to an input element, so its time per byte grows with it (sweep
    `upsample`: 5x / 10x / 29x the roofline at x2 / x4 / x8, NCHW fp32 on the H200), which the
    tensors' sizes alone do not tell apart (a x8 map of 64 channels is a x2 map of 1,024 in
    size). The first tensor is the input forward, the output's gradient backward."""
    out = op.outputs[0] if op.outputs and isinstance(op.outputs[0], TensorArg) else None
    if out is None or len(out.shape) != 4 or len(t.shape) != 4:
        return None
    big, small = (out.shape[2], t.shape[2]) if not base.endswith("_backward") else (t.shape[2], out.shape[2])
    return max(1, round(big / max(small, 1)))


def data_path(gpu_key: str = GPU_KEY) -> Path:
    """The family table measured on `gpu_key` (cost/data/<gpu>_families.json.gz)."""
    return DATA.with_name(f"{gpu_key}_families.json.gz")


def measured_gpus() -> tuple[str, ...]:
    """GPUs with a family table of their own, the reference (H200) first: its sweep is the full
    one; another GPU's table holds what was swept there (H100: SyncBatchNorm's and the RNN cells'
    kernels, session 32), which answers for that GPU as measured and, for classes the H200 never
    measured, for the H200 (carried by roofline.carried_time_ns)."""
    keys = sorted(p.name[: -len("_families.json.gz")] for p in DATA.parent.glob("*_families.json.gz"))
    return tuple(sorted(keys, key=lambda k: k != GPU_KEY))


@lru_cache(maxsize=None)
def model(gpu_key: str = GPU_KEY) -> FamilyModel | None:
    path = data_path(gpu_key)
    if not path.exists():
        return None
    from phantora_prof.cost.derived_cache import load_or_build

    def build() -> FamilyModel:
        with gzip.open(path, "rt") as f:
            return FamilyModel(json.load(f))

    return load_or_build("families" if gpu_key == GPU_KEY else f"families_{gpu_key}", build)
