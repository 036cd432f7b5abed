"""Higher-order operators (torch._higher_order_ops) on simulated CUDA tensors.

A higher-order operator (HOP) takes functions as arguments: `flex_attention(q, k, v,
score_mod, block_mask, ...)` and its backward. On a GPU they run as one fused (Triton)
kernel each. Under the capture mode they reach `__torch_dispatch__` as the HOP itself
(`supports_higher_order_operators`); their shapes come from the HOP's FakeTensorMode rule,
which HOP dispatch looks up by the *exact* mode type, so it runs under a plain
FakeTensorMode (not a subclass), and the op is recorded as one kernel.

Cost of flex attention (approximate): the FLOPs of dense attention on the same q/k/v shapes
(torch.utils.flop_counter's formulas), times the fraction of (q block, kv block) pairs the
block mask computes. That fraction comes from the mask's block counts when they hold real
values (small tensors do, see runtime/dispatch/values.py); otherwise a causal mask is assumed
(the common case: torchtitan's llama models). Tile efficiency is that of the attention
roofline (cost/roofline.py); the Triton template's own tuning is not modelled.
"""
from __future__ import annotations

import logging
from typing import Any

import torch

from phantora_prof import cost as _cost
from phantora_prof.cost import kernels as _K
from phantora_prof.cost import roofline as _R
from phantora_prof.errors import UnsupportedOpError
from phantora_prof.protocol import TensorArg

log = logging.getLogger(__name__)

# HOP name -> the name of the kernel it launches (what torch.compile's Triton templates are called)
_KERNELS = {
    "flex_attention": "triton_tem_fused_flex_attention_0",
    "flex_attention_backward": "triton_tem_fused_flex_attention_backward_0",
}


def supported(func: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensorMode

    return func.name() in _KERNELS and FakeTensorMode in func.python_key_table


def unsupported_error(func: Any) -> UnsupportedOpError:
    return UnsupportedOpError(
        f"phantora-prof cannot simulate the higher-order operator {func.name()} on CUDA tensors yet "
        f"(supported: {', '.join(sorted(_KERNELS))}); run that part of the model without it "
        "(e.g. another attention backend)")


def tensor_args(args: tuple) -> tuple:
    """The tensor arguments only (functions and graphs are not op arguments in a profile)."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)) and any(isinstance(b, torch.Tensor) for b in a):
            out.extend(b for b in a if isinstance(b, torch.Tensor))
    return tuple(out)


def _block_density(block_mask: tuple) -> float | None:
    """Fraction of (q block, kv block) pairs a BlockMask computes, from its block counts when
    they hold real values; None when unknown."""
    from phantora_prof.runtime.dispatch import values

    tensors = [t for t in block_mask if isinstance(t, torch.Tensor)]
    ints = [x for x in block_mask if isinstance(x, int) and not isinstance(x, bool)]
    if len(tensors) < 2 or len(ints) < 4:
        return None
    kv_len, kv_block = ints[1], ints[-1]
    kv_num = tensors[0]  # [B, H, q_blocks]
    full_kv_num = block_mask[4] if isinstance(block_mask[4], torch.Tensor) else None
    try:
        n = values.shadow(kv_num)
        full = values.shadow(full_kv_num) if full_kv_num is not None else None
    except Exception:  # noqa: BLE001
        return None
    if n is None or (full_kv_num is not None and full is None):
        return None
    kv_blocks = max(1, -(-kv_len // max(1, kv_block)))
    total = n.numel() * kv_blocks
    used = float(n.sum()) + (float(full.sum()) if full is not None else 0.0)
    return min(1.0, used / total) if total else None


def kernels(name: str, args: tuple, gpu: Any, allow_tf32: bool) -> tuple:
    """The kernel(s) one call launches, with their modelled durations."""
    q, k, v = args[0], args[1], args[2]
    backward = name.endswith("_backward")
    block_mask = args[9] if backward else args[4]
    density = _block_density(block_mask) if isinstance(block_mask, tuple) else None
    s_q, s_k = q.shape[-2], k.shape[-2]
    if density is None:
        density = _R.causal_fraction(s_q, s_k) if hasattr(_R, "causal_fraction") else 0.5
    flops = _R.sdpa_flops(tuple(q.shape), tuple(k.shape), tuple(v.shape), False, backward) * density
    nbytes = sum(t.numel() * t.element_size() for t in tensor_args(args) if t.device.type == "cuda")
    dtype = str(q.dtype).replace("torch.", "")
    c = _R.Cost(_R.ATTENTION, "attention_bwd" if backward else "attention_fwd", flops, nbytes,
                gpu.peak_flops(dtype, allow_tf32))
    b = q.shape[0] if q.dim() == 4 else 1
    h = q.shape[1] if q.dim() == 4 else 1
    spec = _K.KernelSpec(_K.KIND_KERNEL, _KERNELS[name], (max(1, -(-s_q // 128)), b * h, 1), (256, 1, 1),
                         128, 98304 if backward else 65536)
    return tuple(_cost.materialize(c, [spec], _R.op_time_ns(c, gpu), gpu))


def to_arg_list(args: tuple, to_arg: Any) -> tuple[TensorArg, ...]:
    return tuple(to_arg(t) for t in tensor_args(args))
