"""CUDA-key kernels for reads that C++ makes with the Python dispatch key switched off.

Some C++ paths exclude the Python dispatch key before they touch a tensor, so neither the
capture mode nor FakeTensor sees the op and it goes straight to the CUDA backend kernel,
which a CPU-only torch build does not have. The common one: `torch.tensor([t0, t1, ...])`
over 1-element CUDA tensors (e.g. per-tensor gradient norms gathered into one tensor) calls
`.item()` on each element that way. On a GPU each is a D2H copy and a sync; here the same
read goes to the capture mode's scalar read (a simulated copy + sync and a placeholder).

Registered only where torch has no CUDA kernel of its own (CPU builds).
"""
from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger(__name__)

_LIBRARY: Any = None  # keeps the registrations alive


def install(mode: Any) -> None:
    """Route CUDA-key `_local_scalar_dense` to `mode._scalar_read` (see the module docstring)."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    op = "aten::_local_scalar_dense"
    if torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"):
        return  # a CUDA build: its own kernel stays (the fake guard is not loaded there)
    lib = torch.library.Library("aten", "IMPL")

    def local_scalar_dense(t: torch.Tensor):
        return mode._scalar_read(t)

    lib.impl("_local_scalar_dense", local_scalar_dense, "CUDA")
    _LIBRARY = lib
    log.debug("registered a CUDA-key %s for reads with the Python key excluded", op)
