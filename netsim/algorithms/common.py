"""Shared pieces of the algorithm builders: rank layout and link-weight accumulation."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from netsim.errors import NetsimError
from netsim.topology import Topology

# Bytes on the wire per payload byte for NCCL's protocols: LL sends 8-byte lines holding
# 4 bytes of data and a 4-byte flag; LL128 sends 128-byte lines with 120 bytes of data.
PROTO_WIRE_FACTOR = {"LL": 2.0, "LL128": 128.0 / 120.0, "Simple": 1.0}


@dataclass(frozen=True)
class RankLayout:
    """A communicator's GPUs grouped by node, in NCCL's (node, local index) order."""

    ranks: tuple[int, ...]          # as given (communicator rank order)
    nodes: tuple[int, ...]          # distinct node ids, ascending
    per_node: tuple[tuple[int, ...], ...]  # GPUs of each node, ascending local index

    @classmethod
    def of(cls, topo: Topology, ranks) -> "RankLayout":
        ranks = tuple(int(r) for r in ranks)
        if len(ranks) == 0:
            raise NetsimError("a communicator needs at least one rank")
        if len(set(ranks)) != len(ranks):
            raise NetsimError(f"duplicate GPU ranks in communicator: {sorted(ranks)[:8]}...")
        for r in ranks:
            topo.check_gpu(r)
        by_node: dict[int, list[int]] = {}
        for r in sorted(ranks):
            by_node.setdefault(topo.node_of(r), []).append(r)
        nodes = tuple(sorted(by_node))
        return cls(ranks, nodes, tuple(tuple(by_node[n]) for n in nodes))

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def min_ppn(self) -> int:
        return min(len(g) for g in self.per_node)

    def ordered(self) -> list[int]:
        return [g for grp in self.per_node for g in grp]


class LinkWeights:
    """Accumulates (link, bytes-per-payload-byte) contributions."""

    def __init__(self) -> None:
        self._links: list[np.ndarray] = []
        self._w: list[np.ndarray] = []

    def add_path(self, path, weight: float) -> None:
        if len(path):
            self._links.append(np.asarray(path, dtype=np.int64))
            self._w.append(np.full(len(path), weight, dtype=np.float64))

    def add_arrays(self, links: np.ndarray, weights: np.ndarray) -> None:
        if len(links):
            self._links.append(np.asarray(links, dtype=np.int64))
            self._w.append(np.asarray(weights, dtype=np.float64))

    def scaled(self, factor: float) -> "LinkWeights":
        out = LinkWeights()
        out._links = list(self._links)
        out._w = [w * factor for w in self._w]
        return out

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """Unique link ids (ascending) and summed weights."""
        if not self._links:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        links = np.concatenate(self._links)
        w = np.concatenate(self._w)
        uniq, inv = np.unique(links, return_inverse=True)
        return uniq, np.bincount(inv, weights=w)
