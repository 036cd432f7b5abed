"""Cluster presets for the systems as NVIDIA ships them.

- ``dgx-h100``: 8x H100 SXM5, NVLink4 (18 links x 25 GB/s = 450 GB/s per direction) through
  NVSwitch with NVLink SHARP (NVLS); 8x ConnectX-7 400 Gb/s NDR InfiniBand (one per GPU);
  PCIe Gen5 x16. Source: NVIDIA DGX H100 user guide / datasheet.
- ``dgx-h200``: 8x H200 SXM; same NVLink4/NVSwitch and 8x 400 Gb/s ConnectX-7 as DGX H100
  (DGX H200 datasheet).
- ``dgx-a100``: 8x A100 SXM4, NVLink3 (12 links x 25 GB/s = 300 GB/s per direction) through
  NVSwitch, no NVLS; 8x ConnectX-6 200 Gb/s HDR InfiniBand compute NICs; PCIe Gen4 x16
  (DGX A100 user guide).

Efficiencies: NVLink uses NCCL's own per-link bandwidth assumptions (``SM90_NVLINK_BW`` 20.6
and ``SM80_NVLINK_BW`` 20.0 GB/s per link in NCCL's src/graph/topo.h, against the 25 GB/s
line rate); InfiniBand uses 0.92 of line rate (NVIDIA: "46-48 GB/s per NDR NIC" in
NVIDIA/nccl-tests#290). The fabric defaults to a non-blocking rail-optimized two-level fat
tree with 32 nodes per leaf (the DGX SuperPOD scalable unit) built from 64-port switches
(32 ports down, 32 up to 32 spines). DGX H100/H200 hosts are Intel Xeon, DGX A100 hosts
AMD EPYC (NCCL's model uses the CPU vendor for network overheads).
"""
from __future__ import annotations

from netsim.errors import NetsimError
from netsim.topology import ClusterSpec, NetworkSpec, NodeSpec

_HOPPER_NODE = NodeSpec(
    gpus_per_node=8, gpu_arch="hopper", nvlink_gbps=450.0, nvlink_links=18,
    nvlink_efficiency=20.6 / 25.0, nvswitch=True, nvls=True, pcie_gbps=64.0,
)
_NDR = NetworkSpec(nics_per_node=8, nic_gbits=400.0, nic_efficiency=0.92, nodes_per_leaf=32, spines=32)

PRESETS: dict[str, ClusterSpec] = {
    "dgx-h100": ClusterSpec(name="dgx-h100", node=_HOPPER_NODE, network=_NDR),
    "dgx-h200": ClusterSpec(name="dgx-h200", node=_HOPPER_NODE, network=_NDR),
    "dgx-a100": ClusterSpec(
        name="dgx-a100",
        node=NodeSpec(gpus_per_node=8, gpu_arch="ampere", cpu_vendor="amd", nvlink_gbps=300.0, nvlink_links=12,
                      nvlink_efficiency=20.0 / 25.0, nvswitch=True, nvls=False, pcie_gbps=32.0),
        network=NetworkSpec(nics_per_node=8, nic_gbits=200.0, nic_efficiency=0.92,
                            nodes_per_leaf=20, spines=20),
    ),
}


def get_preset(name: str) -> ClusterSpec:
    """The preset called ``name`` (case-insensitive; ``_`` and ``-`` are the same)."""
    key = name.strip().lower().replace("_", "-")
    if key not in PRESETS:
        raise NetsimError(f"unknown cluster preset {name!r}; known presets: {', '.join(sorted(PRESETS))}")
    return PRESETS[key]
