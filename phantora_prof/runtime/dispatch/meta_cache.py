"""Output metadata of ops that make fresh tensors, remembered per input signature (issue #18).

A training step repeats the same op signatures every layer and every step; running an op's
meta kernel (Python decompositions for many: ~270 us for an addmm or a layer norm backward)
each time was the largest single cost of a captured op. For the ops in `FRESH_OUTPUT_OPS`
(outputs are new tensors, never views of or writes to an input) the outputs' shapes, strides
and dtypes depend only on the inputs' shapes, strides, dtypes and the other arguments, so
they are computed once per signature and made again with `empty_strided` on the meta device.
"""
from __future__ import annotations

import os
from typing import Any

import torch

aten = torch.ops.aten

FRESH_OUTPUT_OPS = frozenset(getattr(aten, name).default if "." not in name else
                             getattr(getattr(aten, name.split(".")[0]), name.split(".")[1]) for name in (
    "mm", "addmm", "bmm", "baddbmm", "add.Tensor", "mul.Tensor", "sub.Tensor", "div.Tensor", "gelu",
    "gelu_backward", "silu", "silu_backward", "relu", "threshold_backward", "native_layer_norm",
    "native_layer_norm_backward", "sum.dim_IntList", "_to_copy", "clone", "_softmax", "_softmax_backward_data",
    "_log_softmax", "_log_softmax_backward_data", "embedding", "embedding_dense_backward", "ones_like",
    "zeros_like", "empty_like", "pow.Tensor_Scalar", "mean.dim", "rsqrt", "neg", "exp", "tanh", "sigmoid",
))

ENV_DISABLE = "PHANTORA_NO_META_CACHE"  # "1": run every meta kernel (A/B in tests/bench_runtime.py)
_LIMIT = 1 << 16  # signatures kept (a few MB); the table starts over when full


def enabled() -> bool:
    return os.environ.get(ENV_DISABLE, "") in ("", "0")


class _Uncacheable(Exception):
    pass


def _arg_key(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return ("T", tuple(a.shape), a.stride(), a.dtype)
    if isinstance(a, (list, tuple)):
        return tuple(_arg_key(b) for b in a)
    if a is None or isinstance(a, (bool, int, float, str, torch.dtype, torch.memory_format, torch.layout)):
        return a
    raise _Uncacheable


def _out_meta(r: Any) -> Any:
    if isinstance(r, torch.Tensor):
        if r.storage_offset():
            raise _Uncacheable  # not a fresh tensor after all: its meta kernel runs every time
        return (tuple(r.shape), r.stride(), r.dtype)
    if r is None:
        return None
    if isinstance(r, (list, tuple)):
        return (type(r), tuple(_out_meta(t) for t in r))
    raise _Uncacheable


class MetaCache:
    def __init__(self) -> None:
        self._table: dict = {}
        self.hits = 0
        self.misses = 0

    def key(self, func: Any, args: tuple, kwargs: dict) -> Any | None:
        """The signature of a call, or None when some argument cannot be part of one."""
        try:
            return (func, _arg_key(args), tuple((k, _arg_key(v)) for k, v in kwargs.items()) if kwargs else ())
        except _Uncacheable:
            return None

    def outputs(self, key: Any) -> Any | None:
        """Meta tensors like the remembered outputs of `key`, or None (not seen yet)."""
        meta = self._table.get(key)
        if meta is None:
            self.misses += 1
            return None
        self.hits += 1
        return _make(meta)

    def remember(self, key: Any, result: Any) -> None:
        try:
            meta = _out_meta(result)
        except _Uncacheable:
            return
        if len(self._table) >= _LIMIT:
            self._table.clear()
        self._table[key] = meta


def _make(meta: Any) -> Any:
    if meta is None:
        return None
    if isinstance(meta[0], type):
        kind, items = meta
        return kind(_make(m) for m in items)
    shape, stride, dtype = meta
    return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
