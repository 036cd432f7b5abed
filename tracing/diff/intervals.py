"""Interval arithmetic on host / GPU time spans ((start, end) pairs in ns), shared by the
diff's GPU figures (analyze.py: busy unions, communication overlap) and host figures (host.py:
busy unions, the script thread's gaps beside other threads)."""
from __future__ import annotations

from bisect import bisect_right

__all__ = ["merge", "measure", "overlap", "gaps"]


def merge(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of `iv` as sorted disjoint intervals (sorts `iv` in place)."""
    iv.sort()
    out: list[tuple[int, int]] = []
    for s, e in iv:
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def measure(merged: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in merged)


def overlap(merged: list[tuple[int, int]], b_starts: list[int], b_ends: list[int]) -> int:
    """Length of (union `merged`) ∩ (union given as sorted disjoint b_starts/b_ends)."""
    total = 0
    for s, e in merged:
        j = max(0, bisect_right(b_starts, s) - 1)
        while j < len(b_starts) and b_starts[j] < e:
            lo = max(s, b_starts[j])
            hi = min(e, b_ends[j])
            if hi > lo:
                total += hi - lo
            j += 1
    return total


def gaps(merged: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """[lo, hi) less the merged intervals."""
    out, t = [], lo
    for s, e in merged:
        if s > t:
            out.append((t, min(s, hi)))
        t = max(t, e)
        if t >= hi:
            break
    if t < hi:
        out.append((t, hi))
    return [(s, e) for s, e in out if e > s]
