"""The strides ATen's TensorIterator gives an element-wise op's output where torch's Meta
kernels give other ones: tensors with size-1 dims whose layout is ambiguous.

A [N, C, 1, 1] tensor (a pooled feature map: squeeze-and-excitation, DeepLab's image-pool
branch) is both contiguous and channels-last-contiguous, whatever its strides say about the
size-1 dims. TensorIterator's fast set-up checks contiguity first, so when every operand is
contiguous a CUDA (or CPU) build allocates the output contiguous: `relu` of a [16, 256, 1, 1]
with strides (256, 1, 256, 256) (a channels-last convolution's output) returns strides
(256, 1, 1, 1). torch's Meta kernels compute element-wise strides from the operands' stride
order instead and return (256, 1, 256, 256). The difference looks harmless but travels: ops
that follow `suggest_memory_format()` read those strides. DeepLabV3's pooled branch,
bilinearly upsampled to 64 x 64 and concatenated with four channels-last branches, gives a
channels-last [16, 1280, 64, 64] under the Meta strides but a contiguous one on the GPU, and
the 1 x 1 convolution after it then copies its input to channels-last (a 648 us strided copy
in each backward in the H100 profile, session 33) that the simulation did not have.

So for an element-wise op (the cost model's element-wise class) whose tensor operands all
have the output's shape and are all contiguous, the output gets contiguous strides. Not when
the call names its output's memory format (`empty_like`, `_to_copy`, `clone` with
`memory_format=torch.channels_last`): those allocate in that format, ambiguous or not (nn.Module
.to(memory_format=torch.channels_last) gives a 1x1 convolution weight (C, 1, C, C) strides,
which make cuDNN run the convolution channels-last; until session 36 they came out contiguous
here, and ShuffleNet's 1x1 convolutions over NCHW inputs with them). Nor for views: `detach`
of such a weight (nn.Parameter's constructor, which Module.to runs on the simulated device)
kept its input's strides on a GPU and lost them here. Nor for `empty_like` and the other
`*_like` factories, which are no TensorIterator ops (preserve_format copies a dense input's
strides).
Other TensorIterator paths (all channels-last, all alike, the general stride sort) agree with
the Meta kernels and are left alone.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

_ELEMENTWISE: dict[Any, bool] = {}


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _is_elementwise(func) -> bool:
    """A functional (not in-place, not out=) op the cost model prices as element-wise, whose
    outputs are new tensors: a view (`detach`, `alias`, `view`, `t`, which the cost model also
    files under element-wise) has its input's strides, and ATen allocates nothing for it."""
    r = _ELEMENTWISE.get(func)
    if r is None:
        from phantora_prof.cost import ops

        schema = func._schema
        writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
        view = any(ret.alias_info is not None for ret in schema.returns)
        base = schema.name.split("::", 1)[-1]
        # `empty_like` and the other `*_like` factories are no TensorIterator ops: their
        # preserve_format keeps a dense input's strides exactly
        r = _ELEMENTWISE[func] = (not writes and not view and not base.endswith("_like")
                                  and ops.handler_for(base) is ops.elementwise)
    return r


def _wrapped_number(func, args: tuple) -> bool:
    """Whether a Tensor argument came as a Python number (`x * 2`): ATen wraps it as a 0-dim
    operand, which rules the fast set-up out (the Meta strides are then ATen's too)."""
    for a, value in zip(func._schema.arguments, args):
        if isinstance(value, (int, float, bool, complex)) and isinstance(a.type, torch.TensorType):
            return True
    return False


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    return [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]


def fast_setup_output(func, args: tuple, kwargs: dict, out: Any,
                      alloc: Callable[[tuple, tuple, torch.Tensor], torch.Tensor]) -> Any:
    """`out`, or a fresh tensor with TensorIterator's contiguous strides where they differ
    (see the module docstring). `alloc(shape, strides, like)` makes the replacement."""
    if not isinstance(out, torch.Tensor) or 1 not in out.shape or not _is_elementwise(func):
        return out
    fmt = kwargs.get("memory_format")
    if fmt is not None and fmt is not torch.preserve_format:
        return out  # an explicit format: allocated in it (None means preserve_format)
    want = _contiguous_strides(tuple(out.shape))
    if tuple(out.stride()) == want:
        return out
    tensors = _tensors(args, kwargs)
    # the fast set-up needs every operand of the output's shape (a broadcast operand, or a
    # 0-dim tensor such as a wrapped Python number next to others, rules it out) and contiguous
    if not tensors or not all(t.shape == out.shape and t.is_contiguous() for t in tensors) \
            or _wrapped_number(func, args):
        return out
    return alloc(tuple(out.shape), want, out)
