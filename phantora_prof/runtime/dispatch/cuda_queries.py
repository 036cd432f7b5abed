"""Ops that only ask a CUDA build a question (which backend would run) and return a bool.

A CPU build of torch has no CUDA kernel for them, and their meta kernels (where there are any)
do not exist either, so FakeTensorMode cannot answer them. On the simulated GPU the capture mode
answers them as the CUDA build's kernels do, from the inputs' metadata (and values, where the
simulation has them). They launch no kernel; the dispatcher's record of the call stays, as in a
real profile.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from phantora_prof.runtime.dispatch import values

aten = torch.ops.aten

_CUDNN_CTC_MAX_TARGET = 256  # cuDNN's CTC loss takes targets shorter than this (torch's check)


def known_ints(x: Any) -> list[int] | None:
    """The integers of an int list, or of a small integer tensor whose values the simulation has."""
    if isinstance(x, (list, tuple)):
        return [int(v) for v in x]
    if isinstance(x, torch.Tensor):
        v = values.shadow(x) if x.device.type == "cuda" else x
        if v is not None:
            return [int(i) for i in v.reshape(-1).tolist()]
    return None


def _cudnn_ctc_eligible(log_probs: torch.Tensor, targets: torch.Tensor, blank: int) -> bool:
    """The checks of `_use_cudnn_ctc_loss` that depend on metadata only: cuDNN enabled, blank 0,
    fp32 (T, N, C) log-probabilities on the GPU, 1-D contiguous int32 targets."""
    return (torch._C._get_cudnn_enabled() and blank == 0 and targets.dim() == 1
            and log_probs.dtype == torch.float32 and targets.dtype == torch.int32
            and log_probs.device.type == "cuda" and targets.is_contiguous() and log_probs.dim() == 3)


def use_cudnn_ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Any, target_lengths: Any,
                       blank: int) -> bool:
    """`aten::_use_cudnn_ctc_loss` (int-list lengths): cuDNN also needs the targets on the CPU,
    every input as long as the padded sequence, and each target shorter than 256 and than its input."""
    if not (_cudnn_ctc_eligible(log_probs, targets, blank) and targets.device.type == "cpu"):
        return False
    ins, outs = known_ints(input_lengths), known_ints(target_lengths)
    if ins is None or outs is None:
        return False
    return all(n == log_probs.size(0) for n in ins) and \
        all(t < _CUDNN_CTC_MAX_TARGET and t <= n for t, n in zip(outs, ins))


def use_cudnn_ctc_loss_tensor(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
                              target_lengths: torch.Tensor, blank: int) -> bool:
    """`aten::_use_cudnn_ctc_loss.Tensor`: int32 lengths, each target shorter than 256. The CUDA
    kernel reads the target lengths back to check that; where the simulation has no values for
    them they are taken to pass (approximate)."""
    if not (_cudnn_ctc_eligible(log_probs, targets, blank) and input_lengths.dtype == torch.int32
            and target_lengths.dtype == torch.int32):
        return False
    outs = known_ints(target_lengths)
    return outs is None or all(t < _CUDNN_CTC_MAX_TARGET for t in outs)


def _never(*args: Any, **kwargs: Any) -> bool:
    """MIOpen is ROCm's library: a CUDA build never takes it."""
    return False


ANSWERS: dict[Any, Callable[..., bool]] = {
    aten._use_cudnn_ctc_loss.default: use_cudnn_ctc_loss,
    aten._use_cudnn_ctc_loss.Tensor: use_cudnn_ctc_loss_tensor,
    aten._use_miopen_ctc_loss.default: _never,
    aten._use_miopen_ctc_loss.Tensor: _never,
}
