"""Higher-order operators (torch._higher_order_ops) on simulated CUDA tensors.

A higher-order operator (HOP) takes functions as arguments: `flex_attention(q, k, v,
score_mod, block_mask, ...)` and its backward. On a GPU they run as one fused (Triton)
kernel each. Under the capture mode they reach `__torch_dispatch__` as the HOP itself
(`supports_higher_order_operators`); their shapes come from the HOP's FakeTensorMode rule,
which HOP dispatch looks up by the *exact* mode type, so it runs under a plain
FakeTensorMode (not a subclass), and the op is recorded as one kernel.

Cost of flex attention: the FLOPs of dense attention on the same q/k/v shapes
(torch.utils.flop_counter's formulas), times the fraction of (q block, kv block) pairs the
block mask computes, at the flex templates' own efficiency (GPU profile `flex_attention_fwd` /
`_bwd`: a fixed cost plus FLOPs at a fraction of the peak, fitted on compiled flex_attention
forward and backward kernels measured on the H200, tools/holdout/flex_sweep.py; leave-one-out
error 6% forward, 13% backward). The fraction comes from the mask's block counts when they
hold real values (small tensors do, see runtime/dispatch/values.py), else from evaluating the
mask function on the CPU over every (q, kv) position (b = h = 0; masks that read other
tensors cannot be evaluated), else a causal mask is assumed (torchtitan's llama models).
"""
from __future__ import annotations

import contextlib
import functools
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


def _mask_ints(block_mask: tuple) -> list[int]:
    """The integers of a BlockMask tuple, in order: its sequence lengths, then its block sizes."""
    return [x for x in block_mask if isinstance(x, int) and not isinstance(x, bool)]


def _block_density(block_mask: tuple) -> float | None:
    """Fraction of (q block, kv block) pairs a BlockMask computes, from its block counts when
    they hold real values; None when unknown."""
    from phantora_prof.runtime.dispatch import values

    tensors = [t for t in block_mask if isinstance(t, torch.Tensor)]
    ints = _mask_ints(block_mask)
    if len(tensors) < 2 or len(ints) < 4:
        return None
    kv_len, kv_block = ints[1], ints[-1]
    kv_num = tensors[0]  # [B, H, q_blocks]
    full_kv_num = block_mask[4] if isinstance(block_mask[4], torch.Tensor) else None
    kv_blocks = max(1, -(-kv_len // max(1, kv_block)))
    with _simulator_cpu_work():  # reading the shadows makes CPU tensors too
        try:
            n = values.shadow(kv_num)
            full = values.shadow(full_kv_num) if full_kv_num is not None else None
        except Exception:  # noqa: BLE001
            return None
        if n is None or (full_kv_num is not None and full is None):
            return None
        total = n.numel() * kv_blocks
        used = float(n.sum()) + (float(full.sum()) if full is not None else 0.0)
    return min(1.0, used / total) if total else None


@contextlib.contextmanager
def _simulator_cpu_work():
    """CPU ops the cost model runs for itself (sums of a block mask's counts, a mask function
    evaluated on the CPU): not the program's records, not its host time, outside any mode."""
    from torch.utils._python_dispatch import _disable_current_modes

    from phantora_prof.runtime.dispatch import op_recorder
    from phantora_prof.runtime.host import pyhost
    from phantora_prof.runtime.process import state

    host = state.get().pyhost if state.installed() else None
    rec = op_recorder.get()
    prev = rec.quiet(1) if rec is not None else None
    try:
        with pyhost.simulator_work(host), _disable_current_modes(), torch.no_grad():
            yield
    finally:
        if rec is not None:
            rec.quiet(prev)


# the mask function is evaluated over at most this many (q, kv) positions (a bool each)
_MASK_EVAL_LIMIT = 1 << 28


def _block_sizes(block_mask: tuple) -> tuple[int, int]:
    """(q block, kv block) of a BlockMask tuple: the last two integers before its mask_mod."""
    ints = _mask_ints(block_mask)
    return (ints[-2], ints[-1]) if len(ints) >= 4 else (128, 128)


@functools.lru_cache(maxsize=64)
def _mask_density(mask_mod: Any, s_q: int, s_k: int, q_block: int, kv_block: int) -> float | None:
    """Fraction of (q block, kv block) pairs in which `mask_mod` keeps any position, evaluated on
    the CPU for b = h = 0; None when it cannot be evaluated (it reads other tensors, or the
    sequences are too long to evaluate every position)."""
    if not callable(mask_mod) or s_q * s_k > _MASK_EVAL_LIMIT or min(s_q, s_k, q_block, kv_block) <= 0:
        return None
    try:
        with _simulator_cpu_work():
            zero = torch.zeros((), dtype=torch.int64)
            keep = mask_mod(zero, zero, torch.arange(s_q)[:, None], torch.arange(s_k)[None, :])
            keep = torch.broadcast_to(torch.as_tensor(keep, dtype=torch.bool), (s_q, s_k))
            nq, nk = -(-s_q // q_block), -(-s_k // kv_block)
            padded = torch.zeros(nq * q_block, nk * kv_block, dtype=torch.bool)
            padded[:s_q, :s_k] = keep
            blocks = padded.view(nq, q_block, nk, kv_block).any(dim=3).any(dim=1)
            return float(blocks.float().mean())
    except Exception:  # noqa: BLE001 - a mask over other tensors, vmap-only code: not evaluable here
        log.debug("flex_attention mask not evaluated", exc_info=True)
        return None


def _causal_block_fraction(s_q: int, s_k: int, q_block: int, kv_block: int) -> float:
    """Fraction of blocks a causal (q >= kv) mask computes, diagonal blocks included."""
    nq, nk = -(-s_q // q_block), -(-s_k // kv_block)
    kept = sum(min(nk, ((i + 1) * q_block - 1) // kv_block + 1) for i in range(nq))
    return kept / (nq * nk)


def kernels(name: str, args: tuple, gpu: Any, allow_tf32: bool) -> tuple:
    """The kernel(s) one call launches, with their modelled durations."""
    q, k, v = args[0], args[1], args[2]
    backward = name.endswith("_backward")
    block_mask = args[9] if backward else args[4]
    s_q, s_k = q.shape[-2], k.shape[-2]
    density = None
    if isinstance(block_mask, tuple):
        density = _block_density(block_mask)
        q_block, kv_block = _block_sizes(block_mask)
        if density is None:
            density = _mask_density(block_mask[-1], s_q, s_k, q_block, kv_block)
        if density is None:
            density = _causal_block_fraction(s_q, s_k, q_block, kv_block)
    if density is None:
        density = _R.causal_fraction(s_q, s_k)
    flops = _R.sdpa_flops(tuple(q.shape), tuple(k.shape), tuple(v.shape), False, backward) * density
    nbytes = sum(t.numel() * t.element_size() for t in tensor_args(args) if t.device.type == "cuda")
    dtype = str(q.dtype).replace("torch.", "")
    c = _R.Cost(_R.ATTENTION, "flex_attention_bwd" if backward else "flex_attention_fwd", flops, nbytes,
                gpu.peak_flops(dtype, allow_tf32))
    b = q.shape[0] if q.dim() == 4 else 1
    h = q.shape[1] if q.dim() == 4 else 1
    spec = _K.KernelSpec(_K.KIND_KERNEL, _KERNELS[name], (max(1, -(-s_q // 128)), b * h, 1), (256, 1, 1),
                         128, 98304 if backward else 65536)
    return tuple(_cost.materialize(c, [spec], _R.op_time_ns(c, gpu), gpu))


def to_arg_list(args: tuple, to_arg: Any) -> tuple[TensorArg, ...]:
    return tuple(to_arg(t) for t in tensor_args(args))
