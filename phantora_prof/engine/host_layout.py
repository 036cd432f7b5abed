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


def _order(s: Span) -> tuple:
    """A host span's place in the walk: its simulated start, then its begin order (`_key`)."""
    k = s.key
    if k is None:
        k = _key(s)
    return (s.ts_ns, k)


def _layout_thread(items: list[Span]) -> None:
    items.sort(key=_order)
    # The walk meets the begin and end events in the order they happened and draws each one as it
    # meets it (`_draw`'s rule, inline: this loop runs twice per host span of the trace). A span's
    # simulated times are read only before its end is drawn, so drawing in place changes nothing.
    stack: list[Span] = []
    keys_on_stack: dict[Any, int] = {}
    starts: dict[int, int] = {}  # id(span) -> its drawn begin
    prev: int | None = None  # the last drawn event's time

    def pop() -> None:
        """Close the span on top of the stack and draw its end."""
        x = stack.pop()
        k = x.key
        if k is not None:
            n = keys_on_stack.get(k, 0) - 1
            if n > 0:
                keys_on_stack[k] = n
            else:
                keys_on_stack.pop(k, None)
        draw_end(x)

    def draw_end(x: Span) -> None:
        nonlocal prev
        t = x.ts_ns + x.dur_ns
        if prev is None or t > prev:
            prev = t
        elif prev - _MAX_SHIFT_NS < t:
            t = prev = prev + 1
        start = starts.pop(id(x))
        x.ts_ns = start
        x.dur_ns = t - start

    for s in items:
        while stack and stack[-1].cat in _CALLS:  # runtime calls are leaves
            pop()
        parent = s.parent
        ts = s.ts_ns
        if parent is not None and parent in keys_on_stack:
            while stack and stack[-1].key != parent:
                pop()
        elif parent == TOP:  # no recorded call around it: only annotations (record_function) may be
            while stack and (stack[-1].parent is not None or _ends_before(stack[-1], s)):
                pop()
        else:
            later = s.dur_ns > 0
            while stack:  # _ends_before(stack[-1], s), inline
                top = stack[-1]
                top_end = top.ts_ns + top.dur_ns
                if top_end < ts or (top_end == ts and later):
                    pop()
                else:
                    break
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
                        pop()
                    pop()
                    continue
                stack.remove(x)
                if x.key is not None:
                    keys_on_stack.pop(x.key, None)
                draw_end(x)
        stack.append(s)
        k = s.key
        if k is not None:
            keys_on_stack[k] = keys_on_stack.get(k, 0) + 1
        if prev is None or ts > prev:
            prev = ts
        elif prev - _MAX_SHIFT_NS < ts:
            ts = prev = prev + 1
        starts[id(s)] = ts
    while stack:
        pop()
    _close_around(items)


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
