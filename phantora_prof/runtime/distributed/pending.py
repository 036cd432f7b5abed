"""Outputs of collectives nobody has waited for yet (kept light: the capture mode
imports this on every run, distributed or not; no torch.distributed here).

NCCL semantics: a collective runs on its communicator's stream; work on another stream that
uses its output must wait for it (`Work.wait()`, or the future/`wait_tensor` frameworks use).
Here the first op that reads such an output makes its stream wait for the collective.
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any

from phantora_prof.runtime.dispatch.tensors import tensors_in

# token -> (group, seq) of the collective that writes the storage holding the token. The token
# is an attribute of the storage object (torch keeps one Python object per live storage), so
# it lives and dies with the storage. (Keyed by id(storage), a storage freed while pending left
# its entry behind, and a later storage whose object happened to get the same address "read"
# it: waits on old collectives at moments that depended on Python's memory reuse, which made
# FSDP2 x TP runs differ between two identical runs.)
PENDING: dict[int, tuple[str, int]] = {}
_ATTR = "_phantora_pending"
_tokens = itertools.count(1)


def _storage(t: Any) -> Any:
    try:
        return t.untyped_storage()
    except Exception:  # noqa: BLE001
        return None


def mark(t: Any, key: tuple[str, int]) -> None:
    """`t`'s storage is written by collective `key`, which nobody has waited for yet."""
    s = _storage(t)
    if s is None:
        return
    token = getattr(s, _ATTR, None)
    if token is None:
        token = next(_tokens)
        setattr(s, _ATTR, token)
        weakref.finalize(s, PENDING.pop, token, None)  # a storage freed unread: forget it
    PENDING[token] = key


def pending_of(t: Any) -> tuple[str, int] | None:
    s = _storage(t)
    token = getattr(s, _ATTR, None) if s is not None else None
    return PENDING.get(token) if token is not None else None


def clear(t: Any) -> tuple[str, int] | None:
    """Forget (and return) the collective `t`'s storage waits for."""
    s = _storage(t)
    token = getattr(s, _ATTR, None) if s is not None else None
    return PENDING.pop(token, None) if token is not None else None


def consume(args: Any, stream: int, device: int) -> None:
    """Before an op on `stream` that reads `args`: wait for pending collectives among them."""
    from phantora_prof.protocol import CollectiveWait
    from phantora_prof.runtime.process import state as _state

    for t in tensors_in(args):
        if t.device.type != "cuda":
            continue
        hit = clear(t)
        if hit is not None:
            st = _state.get()
            st.channel.send(CollectiveWait(st.config.rank, hit[0], hit[1], stream, device, st.clock.now_ns))
