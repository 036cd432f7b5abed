"""Memory format of convolution outputs on a simulated CUDA device, as cuDNN would pick it.

FakeTensor's convolution asks `torch._C._select_conv_backend` which backend would run; a
CPU build of torch has no cuDNN, so the answer is a slow fallback whose outputs are always
NCHW-contiguous. On a GPU, cuDNN follows the operands: if the input or the weight is
channels-last, so are the output and the gradients (cudnn_conv_suggest_memory_format). The
difference is not cosmetic: a channels-last ResNet became NCHW after its first
convolution, so every batch norm and convolution after it was simulated with NCHW kernels
(+83% GPU time on tools/holdout/cnn.py --channels-last).

The rule is ATen's `cudnn_conv_suggest_memory_format`: channels-last when the input's or the
weight's `suggest_memory_format()` is, which reads the strides of size-1 dims too. A 1x1
weight made channels-last ((58, 1, 58, 58) for (58, 58, 1, 1)) is also NCHW-contiguous, and
suggests channels-last all the same: ShuffleNet's and PoolFormer's 1x1 convolutions over an
NCHW input (a channel shuffle's, a GroupNorm's output) return channels-last outputs on a GPU.
Until 2026-12-05 (session 36) the test here was "channels-last and not contiguous", which kept
those outputs NCHW and every batch norm and convolution after them on NCHW kernels (ShuffleNet:
826 kernels per profiled step against 1,004 real, GPU time +55%).
"""
from __future__ import annotations

import torch

from phantora_prof.cost import strides_like_channels_last

aten = torch.ops.aten

_FORWARD = (aten.convolution.default, aten._convolution.default)
_BACKWARD = (aten.convolution_backward.default,)
CONV_OPS = frozenset(_FORWARD + _BACKWARD)


def cudnn_memory_format(inp: torch.Tensor, weight: torch.Tensor) -> torch.memory_format:
    """cuDNN's choice for these operands (4-D and 5-D; other ranks stay contiguous, and float64,
    which ATen never runs channels-last)."""
    if not isinstance(weight, torch.Tensor) or weight.dim() != inp.dim():
        return torch.contiguous_format
    if inp.dim() == 4:
        cl = torch.channels_last
    elif inp.dim() == 5:
        cl = torch.channels_last_3d
    else:
        return torch.contiguous_format
    if torch.float64 in (inp.dtype, weight.dtype):
        return torch.contiguous_format
    if strides_like_channels_last(tuple(inp.shape), inp.stride()) or \
            strides_like_channels_last(tuple(weight.shape), weight.stride()):
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
