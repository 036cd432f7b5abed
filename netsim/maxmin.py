"""Weighted max-min fair rates by progressive filling (numba kernels, plus a numpy twin).

A flow ``f`` crosses links ``l`` with weights ``a[f, l] > 0``: at rate ``x_f`` it loads link
``l`` with ``a[f, l] * x_f`` bytes/ns. (A pipelined collective moves different byte counts
over different links; the weight says how many bytes cross the link per byte of progress.
A plain point-to-point flow has weight 1 on every link of its path.) A flow may also have a
rate cap (``inf`` for none).

Progressive filling: raise the rate of every unfrozen flow together; when a link fills up
(``sum a * x == capacity``) freeze every flow crossing it; when a flow hits its cap freeze
it; repeat. The result is the unique weighted max-min fair allocation: no link is over
capacity, and every flow is bottlenecked (by a saturated link it crosses, or its cap).
The kernel runs it saturation by saturation with a heap (see :func:`progressive_fill`);
the numpy twin runs it round by round with whole-array operations.

Determinism: every loop runs in index order and nothing depends on hashing or wall time,
so the same inputs give bit-identical rates.

The kernels are compiled with ``cache=True``: the first process on a machine pays the
compile (about a second), later processes load the cached machine code.
"""
from __future__ import annotations

import numpy as np
from numba import njit

# A link counts as saturated when its spare capacity is below this fraction of its capacity.
SAT_TOL = 1e-9
INF = np.inf


@njit(cache=True)
def build_link_flows(n_links, flow_ptr, flow_link):
    """Invert the flow->links CSR into link->flows (flow ids in increasing order per link)."""
    nflows = flow_ptr.shape[0] - 1
    cnt = np.zeros(n_links + 1, dtype=np.int64)
    for k in range(flow_link.shape[0]):
        cnt[flow_link[k] + 1] += 1
    for l in range(n_links):
        cnt[l + 1] += cnt[l]
    lf_ptr = cnt.copy()
    fill = cnt[:-1].copy()
    lf_flow = np.empty(flow_link.shape[0], dtype=np.int64)
    for f in range(nflows):
        for k in range(flow_ptr[f], flow_ptr[f + 1]):
            l = flow_link[k]
            lf_flow[fill[l]] = f
            fill[l] += 1
    return lf_ptr, lf_flow


@njit(cache=True, inline="always")
def _heap_push(hkey, hid, n, key, ident):
    i = n
    hkey[i] = key
    hid[i] = ident
    while i > 0:
        p = (i - 1) >> 1
        if hkey[p] < hkey[i] or (hkey[p] == hkey[i] and hid[p] <= hid[i]):
            break
        hkey[p], hkey[i] = hkey[i], hkey[p]
        hid[p], hid[i] = hid[i], hid[p]
        i = p
    return n + 1


@njit(cache=True, inline="always")
def _heap_pop(hkey, hid, n):
    """Remove the root (smallest key, then smallest id); returns the new size."""
    n -= 1
    hkey[0] = hkey[n]
    hid[0] = hid[n]
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
        i = c
    return n


@njit(cache=True, inline="always")
def _freeze(f, lam, flow_ptr, flow_link, flow_w, rate, rem, wsum, cnt, lvl, frozen):
    frozen[f] = True
    rate[f] = lam
    for k in range(flow_ptr[f], flow_ptr[f + 1]):
        l = flow_link[k]
        r = rem[l] - wsum[l] * (lam - lvl[l])
        rem[l] = r if r > 0.0 else 0.0
        lvl[l] = lam
        wsum[l] -= flow_w[k]
        cnt[l] -= 1
        if cnt[l] == 0:
            wsum[l] = 0.0


@njit(cache=True)
def progressive_fill(flows, nflows, flow_ptr, flow_link, flow_w, flow_cap, link_cap,
                     lf_ptr, lf_flow, include, rate, rem, wsum, cnt, lvl, link_mark, link_list, frozen):
    """Max-min rates for the flows ``flows[:nflows]`` (all marked in ``include``).

    Writes ``rate[f]`` for those flows; other entries are untouched. ``rem``, ``wsum``,
    ``cnt``, ``lvl`` (link-sized), ``link_mark``, ``link_list`` and ``frozen`` are scratch
    arrays (``link_mark`` must be all zero on entry and is left all zero). Returns the
    number of heap pops.

    Progressive filling is run event by event instead of round by round: every link keeps
    the fill level at which it would saturate, ``lvl + rem / wsum``, in a binary heap.
    Freezing a flow only lowers ``wsum`` on its links, which can only *raise* their
    saturation levels, so a heap key is always a lower bound of the truth: a popped link
    whose key is stale is pushed back with its true level, otherwise it is the next link
    to saturate and every flow still crossing it freezes at that level. Rate caps are heap
    entries too. Cost: O(path entries) for all the freezing plus O(log links) per pop.
    """
    nl = 0
    ncap = 0
    for i in range(nflows):
        f = flows[i]
        frozen[f] = False
        if flow_cap[f] < INF:
            ncap += 1
        for k in range(flow_ptr[f], flow_ptr[f + 1]):
            l = flow_link[k]
            if link_mark[l] == 0:
                link_mark[l] = 1
                link_list[nl] = l
                nl += 1
                rem[l] = link_cap[l]
                wsum[l] = 0.0
                cnt[l] = 0
            wsum[l] += flow_w[k]
            cnt[l] += 1
    nlinks_total = link_cap.shape[0]
    hkey = np.empty(nl + ncap + 1)
    hid = np.empty(nl + ncap + 1, dtype=np.int64)
    lvl_full = lvl
    hn = 0
    for j in range(nl):
        l = link_list[j]
        lvl_full[l] = 0.0
        hn = _heap_push(hkey, hid, hn, rem[l] / wsum[l] if wsum[l] > 0.0 else INF, l)
    for i in range(nflows):
        f = flows[i]
        if flow_cap[f] < INF:
            hn = _heap_push(hkey, hid, hn, flow_cap[f], nlinks_total + f)
    left = nflows
    pops = 0
    while left > 0 and hn > 0:
        key = hkey[0]
        ident = hid[0]
        hn = _heap_pop(hkey, hid, hn)
        pops += 1
        if ident >= nlinks_total:
            f = ident - nlinks_total
            if not frozen[f]:
                _freeze(f, flow_cap[f], flow_ptr, flow_link, flow_w, rate, rem, wsum, cnt, lvl_full, frozen)
                left -= 1
            continue
        l = ident
        if cnt[l] == 0:
            continue
        true_key = lvl_full[l] + rem[l] / wsum[l]
        if true_key > key * (1.0 + 1e-12) + 1e-300:
            hn = _heap_push(hkey, hid, hn, true_key, l)
            continue
        lam = true_key if true_key > key else key
        for kk in range(lf_ptr[l], lf_ptr[l + 1]):
            f = lf_flow[kk]
            if include[f] and not frozen[f]:
                _freeze(f, lam, flow_ptr, flow_link, flow_w, rate, rem, wsum, cnt, lvl_full, frozen)
                left -= 1
    if left > 0:
        # Flows crossing no link and without a cap are unconstrained.
        for i in range(nflows):
            f = flows[i]
            if not frozen[f]:
                frozen[f] = True
                rate[f] = INF
    for j in range(nl):
        link_mark[link_list[j]] = 0
    return pops


@njit(cache=True)
def maxmin_rates(flow_ptr, flow_link, flow_w, flow_cap, link_cap):
    """Max-min fair rates of all flows (one full recomputation)."""
    n_links = link_cap.shape[0]
    lf_ptr, lf_flow = build_link_flows(n_links, flow_ptr, flow_link)
    return maxmin_rates_prebuilt(flow_ptr, flow_link, flow_w, flow_cap, link_cap, lf_ptr, lf_flow)


@njit(cache=True)
def maxmin_rates_prebuilt(flow_ptr, flow_link, flow_w, flow_cap, link_cap, lf_ptr, lf_flow):
    """As :func:`maxmin_rates`, with the link->flows index already built."""
    n_links = link_cap.shape[0]
    nflows = flow_ptr.shape[0] - 1
    flows = np.arange(nflows)
    include = np.ones(nflows, dtype=np.bool_)
    rate = np.zeros(nflows)
    rem = np.empty(n_links)
    wsum = np.empty(n_links)
    cnt = np.empty(n_links, dtype=np.int64)
    lvl = np.empty(n_links)
    link_mark = np.zeros(n_links, dtype=np.int8)
    link_list = np.empty(n_links, dtype=np.int64)
    frozen = np.zeros(nflows, dtype=np.bool_)
    progressive_fill(flows, nflows, flow_ptr, flow_link, flow_w, flow_cap, link_cap,
                     lf_ptr, lf_flow, include, rate, rem, wsum, cnt, lvl, link_mark, link_list, frozen)
    return rate


def maxmin_rates_numpy(flow_ptr: np.ndarray, flow_link: np.ndarray, flow_w: np.ndarray,
                       flow_cap: np.ndarray, link_cap: np.ndarray) -> np.ndarray:
    """The same progressive filling written with vectorized numpy (for comparison/tests).

    Each round is a handful of whole-array operations (bincount over the flow->link
    entries), so it costs O(nnz) per round instead of the kernel's O(links in use).
    """
    nflows = len(flow_ptr) - 1
    n_links = len(link_cap)
    owner = np.repeat(np.arange(nflows), np.diff(flow_ptr))
    rate = np.zeros(nflows)
    frozen = np.zeros(nflows, dtype=bool)
    rem = link_cap.astype(np.float64).copy()
    level = 0.0
    while not frozen.all():
        live = ~frozen[owner]
        wsum = np.bincount(flow_link[live], weights=flow_w[live], minlength=n_links)
        cnt = np.bincount(flow_link[live], minlength=n_links)
        used = cnt > 0
        share = np.full(n_links, np.inf)
        share[used] = rem[used] / wsum[used]
        capgap = np.where(~frozen & np.isfinite(flow_cap), flow_cap - level, np.inf)
        delta = min(share.min(), capgap.min())
        if not np.isfinite(delta):
            rate[~frozen] = np.inf
            break
        delta = max(delta, 0.0)
        level += delta
        rem[used] -= delta * wsum[used]
        sat = used & (rem <= SAT_TOL * link_cap)
        hit = np.zeros(nflows, dtype=bool)
        hit[owner[live & sat[flow_link]]] = True
        hit |= (~frozen) & np.isfinite(flow_cap) & (flow_cap - level <= SAT_TOL * flow_cap)
        hit &= ~frozen
        rate[hit] = level
        frozen |= hit
    return rate
