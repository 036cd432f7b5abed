"""Outputs of collectives nobody has waited for yet (kept torch-light: the capture mode
imports this on every run, distributed or not).

NCCL semantics: a collective runs on its communicator's stream; work on another stream that
uses its output must wait for it (`Work.wait()`, or the future/`wait_tensor` frameworks use).
Here the first op that reads such an output makes its stream wait for the collective.
"""
from __future__ import annotations

from typing import Any

# id(storage) -> (group, seq) of the collective that writes it
PENDING: dict[int, tuple[str, int]] = {}


def _tensors(x: Any):
    import torch

    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


def storage_key(t: Any) -> int | None:
    try:
        return id(t.untyped_storage())
    except Exception:  # noqa: BLE001
        return None


def consume(args: Any, stream: int, device: int) -> None:
    """Before an op on `stream` that reads `args`: wait for pending collectives among them."""
    from phantora_prof.protocol import CollectiveWait
    from phantora_prof.runtime import state as _state

    for t in _tensors(args):
        if t.device.type != "cuda":
            continue
        hit = PENDING.pop(storage_key(t), None)
        if hit is not None:
            st = _state.get()
            st.channel.send(CollectiveWait(st.config.rank, hit[0], hit[1], stream, device, st.clock.now_ns))
