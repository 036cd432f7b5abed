"""Event-driven flow-level simulation (numba).

A simulation is a DAG of flows. Each flow has a size, a path (links with weights), an
optional rate cap, an earliest release time, and predecessors: it starts when it has been
released and all its predecessors have finished, plus its own ``delay`` (a latency). While
active, flows share links max-min fairly (:mod:`netsim.maxmin`). Events are flow starts and
flow completions; at each event only the *connected component* of flows that share links
with the flows that started or finished is settled and recomputed (flows elsewhere keep
their rates, which max-min guarantees are unchanged), so concurrent but independent
collectives do not slow each other's bookkeeping.

Exactness: rates are piecewise constant between events, so remaining bytes are updated
exactly (``remaining -= rate * dt``) and completion times are exact up to float64 rounding.
Ties are broken by flow id; nothing depends on dict order, hashing or wall time.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from netsim.maxmin import build_link_flows, progressive_fill

INF = np.inf
# Events closer together than this (ns, relative to the time) are treated as simultaneous.
_TIME_TOL = 1e-9


@njit(cache=True)
def _hpush(hkey, hid, hver, n, key, ident, ver):
    i = n
    hkey[i] = key
    hid[i] = ident
    hver[i] = ver
    while i > 0:
        p = (i - 1) >> 1
        if hkey[p] < hkey[i] or (hkey[p] == hkey[i] and hid[p] <= hid[i]):
            break
        hkey[p], hkey[i] = hkey[i], hkey[p]
        hid[p], hid[i] = hid[i], hid[p]
        hver[p], hver[i] = hver[i], hver[p]
        i = p
    return n + 1


@njit(cache=True)
def _hpop(hkey, hid, hver, n):
    n -= 1
    hkey[0] = hkey[n]
    hid[0] = hid[n]
    hver[0] = hver[n]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= n:
            break
        b = a + 1
        c = a
        if b < n and (hkey[b] < hkey[a] or (hkey[b] == hkey[a] and hid[b] < hid[a])):
            c = b
        if hkey[i] < hkey[c] or (hkey[i] == hkey[c] and hid[i] <= hid[c]):
            break
        hkey[c], hkey[i] = hkey[i], hkey[c]
        hid[c], hid[i] = hid[i], hid[c]
        hver[c], hver[i] = hver[i], hver[c]
        i = c
    return n


@njit(cache=True)
def simulate_dag(link_cap, flow_ptr, flow_link, flow_w, flow_size, flow_cap, flow_release,
                 flow_delay, flow_ndeps, succ_ptr, succ_idx):
    """Run the DAG of flows to completion.

    Returns ``(start, end, n_events, n_recomputes)``; ``start[f]`` is when flow ``f`` began
    to send and ``end[f]`` when its last byte arrived.
    """
    nflows = flow_size.shape[0]
    nlinks = link_cap.shape[0]
    lf_ptr, lf_flow = build_link_flows(nlinks, flow_ptr, flow_link)
    start = np.full(nflows, INF)
    end = np.full(nflows, INF)
    remaining = flow_size.copy()
    rate = np.zeros(nflows)
    last = np.zeros(nflows)
    version = np.zeros(nflows, dtype=np.int64)
    active = np.zeros(nflows, dtype=np.bool_)
    ndeps = flow_ndeps.copy()
    ready = flow_release.copy()
    # scratch for max-min
    include = np.zeros(nflows, dtype=np.bool_)
    frozen = np.zeros(nflows, dtype=np.bool_)
    rem = np.empty(nlinks)
    wsum = np.empty(nlinks)
    cnt = np.empty(nlinks, dtype=np.int64)
    lvl = np.empty(nlinks)
    link_mark = np.zeros(nlinks, dtype=np.int8)
    link_list = np.empty(nlinks, dtype=np.int64)
    link_seen = np.zeros(nlinks, dtype=np.bool_)
    comp = np.empty(nflows, dtype=np.int64)
    stack = np.empty(nlinks, dtype=np.int64)
    seen_links = np.empty(nlinks, dtype=np.int64)
    changed = np.empty(nflows, dtype=np.int64)
    # heaps: releases (key = time) and completions (key = predicted time, with version)
    rkey = np.empty(nflows + 1)
    rid = np.empty(nflows + 1, dtype=np.int64)
    rver = np.zeros(nflows + 1, dtype=np.int64)
    rn = 0
    cap_heap = 4 * nflows + 16
    ckey = np.empty(cap_heap)
    cid = np.empty(cap_heap, dtype=np.int64)
    cver = np.empty(cap_heap, dtype=np.int64)
    cn = 0
    for f in range(nflows):
        if ndeps[f] == 0:
            rn = _hpush(rkey, rid, rver, rn, ready[f] + flow_delay[f], f, 0)
    n_events = 0
    n_recomputes = 0
    now = 0.0
    while True:
        # drop stale completion entries
        while cn > 0 and (not active[cid[0]] or cver[0] != version[cid[0]]):
            cn = _hpop(ckey, cid, cver, cn)
        t_rel = rkey[0] if rn > 0 else INF
        t_cmp = ckey[0] if cn > 0 else INF
        if t_rel == INF and t_cmp == INF:
            break
        now = t_rel if t_rel < t_cmp else t_cmp
        tol = _TIME_TOL * (1.0 + abs(now))
        nchanged = 0
        # completions at `now`
        while cn > 0:
            f = cid[0]
            if not active[f] or cver[0] != version[f]:
                cn = _hpop(ckey, cid, cver, cn)
                continue
            if ckey[0] > now + tol:
                break
            cn = _hpop(ckey, cid, cver, cn)
            active[f] = False
            remaining[f] = 0.0
            end[f] = now
            n_events += 1
            changed[nchanged] = f
            nchanged += 1
            for k in range(succ_ptr[f], succ_ptr[f + 1]):
                s = succ_idx[k]
                t = now + flow_delay[s]
                if t > ready[s]:
                    ready[s] = t
                ndeps[s] -= 1
                if ndeps[s] == 0:
                    rn = _hpush(rkey, rid, rver, rn, ready[s], s, 0)
        # releases at `now`
        while rn > 0 and rkey[0] <= now + tol:
            f = rid[0]
            rn = _hpop(rkey, rid, rver, rn)
            start[f] = now
            n_events += 1
            if remaining[f] <= 0.0:
                end[f] = now
                n_events += 1
                for k in range(succ_ptr[f], succ_ptr[f + 1]):
                    s = succ_idx[k]
                    t = now + flow_delay[s]
                    if t > ready[s]:
                        ready[s] = t
                    ndeps[s] -= 1
                    if ndeps[s] == 0:
                        rn = _hpush(rkey, rid, rver, rn, ready[s], s, 0)
                continue
            active[f] = True
            last[f] = now
            rate[f] = 0.0
            changed[nchanged] = f
            nchanged += 1
        if nchanged == 0:
            continue
        # connected component of active flows reachable from the changed flows' links
        nst = 0
        nseen = 0
        for i in range(nchanged):
            f = changed[i]
            for k in range(flow_ptr[f], flow_ptr[f + 1]):
                l = flow_link[k]
                if not link_seen[l]:
                    link_seen[l] = True
                    seen_links[nseen] = l
                    nseen += 1
                    stack[nst] = l
                    nst += 1
        ncomp = 0
        for i in range(nchanged):
            f = changed[i]
            if active[f] and not include[f]:
                include[f] = True
                comp[ncomp] = f
                ncomp += 1
        while nst > 0:
            nst -= 1
            l = stack[nst]
            for kk in range(lf_ptr[l], lf_ptr[l + 1]):
                f = lf_flow[kk]
                if active[f] and not include[f]:
                    include[f] = True
                    comp[ncomp] = f
                    ncomp += 1
                    for k in range(flow_ptr[f], flow_ptr[f + 1]):
                        l2 = flow_link[k]
                        if not link_seen[l2]:
                            link_seen[l2] = True
                            seen_links[nseen] = l2
                            nseen += 1
                            stack[nst] = l2
                            nst += 1
        for i in range(nseen):
            link_seen[seen_links[i]] = False
        if ncomp == 0:
            continue
        # deterministic order inside the component
        comp_sorted = np.sort(comp[:ncomp])
        for i in range(ncomp):
            f = comp_sorted[i]
            if rate[f] > 0.0 and rate[f] < INF:
                remaining[f] -= rate[f] * (now - last[f])
                if remaining[f] < 0.0:
                    remaining[f] = 0.0
            last[f] = now
        progressive_fill(comp_sorted, ncomp, flow_ptr, flow_link, flow_w, flow_cap, link_cap,
                         lf_ptr, lf_flow, include, rate, rem, wsum, cnt, lvl, link_mark, link_list, frozen)
        n_recomputes += 1
        for i in range(ncomp):
            f = comp_sorted[i]
            include[f] = False
            version[f] += 1
            r = rate[f]
            if r == INF:
                t = now
            elif r > 0.0:
                t = now + remaining[f] / r
            else:
                t = INF
            if t < INF:
                if cn >= cap_heap:
                    # compact: rebuild the heap from valid entries only
                    m = 0
                    for j in range(cn):
                        g = cid[j]
                        if active[g] and cver[j] == version[g]:
                            ckey[m] = ckey[j]
                            cid[m] = cid[j]
                            cver[m] = cver[j]
                            m += 1
                    k2 = 0
                    tk = ckey[:m].copy()
                    ti = cid[:m].copy()
                    tv = cver[:m].copy()
                    for j in range(m):
                        k2 = _hpush(ckey, cid, cver, k2, tk[j], ti[j], tv[j])
                    cn = k2
                    if cn >= cap_heap:
                        cap_heap *= 2
                        nk = np.empty(cap_heap)
                        ni = np.empty(cap_heap, dtype=np.int64)
                        nv = np.empty(cap_heap, dtype=np.int64)
                        nk[:cn] = ckey[:cn]
                        ni[:cn] = cid[:cn]
                        nv[:cn] = cver[:cn]
                        ckey, cid, cver = nk, ni, nv
                cn = _hpush(ckey, cid, cver, cn, t, f, version[f])
    return start, end, n_events, n_recomputes


@dataclass
class FlowDag:
    """Flows and their dependencies, in the CSR form :func:`simulate_dag` takes.

    Build it with :class:`FlowDagBuilder`. Sizes, caps and rates share one unit of
    "progress" per flow (see :mod:`netsim.maxmin` on weights).
    """

    flow_ptr: np.ndarray
    flow_link: np.ndarray
    flow_w: np.ndarray
    flow_size: np.ndarray
    flow_cap: np.ndarray
    flow_release: np.ndarray
    flow_delay: np.ndarray
    flow_ndeps: np.ndarray
    succ_ptr: np.ndarray
    succ_idx: np.ndarray

    @property
    def num_flows(self) -> int:
        return len(self.flow_size)


class FlowDagBuilder:
    """Accumulates flows (path, weights, size, cap, release, delay, predecessors)."""

    def __init__(self) -> None:
        self._links: list[np.ndarray] = []
        self._w: list[np.ndarray] = []
        self._size: list[float] = []
        self._cap: list[float] = []
        self._release: list[float] = []
        self._delay: list[float] = []
        self._deps: list[tuple[int, ...]] = []

    def add(self, links, weights, size: float, *, cap: float = np.inf, release: float = 0.0,
            delay: float = 0.0, deps: tuple[int, ...] | list[int] = ()) -> int:
        """Add a flow; returns its id (ids are dense, in insertion order)."""
        links = np.asarray(links, dtype=np.int64)
        weights = np.broadcast_to(np.asarray(weights, dtype=np.float64), links.shape).copy()
        fid = len(self._size)
        for d in deps:
            if not (0 <= d < fid):
                raise ValueError(f"flow {fid}: dependency {d} is not an earlier flow")
        self._links.append(links)
        self._w.append(weights)
        self._size.append(float(size))
        self._cap.append(float(cap))
        self._release.append(float(release))
        self._delay.append(float(delay))
        self._deps.append(tuple(int(d) for d in deps))
        return fid

    def __len__(self) -> int:
        return len(self._size)

    def build(self) -> FlowDag:
        n = len(self._size)
        lens = np.fromiter((len(x) for x in self._links), dtype=np.int64, count=n)
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        link = np.concatenate(self._links) if n else np.zeros(0, dtype=np.int64)
        w = np.concatenate(self._w) if n else np.zeros(0)
        ndeps = np.fromiter((len(d) for d in self._deps), dtype=np.int64, count=n)
        succ_cnt = np.zeros(n + 1, dtype=np.int64)
        for d in self._deps:
            for p in d:
                succ_cnt[p + 1] += 1
        succ_ptr = np.cumsum(succ_cnt)
        fill = succ_ptr[:-1].copy()
        succ_idx = np.zeros(int(succ_ptr[-1]), dtype=np.int64)
        for f, d in enumerate(self._deps):
            for p in d:
                succ_idx[fill[p]] = f
                fill[p] += 1
        return FlowDag(ptr, link.astype(np.int64), w.astype(np.float64),
                       np.asarray(self._size, dtype=np.float64), np.asarray(self._cap, dtype=np.float64),
                       np.asarray(self._release, dtype=np.float64), np.asarray(self._delay, dtype=np.float64),
                       ndeps, succ_ptr.astype(np.int64), succ_idx)


def run_dag(link_cap: np.ndarray, dag: FlowDag) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Simulate ``dag`` on links of capacity ``link_cap`` (bytes/ns)."""
    if dag.num_flows == 0:
        return np.zeros(0), np.zeros(0), 0, 0
    return simulate_dag(np.asarray(link_cap, dtype=np.float64), dag.flow_ptr, dag.flow_link, dag.flow_w,
                        dag.flow_size, dag.flow_cap, dag.flow_release, dag.flow_delay, dag.flow_ndeps,
                        dag.succ_ptr, dag.succ_idx)
