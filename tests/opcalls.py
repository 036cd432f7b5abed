"""Captured op calls built by hand for the cost-model tests (shapes, strides, dtypes; no torch)."""
from __future__ import annotations

from phantora_prof.protocol import OpCall, OpKind, TensorArg


def T(shape, dtype="float32", device=0, pinned=False, stride=None) -> TensorArg:
    """A tensor argument, contiguous unless `stride` is given."""
    shape = tuple(shape)
    if stride is None:
        st, acc = [], 1
        for s in reversed(shape):
            st.append(acc)
            acc *= s
        stride = tuple(reversed(st))
    return TensorArg(shape, tuple(stride), dtype, device, pinned)


def call(name, args, outs=(), kind=OpKind.COMPUTE, kwargs=None) -> OpCall:
    return OpCall(0, 1, name, tuple(args), kwargs or {}, tuple(outs), 0, 0, 0, 7, 0, kind)


def total(kernels) -> int:
    return sum(k.duration_ns for k in kernels)
