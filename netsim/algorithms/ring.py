"""Ring algorithms (NCCL's ring): all-reduce, all-gather, reduce-scatter, broadcast, reduce.

NCCL's ring is hierarchical by construction: each channel's ring visits all GPUs of a node
over NVLink, then hops to the next node over the network, entering and leaving every node
through the NIC of one rail (on a rail-optimized fabric the hop stays under one leaf; the
GPU that leaves the node reaches that NIC with a PXN NVLink hop). Channels rotate the
entry GPU, so the channels spread evenly over the NICs.

Data is pipelined: every link of the ring carries the same bytes at the same time, so one
ring is one pipelined transfer that loads each of its links with
``f * size / channels`` bytes, where ``f`` is 2(n-1)/n for all-reduce (reduce-scatter then
all-gather, 2(n-1) steps), (n-1)/n for all-gather and reduce-scatter (n-1 steps), and 1
for broadcast/reduce, which run as a pipelined chain from/to the root (n-1 hops; the hop
into the root carries nothing).
"""
from __future__ import annotations

from netsim.algorithms.common import LinkWeights, RankLayout
from netsim.topology import Topology


def steps(coll: str, n: int) -> int:
    """Logical ring steps NCCL runs per chunk."""
    if n <= 1:
        return 0
    if coll == "all_reduce":
        return 2 * (n - 1)
    return n - 1


def link_factor(coll: str, n: int) -> float:
    if coll == "all_reduce":
        return 2.0 * (n - 1) / n
    if coll in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


def channel_order(layout: RankLayout, channel: int) -> list[int]:
    """GPU order of one channel's ring: each node's GPUs rotated by the channel index."""
    order: list[int] = []
    for grp in layout.per_node:
        k = len(grp)
        s = channel % k
        order.extend(grp[s:] + grp[:s])
    return order


def ring_hops(topo: Topology, layout: RankLayout, channel: int) -> list[list[int]]:
    """Link paths of the n hops of one channel's ring (hop i goes order[i] -> order[i+1])."""
    order = channel_order(layout, channel)
    n = len(order)
    return [topo.path(order[i], order[(i + 1) % n], tag=channel) for i in range(n)]


def weights(topo: Topology, layout: RankLayout, coll: str, nchannels: int, root: int | None = None) -> LinkWeights:
    """Link weights of a ring collective over ``nchannels`` channels (protocol factor excluded)."""
    n = layout.nranks
    lw = LinkWeights()
    if n <= 1:
        return lw
    f = link_factor(coll, n) / nchannels
    for c in range(nchannels):
        order = channel_order(layout, c)
        skip = None
        if coll in ("broadcast", "reduce"):
            # chain from (broadcast) or to (reduce) the root: the hop into the root is idle
            r = layout.ranks[root or 0]
            skip = (order.index(r) - 1) % n
        for i in range(n):
            if i == skip:
                continue
            lw.add_path(topo.path(order[i], order[(i + 1) % n], tag=c), f)
    return lw


def allreduce_schedule(n: int) -> list[list[tuple[int, int, int, str]]]:
    """The 2(n-1) steps of a ring all-reduce on ranks 0..n-1 with n chunks.

    Step s of the reduce-scatter half: rank r sends chunk (r - s) mod n to r+1, which
    reduces it; the all-gather half then forwards the reduced chunks. Returns, per step,
    ``(src, dst, chunk, op)`` with op "reduce" or "copy".
    """
    sched: list[list[tuple[int, int, int, str]]] = []
    for s in range(n - 1):
        sched.append([(r, (r + 1) % n, (r - s) % n, "reduce") for r in range(n)])
    for s in range(n - 1):
        sched.append([(r, (r + 1) % n, (r + 1 - s) % n, "copy") for r in range(n)])
    return sched
