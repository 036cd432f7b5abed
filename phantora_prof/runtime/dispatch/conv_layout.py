"""Memory format of convolution outputs on a simulated CUDA device, as cuDNN would pick it.

FakeTensor's convolution asks `torch._C._select_conv_backend` which backend would run; a
CPU build of torch has no cuDNN, so the answer is a slow fallback whose outputs are always
NCHW-contiguous. On a GPU, cuDNN follows the operands: if the input or the weight is
channels-last, so are the output and the gradients (cudnn_conv_suggest_memory_format). The
difference is not cosmetic: a channels-last ResNet became NCHW after its first
convolution, so every batch norm and convolution after it was simulated with NCHW kernels
(+83% GPU time on tools/holdout/cnn.py --channels-last).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

_FORWARD = (aten.convolution.default, aten._convolution.default)
_BACKWARD = (aten.convolution_backward.default,)
CONV_OPS = frozenset(_FORWARD + _BACKWARD)


def cudnn_memory_format(inp: torch.Tensor, weight: torch.Tensor) -> torch.memory_format:
    """cuDNN's choice for these operands (4-D and 5-D; other ranks stay contiguous)."""
    if inp.dim() == 4:
        cl = torch.channels_last
    elif inp.dim() == 5:
        cl = torch.channels_last_3d
    else:
        return torch.contiguous_format
    if inp.is_contiguous(memory_format=cl) and not inp.is_contiguous() or \
            weight.is_contiguous(memory_format=cl) and not weight.is_contiguous():
        return cl
    return torch.contiguous_format


def _as(t, fmt: torch.memory_format):
    if t is None or not isinstance(t, torch.Tensor) or t.is_contiguous(memory_format=fmt):
        return t
    return torch.empty_like(t, memory_format=fmt)


def restore(func, args: tuple, out):
    """`out` of a convolution op with cuDNN's memory format (call under the fake mode)."""
    if func in _FORWARD:
        inp, weight = args[0], args[1]
    elif func in _BACKWARD:
        inp, weight = args[1], args[2]
    else:
        return out
    if not isinstance(inp, torch.Tensor) or inp.device.type != "cuda":
        return out
    fmt = cudnn_memory_format(inp, weight)
    if fmt is torch.contiguous_format:
        return out
    if func in _FORWARD:
        return _as(out, fmt)
    grad_input, grad_weight, grad_bias = out
    return _as(grad_input, fmt), _as(grad_weight, fmt), grad_bias
