"""User ranges: torch.cuda.nvtx ranges and torch.profiler.record_function become
`user_annotation` spans on the host and `gpu_user_annotation` spans on the GPU."""
from __future__ import annotations

import threading
from typing import Callable

from phantora_prof.protocol import Annotation
from phantora_prof.runtime.process import state as _state

_stacks = threading.local()

# Called when a range opens or closes off the main thread: the capture mode closes the
# autograd node span it has open there, so node spans and ranges nest instead of overlapping.
_boundary_hook: Callable[[], None] | None = None


def set_boundary_hook(hook: Callable[[], None] | None) -> None:
    global _boundary_hook
    _boundary_hook = hook


def _boundary(st) -> None:
    if _boundary_hook is not None and st.tid() != 0:
        _boundary_hook()


def _stack() -> list:
    s = getattr(_stacks, "s", None)
    if s is None:
        s = _stacks.s = []
    return s


def _flushed() -> set:
    """ids of this thread's open ranges already recorded by a profiler window's end (flush_open)."""
    f = getattr(_stacks, "flushed", None)
    if f is None:
        f = _stacks.flushed = set()
    return f


def _record(st, entry: tuple) -> None:
    """Send a range (name, start, external id) ending now."""
    name, start, ext = entry
    st.channel.send(Annotation(st.config.rank, name, st.tid(), start, st.clock.now_ns, ext))


def _send(st, entry: tuple) -> None:
    """Record a closed range, unless a profiler window's end already recorded it."""
    flushed = _flushed()
    if id(entry) in flushed:
        flushed.discard(id(entry))
        return
    _record(st, entry)


# Host cost of entering/leaving a range (record_function / nvtx push+pop on the real host).
RANGE_NS = 1_000


def range_push(name: str) -> int:
    st = _state.get()
    _boundary(st)
    s = _stack()
    s.append((name, st.clock.now_ns, st.next_external_id()))
    st.clock.advance(RANGE_NS)
    return len(s) - 1


def range_pop() -> int:
    st = _state.get()
    s = _stack()
    if not s:
        return -1
    _boundary(st)
    entry = s.pop()
    st.clock.advance(RANGE_NS)
    _send(st, entry)
    return len(s)


def range_start(name: str) -> tuple:
    """Open a range and return its handle, for ranges that end by handle rather than LIFO.

    torch's record_function ends its own range, not the innermost one: `prof.step()` called from
    inside another range (an optimizer step post-hook runs inside `Optimizer.step#AdamW.step`)
    closes ProfilerStep#N-1 and opens ProfilerStep#N there, and the ranges overlap as in Kineto."""
    range_push(name)
    return _stack()[-1]


def range_end(handle: tuple) -> None:
    """Close the range `handle` (from range_start) wherever it sits in this thread's stack."""
    st = _state.get()
    s = _stack()
    for i in range(len(s) - 1, -1, -1):
        if s[i] is handle:
            break
    else:
        range_pop()  # opened on another thread: close this thread's innermost, as before
        return
    _boundary(st)
    entry = s.pop(i)
    st.clock.advance(RANGE_NS)
    _send(st, entry)


def flush_open() -> None:
    """A profiler window ends inside ranges this thread has open: record them now, ending here.

    Kineto keeps a range that is still open when a cycle stops: the real FSDP2 / TP profiles of
    tests/data/real/h200x2, whose profiler steps from an optimizer post-hook (capture_real.py),
    hold the last `Optimizer.step#AdamW.step` around the stop (ending after the trace's export,
    which runs inside it). Here such a range ends at the window's end; when it closes later it is
    not sent again. Until session 39 it was dropped."""
    st = _state.get()
    flushed = _flushed()
    for entry in _stack():
        if id(entry) not in flushed:
            _record(st, entry)
            flushed.add(id(entry))
