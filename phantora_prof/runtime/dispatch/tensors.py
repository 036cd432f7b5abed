"""Walking an op's arguments or outputs for the tensors in them (one walker for the runtime)."""
from __future__ import annotations

from typing import Any, Iterator

import torch


def tensors_in(x: Any) -> Iterator[torch.Tensor]:
    """The tensors in `x`: a tensor, or lists, tuples and dicts of them (nested), in order."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from tensors_in(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from tensors_in(y)
