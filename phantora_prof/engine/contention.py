"""Contention on one rank's GPU and links: what NCCL kernels take from compute, and which
collectives are in flight at once.

1. **NCCL kernels hold SMs.** An NCCL kernel runs one CTA per channel (24 for collectives, 16
   for send/recv on the measured H200s: 544/640 threads, 96 registers, 101 KiB of shared
   memory each). From the moment its stream reaches it (while it waits for its peers too) those
   SMs are taken: a GEMM's CTA (384 threads x 168 registers, 208 KiB of shared memory) does not
   fit beside one, so GEMMs lose the SMs and, as their grids are sized to the GPU, often run a
   second partial wave. A kernel on another stream of the same GPU runs slower by

       factor = 1 + slowdown[category] * min(1, C / num_sms)

   while NCCL CTAs are resident on C SMs (several NCCL kernels add up). The slowdown per kernel
   category (the categories of ``phantora-prof diff``; the GPU profile's contention_slowdown)
   is measured on the real 2 x H200 DDP and
   FSDP traces (tests/data/real/h200x2/traces; ``phantora-prof calibrate contention``): the same
   kernel (same op and shapes) fully overlapped by an NCCL kernel vs not overlapped, with 24
   of 132 SMs held: GEMM x1.60, elementwise x1.16, attention x1.14 (3 samples),
   normalization x1.02, reduction x1.01. A kernel's work is integrated over time at the rate
   1 / factor, so partial overlaps count pro rata. Copies (copy engines) are not slowed.

   Approximations. Only NCCL kernels known when a kernel is scheduled slow it: the engine
   times a kernel when its launch arrives, and a collective is known once it is resolved,
   which is always before any later launch of its members (their queues stop at it). A kernel
   launched before a collective that starts while the kernel still runs (on another stream)
   is not slowed; ``missed_ns`` counts that overlap. NCCL kernels themselves are not slowed by
   compute (memory-bound kernels take HBM bandwidth from NCCL on real GPUs): the real traces
   cannot calibrate it (an NCCL kernel's time there is mostly waiting for the peer) and the
   engine fixes a collective's end when it resolves, before the compute that will overlap it
   is known.

2. **Collectives in flight share links.** Each rank keeps the collectives put on its timeline
   (``InFlight``); the coordinator times a new collective together with those of its members'
   collectives still running when it starts (netsim's ``simulate_collectives``), so a TP
   all-reduce next to a DP reduce-scatter gets its share of the NVLink ports and NICs. The set
   is a function of the members' call sequences only (a member's queue stops at each
   collective until it is resolved), so runs stay reproducible. The earlier collective keeps
   the end it was given; the later one absorbs the contention.
"""
from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from tracing.diff.categories import categorize


@lru_cache(maxsize=1 << 14)
def kernel_category(kernel_name: str, op_name: str) -> str:
    """The kernel's category (``phantora-prof diff``'s), memoized: asked for every kernel the
    engine times, of a few hundred (kernel, op) pairs that recur at every step (issue #18)."""
    return categorize("kernel", kernel_name, op_name, False)


@dataclass
class _Device:
    nccl: list = field(default_factory=list)      # (start, end, ctas), sorted by start
    compute: list = field(default_factory=list)   # (end, start) of kernels timed, for missed_ns


class GpuContention:
    """NCCL kernels resident on one rank's GPUs, and the stretching of compute kernels by them."""

    def __init__(self, num_sms: int, slowdown: Mapping[str, float], collective_ctas: int, p2p_ctas: int):
        """`slowdown`: per kernel category, k of the factor 1 + k * C / num_sms while every SM
        holds an NCCL CTA; `collective_ctas` / `p2p_ctas`: the CTAs (channels) an NCCL
        collective / send-recv kernel runs on (the GPU profile's contention_slowdown,
        nccl_ctas, nccl_p2p_ctas)."""
        self.num_sms = max(1, int(num_sms))
        self.slowdown = dict(slowdown)
        self.collective_ctas = collective_ctas
        self.p2p_ctas = p2p_ctas
        self._dev: dict[int, _Device] = {}
        self.slowed_ns = 0   # GPU time added to compute kernels by NCCL kernels
        self.missed_ns = 0   # overlap with NCCL kernels of compute kernels timed before them

    def nccl_ctas(self, op: str, nranks: int) -> int:
        """CTAs (and so SMs) an NCCL kernel for ``op`` holds; 0 when NCCL launches no kernel."""
        if op in ("send_recv", "all_to_all"):
            return self.p2p_ctas
        return self.collective_ctas if nranks > 1 else 0

    def _d(self, device: int) -> _Device:
        d = self._dev.get(device)
        if d is None:
            d = self._dev[device] = _Device()
        return d

    def add_nccl(self, device: int, start_ns: int, end_ns: int, ctas: int) -> None:
        """An NCCL kernel holds ``ctas`` SMs of ``device`` over [start_ns, end_ns)."""
        if ctas <= 0 or end_ns <= start_ns:
            return
        d = self._d(device)
        bisect.insort(d.nccl, (start_ns, end_ns, ctas))
        for end, start in d.compute:
            self.missed_ns += max(0, min(end, end_ns) - max(start, start_ns))

    def forget_before(self, device: int, t_ns: int) -> None:
        """Drop what ends before ``t_ns``: no kernel launched from now on can start earlier."""
        d = self._dev.get(device)
        if d is None:
            return
        if d.nccl and d.nccl[0][0] < t_ns:
            d.nccl = [iv for iv in d.nccl if iv[1] > t_ns]
        if d.compute and len(d.compute) > 64:
            d.compute = [c for c in d.compute if c[0] > t_ns]

    def finish(self, device: int, category: str, start_ns: int, work_ns: int) -> int:
        """End of a kernel of ``category`` that starts at ``start_ns`` and needs ``work_ns`` alone."""
        d = self._dev.get(device)
        k = self.slowdown.get(category, 0.0)
        end = start_ns + work_ns
        if d is None:
            return end
        if d.nccl and k > 0 and work_ns > 0:
            end = self._integrate(d.nccl, k, start_ns, work_ns)
            self.slowed_ns += end - (start_ns + work_ns)
        d.compute.append((end, start_ns))
        return end

    def _integrate(self, ivs: list, k: float, start: int, work: int) -> int:
        # breakpoints of the resident-CTA count from `start` on
        points = {start}
        for s, e, _ in ivs:
            if e > start:
                points.add(max(s, start))
                points.add(e)
        times = sorted(points)
        t, left = start, float(work)
        for i, t0 in enumerate(times):
            t1 = times[i + 1] if i + 1 < len(times) else None
            ctas = sum(c for s, e, c in ivs if s <= t0 < e)
            rate = 1.0 / (1.0 + k * min(1.0, ctas / self.num_sms))
            if t1 is None or left <= (t1 - t0) * rate:
                return int(round(t0 + left / rate))
            left -= (t1 - t0) * rate
            t = t1
        return int(round(t + left))  # pragma: no cover - the last segment always returns


# ---- collectives in flight, for link sharing ----

@dataclass(frozen=True)
class InFlightCollective:
    key: tuple            # (group, seq)
    op: str
    ranks: tuple
    nbytes: int
    root: int
    peer: int
    start_ns: int         # transfer start (all members)
    end_ns: int


class InFlight:
    """The collectives on one rank's timeline that may still be running."""

    def __init__(self) -> None:
        self._items: list[InFlightCollective] = []

    def add(self, item: InFlightCollective) -> None:
        self._items.append(item)

    def running_after(self, t_ns: int, horizon_ns: int) -> list[InFlightCollective]:
        """Those still running at or after ``t_ns``; forgets those that ended before ``horizon_ns``
        (this rank's launch time now: none of its later collectives can start before it)."""
        if self._items and len(self._items) > 16:
            self._items = [c for c in self._items if c.end_ns > horizon_ns]
        return [c for c in self._items if c.end_ns > t_ns]


def background(timelines: list[Any], start_ns: int, horizons: list[int]) -> list[InFlightCollective]:
    """Collectives of these members still running at ``start_ns``, each once, in a fixed order."""
    seen: dict = {}
    for tl, h in zip(timelines, horizons):
        fl = getattr(tl, "in_flight", None)
        if fl is None:
            continue
        for c in fl.running_after(start_ns, h):
            seen.setdefault(c.key, c)
    return [seen[k] for k in sorted(seen, key=lambda k: (seen[k].start_ns, str(k[0]), k[1]))]
