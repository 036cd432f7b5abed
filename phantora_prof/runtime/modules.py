"""Patches to torch.nn and friends that moving a model to a fake device needs.

- `nn.Module._apply` (behind .to/.cuda/.half): converting a real CPU parameter to a fake
  CUDA tensor cannot reuse the Parameter object (different tensor types), so torch makes a
  new Parameter per module, which unties tied weights (GPT's embedding and LM head:
  124,475,904 parameters would become 163,109,376). We convert each distinct tensor once
  and put the same new Parameter back everywhere the old one was.
- `torch.compile`: runs the function eagerly (with one warning) until fusion is modelled.
"""
from __future__ import annotations

import functools
import logging
import threading
import warnings
from typing import Any, Callable

import torch
from torch import nn

log = logging.getLogger(__name__)
_tls = threading.local()


def _patched_apply(orig: Callable) -> Callable:
    @functools.wraps(orig)
    def _apply(self: nn.Module, fn: Callable, recurse: bool = True):
        if getattr(_tls, "active", False):
            return orig(self, fn, recurse)
        # Remember where each distinct parameter / buffer lives before conversion.
        places: dict[int, list[tuple[nn.Module, str, str]]] = {}
        modules = list(self.modules()) if recurse else [self]
        for m in modules:
            for key, p in m._parameters.items():
                if p is not None:
                    places.setdefault(id(p), []).append((m, "_parameters", key))
            for key, b in m._buffers.items():
                if b is not None:
                    places.setdefault(id(b), []).append((m, "_buffers", key))
        memo: dict[int, Any] = {}

        def once(t):
            r = memo.get(id(t))
            if r is None:
                r = fn(t)
                memo[id(t)] = (r, t)  # keep t alive so its id stays unique
                return r
            return r[0]

        _tls.active = True
        try:
            result = orig(self, once, recurse)
        finally:
            _tls.active = False
        for occurrences in places.values():
            if len(occurrences) < 2:
                continue
            m0, d0, k0 = occurrences[0]
            first = getattr(m0, d0)[k0]
            for m, d, k in occurrences[1:]:
                getattr(m, d)[k] = first
        return result

    return _apply


def _eager_compile(model: Any = None, **kwargs: Any):
    if not getattr(_eager_compile, "warned", False):
        warnings.warn("phantora-prof: torch.compile runs eagerly under simulation (kernel fusion is not "
                      "modelled yet), so simulated times are those of the eager model", stacklevel=2)
        _eager_compile.warned = True
    if model is None:
        return lambda m: m
    return model


def _record_stream(self: torch.Tensor, stream: Any) -> None:
    """Tensor.record_stream with a simulated stream: the allocator model keeps the block from
    being reused by another stream until the host next synchronizes."""
    from phantora_prof.runtime import memory

    if self.device.type == "cuda":
        memory.record_stream(self, stream)


def install() -> None:
    nn.Module._apply = _patched_apply(nn.Module._apply)
    torch.Tensor.record_stream = _record_stream
    torch.compile = _eager_compile
