"""Route F.scaled_dot_product_attention to the fused kernel the real GPU would run.

On a CPU build, torch picks the backend through a CUDA-only dispatch stub that does not
exist, so attention on fake CUDA tensors silently takes the math path (bmm + softmax +
bmm, with a materialised T x T matrix): wrong kernels, wrong time, wrong memory. We make the
choice torch makes on the GPU and call that backend's aten op directly; autograd then
records the matching backward op.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.nn.functional as F

from phantora_prof.runtime import state as _state

aten = torch.ops.aten


def choose_backend(gpu: Any, query: torch.Tensor, key: torch.Tensor, attn_mask: Any, dropout_p: float,
                   enable_gqa: bool, dtype: torch.dtype | None = None) -> str:
    """The backend torch would pick on `gpu` (sm90: cuDNN, flash, efficient, math; sm80: flash
    first), honouring torch.backends.cuda.enable_*_sdp() and sdpa_kernel(). `dtype`: the
    inputs' dtype after autocast, when it casts them."""
    head_dim = query.shape[-1]
    qdtype = dtype if dtype is not None else query.dtype
    half = qdtype in (torch.float16, torch.bfloat16)
    four_d = query.dim() == 4
    gqa = enable_gqa or (four_d and key.dim() == 4 and key.shape[1] != query.shape[1])
    be = torch.backends.cuda
    major = gpu.compute_capability[0]
    order = ("cudnn", "flash", "efficient", "math") if major >= 9 else ("flash", "efficient", "math")
    for name in order:
        if name == "cudnn" and be.cudnn_sdp_enabled() and half and four_d and head_dim <= 128 \
                and head_dim % 8 == 0 and attn_mask is None and not dropout_p and not gqa:
            return name
        if name == "flash" and be.flash_sdp_enabled() and half and four_d and head_dim <= 256 \
                and head_dim % 8 == 0 and attn_mask is None and not gqa:
            return name
        if name == "efficient" and be.mem_efficient_sdp_enabled() and four_d and head_dim % 8 == 0 \
                and qdtype in (torch.float16, torch.bfloat16, torch.float32) and not gqa:
            return name
        if name == "math" and be.math_sdp_enabled():
            return name
    return "math"


def _patched(orig: Callable) -> Callable:
    @functools.wraps(orig)
    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=False):
        if not (isinstance(query, torch.Tensor) and query.device.type == "cuda" and _state.installed()):
            return orig(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, enable_gqa=enable_gqa)
        # autocast: the fused ops are not autocast-registered the way the composite op is,
        # so cast as the composite would (to the autocast dtype, lower precision); the math
        # path is the composite op itself, which casts under its own record.
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None
        backend = choose_backend(_state.get().gpu, query, key, attn_mask, dropout_p, enable_gqa, dtype)
        if dtype is not None and backend != "math":
            query, key, value = (t if t.dtype == dtype else t.to(dtype) for t in (query, key, value))
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        if backend == "cudnn":
            return aten._scaled_dot_product_cudnn_attention(
                query, key, value, None, needs_grad, dropout_p, is_causal, False, scale=scale)[0]
        if backend == "flash":
            return aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False, scale=scale)[0]
        if backend == "efficient":
            bias = attn_mask
            if bias is not None and bias.dtype == torch.bool:
                bias = torch.zeros_like(bias, dtype=query.dtype).masked_fill_(~bias, float("-inf"))
            return aten._scaled_dot_product_efficient_attention(
                query, key, value, bias, needs_grad, dropout_p, is_causal, scale=scale)[0]
        return orig(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                    scale=scale, enable_gqa=enable_gqa)

    return scaled_dot_product_attention


def install() -> None:
    patched = _patched(F.scaled_dot_product_attention)
    F.scaled_dot_product_attention = patched
    torch._C._nn.scaled_dot_product_attention = patched
