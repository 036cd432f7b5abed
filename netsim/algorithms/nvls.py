"""NVLink SHARP (NVLS) and NVLS+tree (NVLSTree).

NVLS all-reduce inside a node: each GPU reduces its 1/k slice by a multimem load-reduce
(the NVSwitch reads that slice from all k GPUs and returns the sum), then multicasts the
result with a multimem store. Per GPU port that is ``size + size/k`` bytes up and the same
down. NVLS all-gather is the multicast half (``size/k`` up, ``size`` down), reduce-scatter
the load-reduce half (``size`` up, ``size/k`` down).

The switch does not reach NVLink line rate for these ops: we scale NVLS link usage by NCCL's
own efficiency terms (``nvlsEfficiency`` = 0.85 on Hopper, times ``(channels-1)/channels``,
src/graph/tuning.cc). On a DGX H100 this gives a 1 GiB+ all-reduce busbw of ~460 GB/s
against ~480 GB/s measured (README.md).

NVLSTree (multi-node all-reduce): NVLS inside every node, and across nodes, per GPU
position j (one per rail), a double binary tree among the nodes' j-th GPUs carrying 1/k of
the data, pipelined with the NVLS parts.
"""
from __future__ import annotations

from netsim.algorithms.common import LinkWeights, RankLayout
from netsim.algorithms.tree import dtree_edges
from netsim.topology import Topology


def node_weights(topo: Topology, layout: RankLayout, coll: str, efficiency: float) -> LinkWeights:
    lw = LinkWeights()
    for grp in layout.per_node:
        k = len(grp)
        if coll == "all_reduce":
            up = dn = 1.0 + 1.0 / k
        elif coll == "all_gather":
            up, dn = 1.0 / k, 1.0
        else:  # reduce_scatter
            up, dn = 1.0, 1.0 / k
        for g in grp:
            lw.add_path([int(topo.nvl_up[g])], up / efficiency)
            lw.add_path([int(topo.nvl_dn[g])], dn / efficiency)
    return lw


def nvls_tree_weights(topo: Topology, layout: RankLayout, efficiency: float) -> LinkWeights:
    lw = node_weights(topo, layout, "all_reduce", efficiency)
    k = layout.min_ppn
    t0, t1 = dtree_edges(layout.nnodes)
    f = 1.0 / (2 * k)
    for j in range(k):
        for tree in (t0, t1):
            for child, parent in tree:
                a = layout.per_node[child][j]
                b = layout.per_node[parent][j]
                lw.add_path(topo.path(a, b, tag=j), f)
                lw.add_path(topo.path(b, a, tag=j), f)
    return lw
