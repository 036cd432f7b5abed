"""DTensor's strided-shard arithmetic, computed once per argument set, its host time replayed.

torch's `_StridedShard.local_shard_size_and_offset` finds a rank's share of a tensor
dimension by materialising `arange(size)`, splitting it into split_factor x num_chunks views
and concatenating one piece per chunk: O(mesh size) CPU ops per call. DTensor's RNG tracker
calls it twice for every random init op of a parameter sharded by FSDP2 over TP
(`_calc_first_shard_size`), so a 1,024-rank TP 8 x FSDP 64 torchtitan init runs ~1,000 CPU
ops per parameter init on every rank. A real rank pays ~5 us for each; a simulated one pays
the capture path (~50 us), which made that init take minutes of wall time (issue #17).

The function is pure (integers in, integers out). Its result is kept per argument set, and
a repeated call advances the simulated clock by exactly what the first call was charged (its
CPU ops and its counted Python), so simulated time is the same as without the memo. Only
where no host op record is written (no trace, no report, no torch.profiler session): a
trace shows every op a real profile shows.
"""
from __future__ import annotations

import functools
import logging
from typing import Any

from phantora_prof.runtime.patches.after_import import when_imported
from phantora_prof.runtime.process import state as _state

log = logging.getLogger(__name__)

MODULE = "torch.distributed.tensor.placement_types"

# set by the torch.profiler patch when the script starts a session: from then on ops are recorded
_records_wanted = False


def records_wanted() -> None:
    """A torch.profiler session started: host ops are recorded from now on, so no call is
    answered from the memo (each must run its ops)."""
    global _records_wanted
    _records_wanted = True


def install() -> None:
    st = _state.get()
    if st.config.host_records:
        return  # a trace or report shows every op: nothing to save
    when_imported(MODULE, _patch)


def _patch(module: Any) -> None:
    cls = getattr(module, "_StridedShard", None)
    orig = getattr(cls, "local_shard_size_and_offset", None) if cls is not None else None
    if orig is None or getattr(orig, "_phantora_memo", False):
        return  # an older torch computes it without tensors, or already patched
    cache: dict[tuple, tuple[Any, int]] = {}

    @functools.wraps(orig)
    def local_shard_size_and_offset(self, curr_local_size, num_chunks, rank, *args, **kwargs):
        plain = type(curr_local_size) is int and type(num_chunks) is int and type(rank) is int
        if not plain or _records_wanted:
            return _run_counted(orig, self, curr_local_size, num_chunks, rank, *args, **kwargs)
        key = (self, curr_local_size, num_chunks, rank, args, tuple(sorted(kwargs.items())))
        st = _state.get()
        hit = cache.get(key)
        if hit is not None:
            result, cost_ns = hit
            st.clock.advance(cost_ns)
            return _copy(result)
        start = st.clock.now_ns  # the program's pending Python charged before
        result = _run_counted(orig, self, curr_local_size, num_chunks, rank, *args, **kwargs)
        cost_ns = st.clock.now_ns - start
        cache[key] = (_copy(result), cost_ns)
        return result

    local_shard_size_and_offset._phantora_memo = True
    cls.local_shard_size_and_offset = local_shard_size_and_offset
    log.debug("memoising %s._StridedShard.local_shard_size_and_offset", MODULE)


def _run_counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call torch's function as the program's code: its Python is counted as host time."""
    from phantora_prof.runtime.host import pyhost

    return pyhost.run_as_program(_state.get().pyhost, fn, *args, **kwargs)


def _copy(result: Any) -> Any:
    size, offsets = result
    return (size, list(offsets)) if isinstance(offsets, list) else result
