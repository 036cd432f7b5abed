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


# ---- the general path: any op with fresh outputs, remembered from FakeTensorMode's own answer ----

_FRESH: dict = {}


def fresh_outputs(func: Any) -> bool:
    """Whether `func`'s schema makes only new tensors: something returned, no return aliased to
    an input, no argument written (so not in-place, not out=, not a view)."""
    r = _FRESH.get(func)
    if r is None:
        schema = func._schema
        r = _FRESH[func] = bool(schema.returns) and all(ret.alias_info is None for ret in schema.returns) \
            and not any(a.alias_info is not None for a in schema.arguments)
    return r


def _arg_key_dev(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return ("T", tuple(a.shape), a.stride(), a.dtype, a.device, type(a))
    if isinstance(a, (list, tuple)):
        return tuple(_arg_key_dev(b) for b in a)
    if a is None or isinstance(a, (bool, int, float, str, torch.dtype, torch.memory_format, torch.layout,
                                   torch.device)):
        return (type(a), a)  # 1, 1.0 and True are equal as keys: their outputs need not be
    raise _Uncacheable


def _out_meta_dev(r: Any, fake_type: type) -> Any:
    if isinstance(r, torch.Tensor):
        if type(r) is not fake_type or r.device.type != "cuda" or r.storage_offset() \
                or getattr(r, "constant", None) is not None:
            raise _Uncacheable  # a real or constant tensor, a view: FakeTensorMode's path every time
        return ("T", tuple(r.shape), r.stride(), r.dtype, r.device)
    if r is None:
        return None
    if isinstance(r, (bool, int, float)):
        return ("C", r)
    if isinstance(r, (list, tuple)):
        return (type(r), tuple(_out_meta_dev(t, fake_type) for t in r))
    raise _Uncacheable


def _make_dev(meta: Any, wrap: Any) -> Any:
    if meta is None:
        return None
    if isinstance(meta[0], type):
        kind, items = meta
        return kind(_make_dev(m, wrap) for m in items)
    if meta[0] == "C":
        return meta[1]
    _, shape, stride, dtype, device = meta
    return wrap(torch.empty_strided(shape, stride, dtype=dtype, device="meta"), device)


class GeneralCache:
    """Outputs of ops that take FakeTensorMode's general dispatch (no fast path: attention,
    losses, norms of other libraries, ...), remembered per signature from that dispatch's own
    answer. FakeTensorMode caches too, but its hit still costs ~0.3-0.7 ms here (the key over
    every argument, the output rebuilt through its general constructor); a GPT-2 step's two
    dozen cuDNN attention calls cost ~1 ms each.

    Only ops with fresh outputs (`fresh_outputs`) with at least one tensor argument (a factory's
    output depends on the default dtype and device too) are kept, and only answers made of fake
    CUDA tensors (no constants, no views, none twice), Python numbers and None: the signature
    (every tensor's shape, strides, dtype, device and type; every other argument's type and
    value) then fixes them, as it fixes FakeTensorMode's own cache entries."""

    def __init__(self, fake_type: type) -> None:
        self._fake_type = fake_type
        self._table: dict = {}
        self.hits = 0

    def key(self, func: Any, args: tuple, kwargs: dict) -> Any | None:
        if not fresh_outputs(func) or not any(isinstance(a, torch.Tensor) or
                                              (isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor))
                                              for a in (*args, *kwargs.values())):
            return None
        try:
            return (func, _arg_key_dev(args), tuple((k, _arg_key_dev(v)) for k, v in kwargs.items()) if kwargs else ())
        except (_Uncacheable, TypeError):
            return None

    def outputs(self, key: Any, wrap: Any) -> Any | None:
        meta = self._table.get(key)
        if meta is None:
            return None
        self.hits += 1
        return _make_dev(meta, wrap)

    def remember(self, key: Any, out: Any) -> None:
        tensors = [t for t in (out if isinstance(out, (list, tuple)) else (out,)) if isinstance(t, torch.Tensor)]
        if len({id(t) for t in tensors}) != len(tensors):
            return
        try:
            meta = _out_meta_dev(out, self._fake_type)
        except _Uncacheable:
            return
        if len(self._table) >= _LIMIT:
            self._table.clear()
        self._table[key] = meta
