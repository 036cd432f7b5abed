"""Which memory format a tensor's strides suggest, as ATen's `suggest_memory_format` reads them
(is_channels_last_strides_2d / _3d), and whether strides are dense in a format: what
convolutions, cat and the operand copies decide on."""
from __future__ import annotations

from phantora_prof.cost.roofline import contiguous_strides


def strides_like_channels_last(shape: tuple, stride: tuple) -> bool:
    """ATen's is_channels_last_strides_2d / _3d (what `suggest_memory_format` reads): the strides
    of size-1 dims count, so a 1x1 convolution weight made channels-last ((64, 1, 64, 64) for
    (256, 64, 1, 1)) suggests channels-last although it is also contiguous, and a contiguous one
    ((64, 1, 1, 1)) does not."""
    if len(shape) == 4:
        order = (1, 3, 2, 0)
    elif len(shape) == 5:
        order = (1, 4, 3, 2, 0)
    else:
        return False
    if stride[1] == 0:
        return False
    lowest = 0
    for d in order:
        if shape[d] == 0 or stride[d] < lowest:
            return False
        if d == 0 and lowest == stride[1]:
            return False  # ambiguous (N, 1, 1, 1): NCHW, as ATen falls back
        lowest = stride[d] * (shape[d] if shape[d] > 1 else 1)
    return True


def suggested_format(shape: tuple, stride: tuple) -> str:
    """"cl" or "c": `suggest_memory_format` of a tensor of these sizes and strides."""
    return "cl" if len(shape) in (4, 5) and strides_like_channels_last(shape, stride) else "c"


def format_order(ndim: int, fmt: str) -> tuple[int, ...]:
    """The dims of memory format `fmt` from outermost to innermost ("c": contiguous, "cl":
    channels-last / -3d: the batch, the spatial dims, then the channels)."""
    return tuple(range(ndim)) if fmt == "c" else (0,) + tuple(range(2, ndim)) + (1,)


def dense_in(shape: tuple, stride: tuple, fmt: str) -> bool:
    """Whether strides are those of a dense tensor in memory format `fmt`; size-1 dims' strides
    do not matter."""
    order = format_order(len(shape), fmt)
    return contiguous_strides(tuple(shape[i] for i in order), tuple(stride[i] for i in order))


def dense_strides(shape: tuple, fmt: str = "c") -> tuple[int, ...]:
    """The strides of a tensor of `shape` dense in memory format `fmt`, as `contiguous(format)`
    or a fresh allocation in that format lays it out."""
    stride = [0] * len(shape)
    expected = 1
    for i in reversed(format_order(len(shape), fmt)):
        stride[i] = expected
        expected *= max(1, shape[i])
    return tuple(stride)
