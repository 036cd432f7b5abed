"""Point-to-point transfers (send/recv), as NCCL runs them.

A send/recv is one flow from the sender to the receiver. Across nodes NCCL uses PXN: the
sender first writes over NVLink to the GPU that sits next to a NIC on the receiver's rail,
which sends over the network (:meth:`netsim.topology.Topology.path` with ``pxn=True``).

Latency: NCCL's tuning model has no entry for p2p; we charge NCCL's ring/LL base latency
plus one hardware step of the link type crossed (NVLink or network). Not calibrated
against published numbers (none found for DGX H100 sendrecv small-message latency).
"""
from __future__ import annotations

from netsim.tuning import BASE_LAT, HW_LAT, HW_NET, HW_NVLINK, HW_PCI, LL, RING

P2P_BASE_US = BASE_LAT[RING][LL]


def latency_us(cross_node: bool, nvswitch: bool) -> float:
    hw = HW_NET if cross_node else (HW_NVLINK if nvswitch else HW_PCI)
    return P2P_BASE_US + HW_LAT[hw][RING][LL]
