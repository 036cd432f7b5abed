"""Draw one thread's host op spans so that every trace reader nests them as they ran.

Simulated host time advances only by modelled costs, so calls that take no modelled time (a
composite op around a captured one, an autograd node with nothing to launch, a CPU op's
children) begin and end at the same instant as their neighbours. Readers (Perfetto, HTA,
`phantora-prof diff`, torch's own tools) nest spans by time alone, longer first, so a
zero-length span followed by a sibling that starts at the same instant lands inside that
sibling, and two spans with the same start and end nest by file order.

The recorder knows the real nesting (parent links and begin order, `Span.key` /
`Span.parent`); this draws the spans with display times that are strictly increasing over
the thread's begin/end events in that order: each event at max(its simulated time, the
previous event's + 1 ns). Within a burst of calls at one instant the shift is a few ns;
nothing else (launches, GPU work, the clock) moves.
"""
from __future__ import annotations

from typing import Any

from tracing.model import Span

_NO_KEY = (float("inf"),)
TOP = ()  # Span.parent of a record that is outermost among the recorded calls of its thread
_MAX_SHIFT_NS = 2_000  # an event this far before the previous one is an overlapping range's end: kept
_CLOSE_NS = 50  # a range ending this little before a call inside it is extended (_close_around)


def _key(s: Span) -> Any:
    if s.key is not None:
        return s.key
    if s.cat in _CALLS:
        return _NO_KEY  # a runtime call comes after the ops that start with it
    ext = s.args.get("External id")
    return (ext, 0) if isinstance(ext, int) else _NO_KEY


_HOST = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
_CALLS = ("cuda_runtime", "cuda_driver")


def layout(spans: list[Span]) -> None:
    """Adjust `ts_ns`/`dur_ns` of the host spans (ops, annotations and the runtime calls among
    them, which are leaves) in place."""
    threads: dict[int, list[Span]] = {}
    for s in spans:
        if not s.on_gpu and s.cat in _HOST:
            threads.setdefault(s.tid, []).append(s)
    for items in threads.values():
        _layout_thread(items)


def _layout_thread(items: list[Span]) -> None:
    items.sort(key=lambda s: (s.ts_ns, _key(s)))
    events: list[tuple[Span, bool]] = []  # (span, is_end) in the order they happened
    stack: list[Span] = []
    keys_on_stack: dict[Any, int] = {}
    for s in items:
        while stack and stack[-1].cat in _CALLS:  # runtime calls are leaves
            _pop(stack, keys_on_stack, events)
        parent = s.parent
        if parent is not None and parent in keys_on_stack:
            while stack and stack[-1].key != parent:
                _pop(stack, keys_on_stack, events)
        elif parent == TOP:  # no recorded call around it: only annotations (record_function) may be
            while stack and (stack[-1].parent is not None or _ends_before(stack[-1], s)):
                _pop(stack, keys_on_stack, events)
        else:
            while stack and _ends_before(stack[-1], s):
                _pop(stack, keys_on_stack, events)
        if len(stack) > 1 and _any_ended(stack, s):
            # ranges that overlap rather than nest (a ProfilerStep#N opened inside an optimizer
            # step's range outlives it, as in Kineto): close those that ended
            done = sorted((x for x in stack if _ends_before(x, s)), key=lambda x: x.ts_ns + x.dur_ns)
            for x in done:
                if x not in stack:
                    continue
                i = stack.index(x)
                above = stack[i + 1:]
                x_end = x.ts_ns + x.dur_ns
                if above and all(a.ts_ns + a.dur_ns - x_end <= _MAX_SHIFT_NS for a in above):
                    # calls inside x that end a few ns after it (clock reads of the range's end and
                    # of its last call's end): they close first, x's end moves past them
                    while stack[-1] is not x:
                        _pop(stack, keys_on_stack, events)
                    _pop(stack, keys_on_stack, events)
                    continue
                stack.remove(x)
                if x.key is not None:
                    keys_on_stack.pop(x.key, None)
                events.append((x, True))
        stack.append(s)
        if s.key is not None:
            keys_on_stack[s.key] = keys_on_stack.get(s.key, 0) + 1
        events.append((s, False))
    while stack:
        _pop(stack, keys_on_stack, events)
    _draw(events)
    _close_around(items)


def _draw(events: list[tuple[Span, bool]]) -> None:
    """Each begin/end event at max(its simulated time, the previous event's + 1 ns) (an end
    more than _MAX_SHIFT_NS before the previous event stays: an overlapping range's)."""
    prev = None
    begin: dict[int, int] = {}
    for s, is_end in events:
        t = s.ts_ns + s.dur_ns if is_end else s.ts_ns
        if prev is None:
            prev = t
        elif prev - _MAX_SHIFT_NS < t <= prev:
            t = prev + 1
            prev = t
        elif t > prev:
            prev = t
        if is_end:
            start = begin.pop(id(s))
            s.ts_ns = start
            s.dur_ns = t - start
        else:
            begin[id(s)] = t


def _close_around(items: list[Span]) -> None:
    """A range whose drawn end falls a few ns before the end of a call inside it ends just after
    that call instead. (Seen with the ranges of replayed CUDA graphs around calls drawn from the
    children table; the cause is not found yet: this keeps the drawn tree a tree.)"""
    order = sorted(items, key=lambda s: (s.ts_ns, -s.dur_ns))
    stack: list[Span] = []
    ends: list[int] = []  # the drawn end of each range on the stack
    for s in order:
        ts = s.ts_ns
        while ends and ends[-1] <= ts:
            stack.pop()
            ends.pop()
        end = ts + s.dur_ns
        if ends and min(ends) < end:  # (most calls end inside every range around them: no loop)
            for i, a_end in enumerate(ends):
                if a_end < end and end - a_end <= _CLOSE_NS:
                    a = stack[i]
                    a.dur_ns = end + 1 - a.ts_ns
                    ends[i] = end + 1
        stack.append(s)
        ends.append(end)


def _any_ended(stack: list[Span], s: Span) -> bool:
    """`_ends_before(x, s)` for some `x` on the stack below its top (one loop, no calls: asked
    for every span of a trace)."""
    ts = s.ts_ns
    later = s.dur_ns > 0
    for i in range(len(stack) - 1):
        x = stack[i]
        end = x.ts_ns + x.dur_ns
        if end < ts or (end == ts and later):
            return True
    return False


def _ends_before(top: Span, s: Span) -> bool:
    """Without a parent link: `s` starts after `top` ends (a zero-length `s` at the instant
    `top` ends is taken to be inside it)."""
    end = top.ts_ns + top.dur_ns
    return end < s.ts_ns or (end == s.ts_ns and s.dur_ns > 0)


def _pop(stack: list[Span], keys: dict, events: list) -> None:
    s = stack.pop()
    if s.key is not None:
        n = keys.get(s.key, 0) - 1
        if n > 0:
            keys[s.key] = n
        else:
            keys.pop(s.key, None)
    events.append((s, True))
