"""Pinned (page-locked) host memory on a machine that has none.

A CPU-only torch build refuses `Tensor.pin_memory()`. Pinnedness still matters to the
simulation: a pinned H2D copy with non_blocking=True is asynchronous and runs at ~55 GB/s,
a pageable one blocks the host and runs at a fraction of that. So pinning returns a real
copy of the tensor that we remember as pinned (by its storage), and `is_pinned()` answers
from that record.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch

_pinned_storages: set[int] = set()


def _storage_key(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - tensors without storage are never pinned
        return -1


def mark(t: torch.Tensor) -> torch.Tensor:
    key = _storage_key(t)
    if key > 0:
        _pinned_storages.add(key)
        weakref.finalize(t, _pinned_storages.discard, key)
    return t


def is_marked(t: torch.Tensor) -> bool:
    return bool(_pinned_storages) and _storage_key(t) in _pinned_storages


def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    if self.device.type != "cpu":
        raise RuntimeError(f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")
    if is_marked(self):
        return self
    return mark(self.clone())


def is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    return self.device.type == "cpu" and is_marked(self)


def handle(func, args: tuple, kwargs: dict):
    """Dispatch-level fallbacks for the same two questions."""
    if func is torch.ops.aten._pin_memory.default:
        return pin_memory(args[0])
    return is_pinned(args[0])


def install() -> None:
    torch.Tensor.pin_memory = pin_memory
    torch.Tensor.is_pinned = is_pinned
