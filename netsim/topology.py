"""Cluster topology: GPUs in nodes, NVLink/NVSwitch and PCIe inside, a leaf/spine fabric outside.

Units everywhere in netsim: bytes, nanoseconds, and bandwidth in bytes/ns (== GB/s, 1e9 B/s).

The model, and why it looks like this:

- Inside a node every GPU has one NVLink port to an NVSwitch fabric, a pair of directed links
  (GPU->switch "nvl_up", switch->GPU "nvl_dn") whose capacity is the GPU's NVLink bandwidth
  per direction times an efficiency. The switch itself is non-blocking (true of NVSwitch
  for the traffic NCCL generates), so only the GPU ports can be bottlenecks. Nodes without
  NVSwitch (``nvswitch = false``) route GPU-GPU traffic over PCIe instead.
- Every GPU has a PCIe link pair to its PCIe switch ("pcie_up", "pcie_dn"); GPUDirect RDMA
  traffic between a GPU and its NIC crosses it, and so does host traffic.
- Across nodes there is one NIC per GPU (DGX/HGX style; fewer NICs are shared evenly). A NIC
  has a transmit link (NIC->leaf) and a receive link (leaf->NIC). In a rail-optimized fabric
  NIC ``r`` of every node in a scalable unit of ``nodes_per_leaf`` nodes plugs into leaf
  switch ``(unit, r)``; otherwise all NICs of a unit share one (logical) leaf. Leaves connect
  to every spine; each leaf->spine and spine->leaf link gets ``downlink capacity /
  (spines * oversubscription)`` so that ``oversubscription`` is the ratio of a leaf's
  downlink to uplink bandwidth. Leaf and spine switching is non-blocking; only links are.
- Paths are deterministic: the spine used by a (src, dst, tag) triple is chosen by a stable
  integer hash (splitmix64), never by Python's randomized ``hash``.

Approximations (stated here, measured in README.md): NVSwitch is non-blocking; switch
buffers, congestion control and adaptive routing are not modeled (ECMP is static per flow);
link efficiencies stand in for protocol and DMA overheads.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import numpy as np

from netsim.errors import NetsimError

log = logging.getLogger(__name__)

GPU_ARCHS = ("volta", "ampere", "hopper", "blackwell")

# Link kinds (stored per link; useful for reports and tests).
NVL_UP, NVL_DN, PCIE_UP, PCIE_DN, NIC_TX, NIC_RX, LEAF_UP, SPINE_DN = range(8)
LINK_KIND_NAMES = ("nvl_up", "nvl_dn", "pcie_up", "pcie_dn", "nic_tx", "nic_rx", "leaf_up", "spine_dn")


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise NetsimError(msg)


@dataclass(frozen=True)
class NodeSpec:
    """One server: its GPUs and the links inside it.

    ``nvlink_gbps`` is the raw NVLink bandwidth per GPU per direction (links x per-link rate);
    ``nvlink_efficiency`` turns it into what NCCL's copy kernels reach (NCCL itself assumes
    20.6 GB/s per NVLink4 link against a 25 GB/s line rate: 0.824).
    """

    gpus_per_node: int = 8
    gpu_arch: str = "hopper"
    cpu_vendor: str = "intel"
    nvlink_gbps: float = 450.0
    nvlink_links: int = 18
    nvlink_efficiency: float = 0.824
    nvlink_latency_ns: float = 700.0
    nvswitch: bool = True
    nvls: bool = True
    pcie_gbps: float = 64.0
    pcie_efficiency: float = 0.85
    pcie_latency_ns: float = 1000.0

    def __post_init__(self) -> None:
        _check(isinstance(self.gpus_per_node, int) and 1 <= self.gpus_per_node <= 1024,
               f"node.gpus_per_node must be an integer in 1..1024, got {self.gpus_per_node!r}")
        _check(self.gpu_arch in GPU_ARCHS,
               f"node.gpu_arch must be one of {', '.join(GPU_ARCHS)}, got {self.gpu_arch!r}")
        _check(self.cpu_vendor in ("intel", "amd", "arm"),
               f"node.cpu_vendor must be intel, amd or arm, got {self.cpu_vendor!r}")
        for name in ("nvlink_gbps", "pcie_gbps"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v > 0, f"node.{name} must be a positive number (GB/s), got {v!r}")
        for name in ("nvlink_efficiency", "pcie_efficiency"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and 0 < v <= 1, f"node.{name} must be in (0, 1], got {v!r}")
        for name in ("nvlink_latency_ns", "pcie_latency_ns"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v >= 0, f"node.{name} must be >= 0 (ns), got {v!r}")
        _check(isinstance(self.nvlink_links, int) and self.nvlink_links >= 0,
               f"node.nvlink_links must be a non-negative integer, got {self.nvlink_links!r}")
        _check(not (self.nvls and not self.nvswitch), "node.nvls (NVLink SHARP) needs node.nvswitch = true")
        _check(not (self.nvls and self.gpu_arch not in ("hopper", "blackwell")),
               f"node.nvls needs a hopper or blackwell GPU, not {self.gpu_arch!r}")

    @property
    def nvlink_effective(self) -> float:
        """NVLink bytes/ns per GPU per direction that NCCL's kernels reach."""
        return self.nvlink_gbps * self.nvlink_efficiency

    @property
    def pcie_effective(self) -> float:
        return self.pcie_gbps * self.pcie_efficiency


@dataclass(frozen=True)
class NetworkSpec:
    """The scale-out fabric: NICs, a leaf/spine layer, latencies.

    ``nic_gbits`` is the NIC line rate in Gb/s (400 for NDR); ``nic_efficiency`` is the
    fraction NCCL reaches over InfiniBand (NVIDIA quotes 46-48 GB/s per NDR NIC).
    """

    nics_per_node: int = 8
    nic_gbits: float = 400.0
    nic_efficiency: float = 0.92
    nic_latency_ns: float = 1500.0
    switch_latency_ns: float = 250.0
    nodes_per_leaf: int = 32
    spines: int = 32
    oversubscription: float = 1.0
    rail_optimized: bool = True

    def __post_init__(self) -> None:
        _check(isinstance(self.nics_per_node, int) and self.nics_per_node >= 1,
               f"network.nics_per_node must be an integer >= 1, got {self.nics_per_node!r}")
        _check(isinstance(self.nic_gbits, (int, float)) and self.nic_gbits > 0,
               f"network.nic_gbits must be a positive number (Gb/s), got {self.nic_gbits!r}")
        _check(isinstance(self.nic_efficiency, (int, float)) and 0 < self.nic_efficiency <= 1,
               f"network.nic_efficiency must be in (0, 1], got {self.nic_efficiency!r}")
        for name in ("nic_latency_ns", "switch_latency_ns"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v >= 0, f"network.{name} must be >= 0 (ns), got {v!r}")
        _check(isinstance(self.nodes_per_leaf, int) and self.nodes_per_leaf >= 1,
               f"network.nodes_per_leaf must be an integer >= 1, got {self.nodes_per_leaf!r}")
        _check(isinstance(self.spines, int) and self.spines >= 1,
               f"network.spines must be an integer >= 1, got {self.spines!r}")
        _check(isinstance(self.oversubscription, (int, float)) and self.oversubscription >= 1,
               f"network.oversubscription must be >= 1 (downlink:uplink ratio), got {self.oversubscription!r}")

    @property
    def nic_effective(self) -> float:
        """NIC bytes/ns per direction that NCCL reaches."""
        return self.nic_gbits / 8.0 * self.nic_efficiency

    @property
    def nic_line_rate(self) -> float:
        return self.nic_gbits / 8.0


@dataclass(frozen=True)
class ClusterSpec:
    """A named cluster type: a node design and the fabric between nodes."""

    name: str = "custom"
    node: NodeSpec = field(default_factory=NodeSpec)
    network: NetworkSpec = field(default_factory=NetworkSpec)

    def __post_init__(self) -> None:
        _check(isinstance(self.name, str) and self.name != "", "cluster.name must be a non-empty string")
        _check(isinstance(self.node, NodeSpec), "cluster.node must be a NodeSpec")
        _check(isinstance(self.network, NetworkSpec), "cluster.network must be a NetworkSpec")

    def with_gpus_per_node(self, gpus_per_node: int) -> "ClusterSpec":
        """The same design with a different GPU count per node (``--nproc-per-node``)."""
        if gpus_per_node == self.node.gpus_per_node:
            return self
        return replace(self, node=replace(self.node, gpus_per_node=gpus_per_node))


def splitmix64(x: int) -> int:
    """A stable 64-bit integer hash (same value on every machine and Python run)."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def ecmp_hash(src: int, dst: int, tag: int) -> int:
    """Deterministic ECMP hash of a flow's endpoints and tag (e.g. its channel)."""
    return splitmix64((src * 0x1F3D5B79 + dst) * 0x100000001B3 + tag)


class Topology:
    """A concrete cluster of ``nnodes`` nodes built from a :class:`ClusterSpec`.

    Links are numbered densely; ``link_cap`` (bytes/ns) and ``link_lat`` (ns) are numpy
    arrays indexed by link id. GPUs are numbered ``node * gpus_per_node + local``.
    """

    def __init__(self, spec: ClusterSpec, nnodes: int) -> None:
        _check(isinstance(nnodes, int) and nnodes >= 1, f"nnodes must be an integer >= 1, got {nnodes!r}")
        self.spec = spec
        self.nnodes = nnodes
        node, net = spec.node, spec.network
        self.gpus_per_node = gpn = node.gpus_per_node
        self.num_gpus = ngpu = nnodes * gpn
        self.nics_per_node = nnic = net.nics_per_node
        caps: list[float] = []
        lats: list[float] = []
        kinds: list[int] = []

        def add(n: int, cap: float, lat: float, kind: int) -> np.ndarray:
            start = len(caps)
            caps.extend([cap] * n)
            lats.extend([lat] * n)
            kinds.extend([kind] * n)
            return np.arange(start, start + n, dtype=np.int64)

        nvl = node.nvlink_effective
        self.nvl_up = add(ngpu, nvl, node.nvlink_latency_ns, NVL_UP)
        self.nvl_dn = add(ngpu, nvl, 0.0, NVL_DN)
        pcie = node.pcie_effective
        self.pcie_up = add(ngpu, pcie, node.pcie_latency_ns / 2, PCIE_UP)
        self.pcie_dn = add(ngpu, pcie, node.pcie_latency_ns / 2, PCIE_DN)
        nic = net.nic_effective
        self.nic_tx = add(nnodes * nnic, nic, net.nic_latency_ns / 2, NIC_TX)
        self.nic_rx = add(nnodes * nnic, nic, net.nic_latency_ns / 2, NIC_RX)
        # Leaves: rail-optimized -> one leaf per (unit, nic index); else one per unit.
        self.nunits = (nnodes + net.nodes_per_leaf - 1) // net.nodes_per_leaf
        self.leaves_per_unit = nnic if net.rail_optimized else 1
        self.nleaves = self.nunits * self.leaves_per_unit
        self.nspines = net.spines if self.nleaves > 1 else 0
        down_per_leaf = net.nodes_per_leaf * (1 if net.rail_optimized else nnic)
        uplink = down_per_leaf * nic / (max(self.nspines, 1) * net.oversubscription)
        self.uplink_cap = uplink
        # leaf_up[leaf * nspines + s] : leaf -> spine s ; spine_dn[leaf * nspines + s] : spine s -> leaf
        self.leaf_up = add(self.nleaves * self.nspines, uplink, net.switch_latency_ns, LEAF_UP)
        self.spine_dn = add(self.nleaves * self.nspines, uplink, net.switch_latency_ns, SPINE_DN)
        self.link_cap = np.asarray(caps, dtype=np.float64)
        self.link_lat = np.asarray(lats, dtype=np.float64)
        self.link_kind = np.asarray(kinds, dtype=np.int8)
        self.num_links = len(caps)
        log.debug("topology %s: %d nodes, %d GPUs, %d links, %d leaves, %d spines",
                  spec.name, nnodes, ngpu, self.num_links, self.nleaves, self.nspines)

    # ----------------------------------------------------------------- addressing
    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node

    def local_of(self, gpu: int) -> int:
        return gpu % self.gpus_per_node

    def nic_of(self, gpu: int) -> int:
        """Global NIC index used by a GPU: NICs are shared evenly when fewer than GPUs."""
        node, local = divmod(gpu, self.gpus_per_node)
        return node * self.nics_per_node + (local * self.nics_per_node) // self.gpus_per_node

    def rail_of(self, gpu: int) -> int:
        """NIC index within the node (the 'rail' in a rail-optimized fabric)."""
        return (self.local_of(gpu) * self.nics_per_node) // self.gpus_per_node

    def gpu_on_rail(self, node: int, rail: int) -> int:
        """The first GPU of ``node`` attached to NIC ``rail``."""
        local = -(-rail * self.gpus_per_node // self.nics_per_node)
        return node * self.gpus_per_node + local

    def leaf_of_nic(self, nic: int) -> int:
        node, rail = divmod(nic, self.nics_per_node)
        unit = node // self.spec.network.nodes_per_leaf
        return unit * self.leaves_per_unit + (rail if self.spec.network.rail_optimized else 0)

    def check_gpu(self, gpu: int) -> None:
        if not (0 <= gpu < self.num_gpus):
            raise NetsimError(f"GPU rank {gpu} is outside this cluster (0..{self.num_gpus - 1})")

    # ----------------------------------------------------------------- paths
    def intra_path(self, src: int, dst: int) -> list[int]:
        """GPU->GPU inside one node: over NVSwitch when present, else over PCIe."""
        if src == dst:
            return []
        if self.spec.node.nvswitch:
            return [int(self.nvl_up[src]), int(self.nvl_dn[dst])]
        return [int(self.pcie_up[src]), int(self.pcie_dn[dst])]

    def nic_path(self, src_nic: int, dst_nic: int, tag: int = 0) -> list[int]:
        """NIC->NIC across the fabric (deterministic ECMP over spines)."""
        la, lb = self.leaf_of_nic(src_nic), self.leaf_of_nic(dst_nic)
        path = [int(self.nic_tx[src_nic])]
        if la != lb:
            s = ecmp_hash(src_nic, dst_nic, tag) % self.nspines
            path.append(int(self.leaf_up[la * self.nspines + s]))
            path.append(int(self.spine_dn[lb * self.nspines + s]))
        path.append(int(self.nic_rx[dst_nic]))
        return path

    def path(self, src: int, dst: int, tag: int = 0, pxn: bool = True) -> list[int]:
        """Link ids a GPU->GPU transfer crosses.

        Across nodes, data leaves through a NIC on the *destination's* rail when ``pxn`` is
        true (NCCL's PXN: an NVLink hop to the GPU next to that NIC first), so rail-optimized
        traffic stays under one leaf; otherwise through the source GPU's own NIC.
        """
        if src == dst:
            return []
        gpn = self.gpus_per_node
        ns, nd = src // gpn, dst // gpn
        if ns == nd:
            return self.intra_path(src, dst)
        rail = self.rail_of(dst) if pxn else self.rail_of(src)
        proxy = self.gpu_on_rail(ns, rail)
        path: list[int] = []
        if proxy != src:
            path += self.intra_path(src, proxy)
        path.append(int(self.pcie_up[proxy]))
        path += self.nic_path(ns * self.nics_per_node + rail, self.nic_of(dst), tag)
        path.append(int(self.pcie_dn[dst]))
        return path

    def path_latency(self, path: list[int]) -> float:
        """Propagation/switching latency (ns) of a path: the sum of its links' latencies."""
        if not path:
            return 0.0
        return float(self.link_lat[np.asarray(path, dtype=np.int64)].sum())

    def link_name(self, link: int) -> str:
        kind = int(self.link_kind[link])
        return f"{LINK_KIND_NAMES[kind]}[{link}]"
