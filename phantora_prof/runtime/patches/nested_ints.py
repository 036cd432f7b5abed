"""Jagged nested tensors (`torch.nested`, layout=torch.jagged) over the simulated GPU's tensors.

A jagged tensor's ragged dimension is a "nested int" tied to its offsets tensor
(`torch.nested._internal.nested_tensor.get_tensor_symint`). For a real tensor torch makes a
plain one (a `NestedIntNode` kept per tensor); for a FakeTensor it asks the tensor's
FakeTensorMode for a *symbolic* one, which only a mode that is tracing (entered, with a
ShapeEnv: Dynamo's) can make. The simulated GPU's tensors are FakeTensors of a static mode
that the program never enters, so `torch.nested.nested_tensor(..., device="cuda",
layout=torch.jagged)` stopped with "should only be called while FakeTensorMode is active".

Here a FakeTensor whose mode has no ShapeEnv gets the plain nested int a real tensor of a
CUDA run gets (the same registry, so two jagged tensors over one offsets tensor share their
ragged size as on the GPU); a tracing mode's tensors keep torch's symbolic path.
"""
from __future__ import annotations

import functools
import logging
from typing import Any

from phantora_prof.runtime.patches.after_import import when_imported

log = logging.getLogger(__name__)

MODULE = "torch.nested._internal.nested_tensor"


def install() -> None:
    when_imported(MODULE, _patch)


def _patch(module: Any) -> None:
    orig = getattr(module, "get_tensor_symint", None)
    registry = getattr(module, "_tensor_symint_registry", None)
    if orig is None or registry is None or getattr(orig, "_phantora_plain", False):
        return  # another torch's layout, or already patched
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.nested._internal.nested_int import NestedIntNode

    @functools.wraps(orig)
    def get_tensor_symint(tensor, *, coeff=1):
        if isinstance(tensor, FakeTensor) and tensor.fake_mode.shape_env is None:
            symint = registry.get(tensor)
            if symint is None:
                symint = torch.SymInt(NestedIntNode(module._tensor_id_counter, 1))
                module._tensor_id_counter += 1
                registry[tensor] = symint
            return symint * coeff
        return orig(tensor, coeff=coeff)

    get_tensor_symint._phantora_plain = True  # type: ignore[attr-defined]
    module.get_tensor_symint = get_tensor_symint
    log.debug("jagged nested tensors: plain nested ints for the simulated GPU's tensors")
