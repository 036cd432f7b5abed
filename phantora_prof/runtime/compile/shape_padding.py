"""Inductor's GEMM padding (`shape_padding`, fx_passes/pad_mm.py) decided by the cost model.

Inductor pads a GEMM whose dimensions are not multiples of the alignment (8 elements in bf16:
GPT-2's 50257-wide vocabulary becomes 50264) when the padded GEMM, with the copies that pad
its inputs, runs at least 10% faster than the original. It decides by timing both on the GPU.
The choice shows in time (an odd-width GEMM runs up to 3x slower than an aligned one) and in
memory: HF GPT-2 at 8 x 1024 compiled holds two padded copies of the logits' gradient in its
backward (1.65 GB), which made its simulated peak 20% low while padding was off here.

Under simulation nothing runs, so the timing is the cost model's: the same conditions as
Inductor's own decision (alignment, `force_shape_pad`, the compute-bound test, deterministic
mode), then the kernels the cost model gives for the original call against those of
`constant_pad_nd` on each input the pass pads at run time (an input whose padding Inductor
expects to plan away costs nothing, as in its benchmark) plus the padded GEMM. The ratio at
which it pads is the GPU profile's `pad_mm_ratio`, fitted to Inductor's decisions on the GPU
(`phantora-prof calibrate pad-mm`, tools/holdout/pad_probe.py): on the H200 its benchmark kept
GEMMs the cost model rated up to 2.6x faster padded (its margin on its own timings is 1.1), and
2.6 reproduces 55 of 60 of its decisions (1.1: 45). Approximate: the benchmark's tiny fills of
the padded corner and a bias's padding are not counted.
Inductor's on-disk cache of padding decisions is neither read nor written (its entries are a
real GPU's).
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterator

import torch

from phantora_prof.protocol import OpCall, TensorArg

log = logging.getLogger(__name__)

INDUCTOR_MARGIN = 1.1  # Inductor pads when the padded GEMM is this much faster (pad_mm.is_padded_faster)
# names of the benchmark-based decision in Inductor releases (replaced for the compile's duration)
_DECISION_NAMES = ("_should_pad", "should_pad_bench")


def available() -> bool:
    """Whether this torch's pad_mm pass has a decision function this module can replace."""
    try:
        from torch._inductor.fx_passes import pad_mm
    except ImportError:
        return False
    return any(hasattr(pad_mm, n) for n in _DECISION_NAMES)


@contextlib.contextmanager
def decided_by(cost_ns: Callable[[OpCall], float], ratio: float) -> Iterator[None]:
    """Inside: pad_mm's decision uses `cost_ns` (the GPU time of a call) instead of timing, and
    pads when unpadded / padded exceeds `ratio` (the GPU profile's `pad_mm_ratio`).

    `can_pad` also asks whether Triton is installed: a CUDA machine has it (CUDA builds of torch
    depend on it), a CPU-only environment without the `frameworks` extra does not, and padding
    would silently stop there. It is answered as on the GPU machine while the pass runs (the
    padding copies are timed by the cost model; no Triton code is generated)."""
    from torch._inductor.fx_passes import pad_mm

    name = next(n for n in _DECISION_NAMES if hasattr(pad_mm, n))
    original = getattr(pad_mm, name)
    setattr(pad_mm, name, lambda match, mat1, mat2, op, input=None: _should_pad(
        pad_mm, cost_ns, match, mat1, mat2, op, input, ratio))
    had_triton = getattr(pad_mm, "has_triton", None)
    if had_triton is not None:
        pad_mm.has_triton = lambda: True
    try:
        yield
    finally:
        setattr(pad_mm, name, original)
        if had_triton is not None:
            pad_mm.has_triton = had_triton


def _arg(t: torch.Tensor, shape: tuple | None = None) -> TensorArg:
    """`t` as the cost model sees it, or a contiguous tensor of its dtype with `shape`."""
    from torch._prims_common import make_contiguous_strides_for

    from phantora_prof.runtime.dispatch.capture import _dtype_name

    if shape is None:
        return TensorArg(tuple(int(s) for s in t.shape), tuple(int(s) for s in t.stride()), _dtype_name(t.dtype), 0)
    return TensorArg(tuple(shape), tuple(make_contiguous_strides_for(shape)), _dtype_name(t.dtype), 0)


def _call(name: str, args: tuple, out: TensorArg) -> OpCall:
    return OpCall(0, 0, name, args, {}, (out,), 0, 0, 0, 0, 0)


def _should_pad(pad_mm: Any, cost_ns: Callable[[OpCall], float], match: Any, mat1: torch.Tensor,
                mat2: torch.Tensor, op: Any, input: torch.Tensor | None, ratio: float = INDUCTOR_MARGIN) -> bool:
    aten = torch.ops.aten
    bmm = op is aten.bmm
    if op not in (aten.mm, aten.addmm, aten.bmm):
        return False
    if any(isinstance(s, torch.SymInt) for s in (*mat1.shape, *mat2.shape)):
        return False  # symbolic sizes: Inductor does not pad them either
    m, k = (mat1.shape[1], mat1.shape[2]) if bmm else (mat1.shape[0], mat1.shape[1])
    n = mat2.shape[-1]
    m_pad = pad_mm.get_padded_length(m, pad_mm.get_alignment_size(mat1))
    k_pad = pad_mm.get_padded_length(k, pad_mm.get_alignment_size(mat1))
    n_pad = pad_mm.get_padded_length(n, pad_mm.get_alignment_size(mat2))
    config = torch._inductor.config
    if config.force_shape_pad:
        return True
    if config.deterministic:
        return False  # Inductor then pads only on its learned heuristic's say, which needs a GPU
    try:
        if not pad_mm.is_mm_compute_bound(int(m), int(k), int(n), mat1.dtype):
            log.debug("pad_mm %s m=%s k=%s n=%s: not compute-bound -> keep", op, m, k, n)
            return False
    except Exception:  # noqa: BLE001 - a device query that fails here: Inductor's own fallback
        log.debug("is_mm_compute_bound failed", exc_info=True)
    batch = (mat1.shape[0],) if bmm else ()
    name = {aten.mm: "aten::mm", aten.addmm: "aten::addmm", aten.bmm: "aten::bmm"}[op]
    out = _arg(mat1, (*batch, int(m), int(n)))
    original = (_arg(input), _arg(mat1), _arg(mat2)) if op is aten.addmm else (_arg(mat1), _arg(mat2))
    ori_ns = cost_ns(_call(name, original, out))
    p1 = (*batch, int(m + m_pad), int(k + k_pad))
    p2 = (*batch, int(k + k_pad), int(n + n_pad))
    pad_ns = 0.0
    for arg_name, t, shape in (("mat1", mat1, p1), ("mat2", mat2, p2)):
        if tuple(shape) == tuple(t.shape) or _pre_padded(pad_mm, match, arg_name):
            continue
        pad_ns += cost_ns(_call("aten::constant_pad_nd", (_arg(t), [0, shape[-1] - t.shape[-1], 0, shape[-2] - t.shape[-2]], 0.0),
                                _arg(t, shape)))
    padded_out = _arg(mat1, (*batch, int(m + m_pad), int(n + n_pad)))
    padded = (_arg(mat1, p1), _arg(mat2, p2))
    if op is aten.addmm:
        padded = (_arg(input),) + padded
    pad_ns += cost_ns(_call(name, padded, padded_out))
    opts = getattr(config, "post_grad_fusion_options", {}) or {}
    if "shape_padding_multiplier" in opts:  # the user's margin, relative to Inductor's default
        ratio *= opts["shape_padding_multiplier"].get("value", INDUCTOR_MARGIN) / INDUCTOR_MARGIN
    decision = ori_ns > pad_ns * ratio
    log.debug("pad_mm %s m=%s k=%s n=%s: %.1f us unpadded, %.1f us padded -> %s", name, m, k, n,
              ori_ns / 1e3, pad_ns / 1e3, "pad" if decision else "keep")
    return decision


def _pre_padded(pad_mm: Any, match: Any, arg_name: str) -> bool:
    try:
        return bool(pad_mm.should_exclude_padding_time(match, arg_name))
    except Exception:  # noqa: BLE001 - another release's signature: count the padding
        return False
