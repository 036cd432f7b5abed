"""Pinned (page-locked) host memory on a machine that has none.

Pinnedness matters to the simulation: a pinned H2D copy with non_blocking=True is
asynchronous and runs at ~55 GB/s, a pageable one blocks the host and runs at a fraction of
that. The native fake-CUDA library provides a "pinned" host allocator (ordinary memory
whose blocks it remembers), so `Tensor.pin_memory()`, `torch.empty(..., pin_memory=True)`,
DataLoader(pin_memory=True) and `is_pinned()` work as on a GPU machine; here we only ask.
"""
from __future__ import annotations

import torch


def is_marked(t: torch.Tensor) -> bool:
    """Whether a CPU tensor lives in (simulated) pinned memory."""
    try:
        return bool(t.is_pinned())
    except RuntimeError:
        return False
