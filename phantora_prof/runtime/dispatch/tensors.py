"""Walking an op's arguments or outputs for the tensors in them (one walker for the runtime)."""
from __future__ import annotations

from typing import Any

import torch

_Tensor = torch.Tensor


def tensors_in(x: Any) -> list[torch.Tensor]:
    """The tensors in `x`: a tensor, or lists, tuples and dicts of them (nested), in order.

    A list, not a generator: the capture mode walks every op's arguments and outputs several
    times, most of them a tensor or a flat tuple, where a generator's frames cost more than
    the walk."""
    if isinstance(x, _Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        out = []
        for y in x:
            if isinstance(y, _Tensor):
                out.append(y)
            elif isinstance(y, (list, tuple, dict)):
                out.extend(tensors_in(y))
        return out
    if isinstance(x, dict):
        return tensors_in(tuple(x.values()))
    return []
