"""The engine-facing API: simulate NCCL collectives on a cluster, alone or concurrently.

.. code-block:: python

    net = Network.from_cluster("dgx-h100", nnodes=4)
    res = net.simulate_collectives([
        CollectiveRequest("all_reduce", ranks=range(0, 8), nbytes=64 << 20, start_ns=0),   # TP
        CollectiveRequest("reduce_scatter", ranks=range(0, 32, 8), nbytes=1 << 30, start_ns=0),  # DP
    ])
    res[0].end_ns, res[1].end_ns

How a collective is simulated. NCCL's choice of algorithm and protocol for the size is made
with NCCL's own model (:mod:`netsim.selection`); the collective's traffic pattern for that
algorithm (:mod:`netsim.algorithms`) becomes a pipelined flow whose link weights are the
bytes each link carries per byte of the collective; the collective starts sending after
NCCL's modeled latency and finishes when the flow engine has moved all its bytes, sharing
every link max-min fairly with whatever else runs at the same time. All-to-all and
send/recv are one flow per peer pair.

``nbytes`` follows nccl-tests' "size" column: all_reduce/broadcast/reduce: the buffer;
all_gather: the gathered output (all ranks' parts); reduce_scatter: the full input (all
ranks' parts); all_to_all: each rank's send buffer (split evenly unless ``split`` is
given); send_recv: the bytes sent.

Approximations (measured in README.md): NCCL's latency model stands in for the small-size
behaviour; one pipelined flow per collective ignores NCCL's reduction of channels for
medium sizes; max-min sharing between collectives treats each collective like one
connection on its most loaded link.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from netsim.algorithms import alltoall as a2a
from netsim.algorithms import nvls as nvls_alg
from netsim.algorithms import p2p as p2p_alg
from netsim.algorithms import ring as ring_alg
from netsim.algorithms import tree as tree_alg
from netsim.algorithms.common import PROTO_WIRE_FACTOR, LinkWeights, RankLayout
from netsim import ramp as nccl_ramp
from netsim.cluster_file import resolve_cluster
from netsim.errors import NetsimError
from netsim.flowsim import FlowDagBuilder, run_dag
from netsim.selection import Choice, select
from netsim.topology import ClusterSpec, Topology
from netsim.tuning import (COMPCAP_IDX, HW_NVLINK, HW_PCI, NVLS_EFFICIENCY, CommShape, nsteps_of)

log = logging.getLogger(__name__)

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv")
_OP_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
               "alltoall": "all_to_all", "all2all": "all_to_all", "sendrecv": "send_recv", "send": "send_recv",
               "all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter"}


def canonical_op(op: str) -> str:
    key = op.strip().lower().replace("-", "_")
    key = _OP_ALIASES.get(key.replace("_", ""), _OP_ALIASES.get(key, key))
    if key not in OPS:
        raise NetsimError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    return key


@dataclass(frozen=True)
class CollectiveRequest:
    """One collective to simulate.

    ``ranks``: global GPU ids of the communicator, in communicator rank order.
    ``nbytes``: size in nccl-tests' convention (see module docstring).
    ``start_ns``: when it is issued; it starts then, or when every request listed in
    ``after`` (indices into the same request list) has finished, whichever is later.
    ``algorithm``/``protocol``: force NCCL's choice (None = NCCL-like selection).
    ``root``: index into ``ranks`` for broadcast/reduce. ``peer``: for send_recv, the
    receiving GPU (``ranks`` then holds just the sender); without ``peer`` a send_recv over
    ``ranks`` is nccl-tests' ring exchange (rank i sends to rank i+1).
    ``split``: for all_to_all, an n x n byte matrix (row = sender) for uneven splits.
    """

    op: str
    ranks: Sequence[int]
    nbytes: int
    start_ns: float = 0.0
    algorithm: str | None = None
    protocol: str | None = None
    root: int = 0
    peer: int | None = None
    split: object = None
    after: tuple[int, ...] = ()
    tag: object = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "op", canonical_op(self.op))
        object.__setattr__(self, "ranks", tuple(int(r) for r in self.ranks))
        if not isinstance(self.nbytes, (int, np.integer)) or self.nbytes < 0:
            raise NetsimError(f"{self.op}: nbytes must be a non-negative integer, got {self.nbytes!r}")
        if not (isinstance(self.start_ns, (int, float)) and math.isfinite(self.start_ns) and self.start_ns >= 0):
            raise NetsimError(f"{self.op}: start_ns must be a finite number >= 0, got {self.start_ns!r}")
        if len(self.ranks) == 0:
            raise NetsimError(f"{self.op}: ranks must not be empty")
        if self.op in ("broadcast", "reduce") and not (0 <= self.root < len(self.ranks)):
            raise NetsimError(f"{self.op}: root {self.root} is not an index into ranks (0..{len(self.ranks) - 1})")
        object.__setattr__(self, "after", tuple(int(i) for i in self.after))


@dataclass(frozen=True)
class CollectiveResult:
    """When a collective ran and how NCCL would have run it."""

    start_ns: float          # when it began (issue time, or when its dependencies finished)
    end_ns: float            # when the last byte arrived
    algorithm: str
    protocol: str
    latency_ns: float        # the fixed latency part (NCCL's model)
    nbytes: int

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class Plan:
    """A collective's traffic: one pipelined flow (links, weights) or a set of pair flows."""

    algorithm: str
    protocol: str
    latency_ns: float
    links: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cap_algbw: float = math.inf       # bytes/ns ceiling on the collective's progress
    pairs: tuple = ()                 # ((links, bytes), ...) for all_to_all / send_recv
    pair_caps: tuple = ()             # bytes/ns ceiling of each pair flow (NCCL's NVLink ramp)
    size_bytes: int | None = None     # progress units of the merged flow (None: the request's nbytes)


class Network:
    """A cluster to simulate collectives on. Build with :meth:`from_cluster` or a Topology.

    ``pair_flow_limit``: all-to-alls over at most this many ranks are simulated as one flow
    per peer pair (exact max-min between pairs; the event count grows as n^2 and each event
    recomputes the shared component, so cost grows like n^4); larger ones as one pipelined
    flow whose link weights are the summed pair traffic, which finishes when the most
    loaded link has carried its bytes (exact when that link stays busy to the end, as with
    even splits).
    """

    def __init__(self, topology: Topology, pair_flow_limit: int = 16) -> None:
        self.topology = topology
        self.pair_flow_limit = pair_flow_limit
        self._plan_cache: dict = {}
        self._layout_cache: dict = {}
        self._shape_cache: dict = {}
        self.last_stats: dict[str, float] = {}

    @classmethod
    def from_cluster(cls, cluster: str | ClusterSpec, nnodes: int, gpus_per_node: int | None = None,
                     **kwargs) -> "Network":
        """``cluster``: a preset name, a TOML cluster file path, or a ClusterSpec."""
        spec = resolve_cluster(cluster)
        if gpus_per_node is not None:
            spec = spec.with_gpus_per_node(gpus_per_node)
        return cls(Topology(spec, nnodes), **kwargs)

    # ------------------------------------------------------------------ model inputs
    def layout(self, ranks: tuple[int, ...]) -> RankLayout:
        lay = self._layout_cache.get(ranks)
        if lay is None:
            lay = RankLayout.of(self.topology, ranks)
            self._layout_cache[ranks] = lay
        return lay

    def comm_shape(self, layout: RankLayout) -> CommShape:
        """NCCL's view of the communicator (channels, per-channel bandwidths); see tuning.py."""
        cached = self._shape_cache.get(layout.ranks)
        if cached is None:
            cached = self._shape_cache[layout.ranks] = self._comm_shape(layout)
        return cached

    def _comm_shape(self, layout: RankLayout) -> CommShape:
        topo = self.topology
        node, net = topo.spec.node, topo.spec.network
        intra_total = node.nvlink_effective if node.nvswitch else node.pcie_effective
        rails = min(len({topo.rail_of(g) for g in grp}) for grp in layout.per_node)
        if layout.nnodes == 1:
            ch = 16
            ring_intra = intra_total / ch
            ring_inter = ring_intra
        else:
            ch = min(32, max(2, 2 * rails))
            ring_inter = rails * net.nic_line_rate / ch
            ring_intra = min(intra_total / ch, ring_inter)
        nvls_ch = 16
        return CommShape(
            nranks=layout.nranks, nnodes=layout.nnodes, arch=node.gpu_arch,
            cpu_vendor=node.cpu_vendor if node.cpu_vendor in ("intel", "amd") else "intel",
            intra_hw=HW_NVLINK if node.nvswitch else HW_PCI,
            nvls=node.nvls and layout.min_ppn >= 2,
            ring_channels=ch, ring_bw_intra=ring_intra, ring_bw_inter=ring_inter,
            nvls_channels=nvls_ch, nvls_bw_intra=intra_total / nvls_ch,
            nvls_bw_inter=rails * net.nic_line_rate / nvls_ch,
        )

    def choose(self, op: str, ranks: Sequence[int], nbytes: int, algorithm: str | None = None,
               protocol: str | None = None) -> Choice:
        """NCCL's (algorithm, protocol) for a collective (not for all_to_all/send_recv)."""
        op = canonical_op(op)
        layout = self.layout(tuple(int(r) for r in ranks))
        return select(op, int(nbytes), self.comm_shape(layout), algorithm, protocol)

    # ------------------------------------------------------------------ plans
    def plan(self, req: CollectiveRequest) -> Plan:
        """The traffic of one request (cached per op/ranks/algorithm/protocol/size class)."""
        topo = self.topology
        layout = self.layout(req.ranks)
        n = layout.nranks
        if req.op in ("all_to_all", "send_recv"):
            return self._p2p_plan(req, layout)
        if n == 1 or req.nbytes == 0:
            return Plan("none", "none", 0.0)
        shape = self.comm_shape(layout)
        choice = select(req.op, req.nbytes, shape, req.algorithm, req.protocol)
        key = (req.op, req.ranks, choice.algo, choice.proto, req.root)
        cached = self._plan_cache.get(key)
        # the latency of ring/Simple multi-node all-reduce depends on size (plateau factor)
        lat_us = choice.latency_us
        if (choice.algo == "ring" and choice.proto == "Simple" and shape.nnodes > 1 and req.op == "all_reduce"
                and req.nbytes / (shape.ring_channels * shape.nranks) >= 64):
            lat_us *= 1.9 if shape.arch == "volta" else 1.4
        if cached is not None:
            return Plan(cached.algorithm, cached.protocol, lat_us * 1e3, cached.links, cached.weights,
                        min(cached.cap_algbw, self._ramp_cap(req, layout, choice)))
        if choice.algo == "ring":
            lw = ring_alg.weights(topo, layout, req.op, shape.ring_channels, root=req.root)
        elif choice.algo == "tree":
            lw = tree_alg.weights(topo, layout, shape.ring_channels)
        elif choice.algo in ("nvls", "nvls_tree"):
            cc = COMPCAP_IDX[shape.arch]
            eff = NVLS_EFFICIENCY[cc] * (shape.nvls_channels - 1) / shape.nvls_channels
            if choice.algo == "nvls":
                lw = nvls_alg.node_weights(topo, layout, req.op, eff)
            else:
                lw = nvls_alg.nvls_tree_weights(topo, layout, eff)
        else:  # pragma: no cover - selection only returns the above
            raise NetsimError(f"algorithm {choice.algo} is not simulated")
        links, w = lw.scaled(PROTO_WIRE_FACTOR[choice.proto]).result()
        cap = self._cap_algbw(req.op, choice, n)
        plan = Plan(choice.algo, choice.proto, lat_us * 1e3, links, w, cap)
        self._plan_cache[key] = plan
        return Plan(choice.algo, choice.proto, lat_us * 1e3, links, w,
                    min(cap, self._ramp_cap(req, layout, choice)))

    def _on_nvlink(self, layout: RankLayout) -> bool:
        return layout.nnodes == 1 and self.topology.spec.node.nvswitch

    def _ramp_cap(self, req: CollectiveRequest, layout: RankLayout, choice: Choice) -> float:
        """NCCL's size ramp (:mod:`netsim.ramp`) as an algbw ceiling: single-node ring/Simple."""
        if choice.algo != "ring" or choice.proto != "Simple" or not self._on_nvlink(layout):
            return math.inf
        n = layout.nranks
        sent = nccl_ramp.sent_per_rank(req.op, n, req.nbytes)
        if sent <= 0:
            return math.inf
        rate = nccl_ramp.send_rate_ceiling(req.op, n, req.nbytes, self.topology.spec.node.nvlink_gbps)
        return rate * req.nbytes / sent

    @staticmethod
    def _cap_algbw(op: str, choice: Choice, n: int) -> float:
        """NCCL's protocol/algorithm ceiling (a busbw in its model) as an algbw."""
        if not math.isfinite(choice.busbw_cap):
            return math.inf
        if choice.algo in ("ring", "nvls", "nvls_tree"):
            if choice.algo != "ring" and op in ("all_gather", "reduce_scatter"):
                return choice.busbw_cap
            return choice.busbw_cap * n / nsteps_of(op, n)
        return choice.busbw_cap * 0.5  # tree

    def _p2p_plan(self, req: CollectiveRequest, layout: RankLayout) -> Plan:
        topo = self.topology
        nvsw = topo.spec.node.nvswitch
        pairs = []
        cross = False
        if req.op == "send_recv":
            if req.peer is not None:
                if len(req.ranks) != 1:
                    raise NetsimError("send_recv with a peer takes exactly one sender in ranks")
                topo.check_gpu(req.peer)
                edges = [(req.ranks[0], int(req.peer), req.nbytes)]
            else:
                r = req.ranks
                edges = [(r[i], r[(i + 1) % len(r)], req.nbytes) for i in range(len(r))] if len(r) > 1 else []
        else:
            n = len(req.ranks)
            m = a2a.even_split(n, req.nbytes) if req.split is None else a2a.check_split(req.split, n)
            edges = [(req.ranks[i], req.ranks[j], int(m[i, j])) for i in range(n) for j in range(n)
                     if i != j and m[i, j] > 0]
        merged = req.op == "all_to_all" and len(req.ranks) > self.pair_flow_limit
        lw = LinkWeights()
        ref = 1
        if merged:  # progress unit: bytes sent by the busiest rank (nbytes for an even split)
            ref = int(req.nbytes) if req.split is None else int(np.asarray(req.split).sum(axis=1).max())
            ref = max(ref, 1)
        for k, (s, d, b) in enumerate(edges):
            if s == d or b == 0:
                continue
            cross |= topo.node_of(s) != topo.node_of(d)
            path = topo.path(s, d, tag=k)
            if merged:
                lw.add_path(path, b / ref)
            else:
                pairs.append((np.asarray(path, dtype=np.int64), b))
        lat = p2p_alg.latency_us(cross, nvsw) * 1e3 if (pairs or merged) else 0.0
        if merged:
            links, w = lw.result()
            return Plan("p2p", "Simple", lat, links, w, size_bytes=ref if len(links) else 0)
        caps: tuple = ()
        if pairs and not cross and nvsw:
            # NCCL's size ramp: a sender's rate is capped by all the bytes it sends; its pairs
            # share that ceiling in proportion to their bytes
            sent: dict[int, int] = {}
            for s, d, b in edges:
                if s != d and b:
                    sent[s] = sent.get(s, 0) + b
            n = 2 if req.op == "send_recv" else len(req.ranks)
            gbps = topo.spec.node.nvlink_gbps
            caps = tuple(nccl_ramp.rate_ceiling(req.op, n, sent[s], gbps) * b / sent[s]
                         for s, d, b in edges if s != d and b)
        return Plan("p2p", "Simple", lat, pairs=tuple(pairs), pair_caps=caps)

    # ------------------------------------------------------------------ simulation
    def collective_time(self, req: CollectiveRequest) -> CollectiveResult:
        """Fast path: one collective alone on the cluster (no event loop)."""
        plan = self.plan(req)
        start = float(req.start_ns)
        if plan.pairs:
            if len(plan.pairs) > 1:
                return self.simulate_collectives([req])[0]
            links, b = plan.pairs[0]
            rate = float(np.min(self.topology.link_cap[links])) if len(links) else math.inf
            if plan.pair_caps:
                rate = min(rate, plan.pair_caps[0])
            t = b / rate if rate > 0 else math.inf
            return CollectiveResult(start, start + plan.latency_ns + t, plan.algorithm, plan.protocol,
                                    plan.latency_ns, req.nbytes)
        if len(plan.links) == 0:
            return CollectiveResult(start, start + plan.latency_ns, plan.algorithm, plan.protocol,
                                    plan.latency_ns, req.nbytes)
        rate = min(float(np.min(self.topology.link_cap[plan.links] / plan.weights)), plan.cap_algbw)
        size = req.nbytes if plan.size_bytes is None else plan.size_bytes
        return CollectiveResult(start, start + plan.latency_ns + size / rate, plan.algorithm,
                                plan.protocol, plan.latency_ns, req.nbytes)

    def simulate_collectives(self, requests: Iterable[CollectiveRequest]) -> list[CollectiveResult]:
        """Simulate concurrent collectives sharing the fabric; one result per request, in order.

        Each request becomes a start marker (released at ``start_ns``, after its ``after``
        requests), its flows (released after NCCL's latency) and an end marker.
        """
        reqs = list(requests)
        b = FlowDagBuilder()
        markers: list[tuple[int, int]] = []
        plans: list[Plan] = []
        for i, req in enumerate(reqs):
            for d in req.after:
                if not (0 <= d < i):
                    raise NetsimError(f"request {i}: 'after' index {d} is not an earlier request")
            plan = self.plan(req)
            plans.append(plan)
            deps = [markers[d][1] for d in req.after]
            m0 = b.add([], [], 0.0, release=float(req.start_ns), deps=deps)
            flows = []
            if plan.pairs:
                for k, (links, nbytes) in enumerate(plan.pairs):
                    cap = plan.pair_caps[k] if plan.pair_caps else math.inf
                    flows.append(b.add(links, 1.0, float(nbytes), cap=cap, delay=plan.latency_ns, deps=[m0]))
            elif len(plan.links):
                u = float(plan.weights.max())
                size = req.nbytes if plan.size_bytes is None else plan.size_bytes
                flows.append(b.add(plan.links, plan.weights / u, size * u,
                                   cap=plan.cap_algbw * u, delay=plan.latency_ns, deps=[m0]))
            else:
                flows.append(b.add([], [], 0.0, delay=plan.latency_ns, deps=[m0]))
            m1 = b.add([], [], 0.0, deps=flows)
            markers.append((m0, m1))
        start, end, n_events, n_recomp = run_dag(self.topology.link_cap, b.build())
        self.last_stats = {"flows": float(len(b)), "events": float(n_events), "recomputes": float(n_recomp)}
        out = []
        for req, plan, (m0, m1) in zip(reqs, plans, markers):
            out.append(CollectiveResult(float(end[m0]), float(end[m1]), plan.algorithm, plan.protocol,
                                        plan.latency_ns, req.nbytes))
        return out
