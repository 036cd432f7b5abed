"""NCCL's double binary tree (all-reduce).

Across nodes NCCL builds two binary trees over the node heads such that every node is an
interior node in at most one of them (the second tree mirrors the first for an even
count, shifts it by one for an odd count); half the channels use each tree. Inside a node
the tree is a chain through the node's GPUs. The all-reduce is pipelined: data flows up
(reduce) and back down (broadcast) every tree edge at the same time, so each edge carries
the channel's share of the data once in each direction.
"""
from __future__ import annotations

from netsim.algorithms.common import LinkWeights, RankLayout
from netsim.topology import Topology


def btree(n: int, rank: int) -> tuple[int, int, int]:
    """(parent, child0, child1) of ``rank`` in NCCL's binary tree over 0..n-1 (-1 = none).

    Rank 0 is the root with a single child; other ranks find their lowest set bit ``b``:
    their parent is at ``(rank ^ b) | (b << 1)`` (or ``rank ^ b`` if that is out of range)
    and their children at ``rank -+ b/2`` (the upper child shrinks until it is in range).
    """
    bit = 1
    while bit < n and not (bit & rank):
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1) if n > 1 else -1
    parent = (rank ^ bit) | (bit << 1)
    if parent >= n:
        parent = rank ^ bit
    low = bit >> 1
    c0 = rank - low if low else -1
    c1 = -1
    while low:
        if rank + low < n:
            c1 = rank + low
            break
        low >>= 1
    return parent, c0, c1


def dtree_edges(n: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(child, parent) edges of NCCL's two trees over 0..n-1."""
    t0 = [(r, btree(n, r)[0]) for r in range(1, n)]
    t1: list[tuple[int, int]] = []
    for r in range(n):
        if n % 2 == 0:
            p = btree(n, n - 1 - r)[0]
            if p != -1:
                t1.append((r, n - 1 - p))
        else:
            p = btree(n, (r - 1) % n)[0]
            if p != -1:
                t1.append((r, (p + 1) % n))
    return t0, t1


def depth(n: int) -> int:
    """Height of NCCL's binary tree over n ranks (edges from the deepest leaf to the root)."""
    best = 0
    for r in range(n):
        d, x = 0, r
        while x != 0:
            x = btree(n, x)[0]
            d += 1
        best = max(best, d)
    return best


def weights(topo: Topology, layout: RankLayout, nchannels: int) -> LinkWeights:
    """Link weights of a tree all-reduce over ``nchannels`` channels (half per tree)."""
    lw = LinkWeights()
    if layout.nranks <= 1:
        return lw
    f = 1.0 / nchannels
    trees = dtree_edges(layout.nnodes)
    for c in range(nchannels):
        heads = []
        for grp in layout.per_node:
            k = len(grp)
            s = c % k
            chain = grp[s:] + grp[:s]
            heads.append(chain[0])
            for a, b in zip(chain, chain[1:]):
                lw.add_path(topo.path(b, a, tag=c), f)   # up (reduce)
                lw.add_path(topo.path(a, b, tag=c), f)   # down (broadcast)
        for child, parent in trees[c % 2]:
            lw.add_path(topo.path(heads[child], heads[parent], tag=c), f)
            lw.add_path(topo.path(heads[parent], heads[child], tag=c), f)
    return lw
