"""NCCL's own performance model (``src/graph/tuning.cc``), reimplemented.

NCCL picks an algorithm and protocol for every collective by estimating
``time = latency + bytes / bandwidth`` for each candidate with the model built in
``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``. We reproduce that model here for two
uses: (1) the *latency* of a simulated collective is NCCL's latency term (base latency of
the algorithm/protocol plus per-step hardware latencies of NVLink, PCI or network), and
(2) :mod:`netsim.selection` picks the algorithm/protocol with NCCL's rule. The *bandwidth*
of a simulated collective does not come from this model: it comes from the flow engine on
the real topology, so contention shows up; this model's bandwidths only drive selection
and the per-protocol ceilings (LL, LL128, tree) NCCL itself assumes.

Constants are NCCL's (``ncclTunerConstantsDefaults`` in tuning.cc as of NCCL 2.2x); the
graph quantities NCCL gets from its topology search (channels, per-channel intra/inter
bandwidth) are derived from our topology by :func:`comm_shape` — an approximation, since
we do not run NCCL's search. Collnet (SHARP switches) and PAT are not modeled.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from netsim.errors import NetsimError

ALGOS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOS = ("LL", "LL128", "Simple")
TREE, RING, COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT = range(7)
LL, LL128, SIMPLE = range(3)
HW_NVLINK, HW_PCI, HW_NET = range(3)

COLLS = ("broadcast", "reduce", "all_gather", "reduce_scatter", "all_reduce")

# --- constants from NCCL src/graph/tuning.cc (ncclTunerConstantsDefaults) -----------------
BASE_LAT = (  # [algo][proto] us
    (6.8, 14.0, 8.4), (6.6, 14.0, 8.4), (0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0), (8.0, 8.0, 8.0))
HW_LAT = (  # [hw][algo][proto] us
    ((0.6, 1.25, 4.0), (0.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 25), (0, 0, 25), (0, 0, 4.0)),
    ((1.0, 1.9, 4.0), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 0), (0, 0, 0), (0, 0, 4.0)),
    ((5.0, 8.5, 14), (2.7, 4.0, 14.0), (0, 0, 31), (0, 0, 30), (0, 0, 18), (0, 0, 20.9), (0, 0, 14)),
)
COMPCAP_IDX = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_MAX_RING_LL128_BW = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (40.0,) * 3)
PER_CH_MAX_TREE_LL128_BW = ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_MAX_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
PER_CH_MAX_NVLS_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}
# Tree all-reduce bandwidth correction by log2(bytes/64), per protocol (tuning.cc).
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
# NCCL's per-NVLink-link bandwidth assumption per architecture (src/graph/topo.h).
NVLINK_BW_PER_LINK = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}


def log2i(n: int) -> int:
    """floor(log2(n)) for n >= 1, 0 for smaller n (NCCL's log2i)."""
    return max(int(n).bit_length() - 1, 0)


@dataclass(frozen=True)
class CommShape:
    """What NCCL's model needs to know about a communicator.

    ``bw_intra``/``bw_inter`` are per-channel GB/s (NCCL's ``graph->bwIntra/bwInter``) and
    ``nchannels`` NCCL's channel counts, per algorithm family.
    """

    nranks: int
    nnodes: int
    arch: str = "hopper"
    cpu_vendor: str = "intel"
    intra_hw: int = HW_NVLINK
    nvls: bool = False
    ring_channels: int = 16
    ring_bw_intra: float = 23.175
    ring_bw_inter: float = 25.0
    nvls_channels: int = 16
    nvls_bw_intra: float = 23.175
    nvls_bw_inter: float = 25.0

    @property
    def ppn(self) -> float:
        return self.nranks / self.nnodes


@dataclass(frozen=True)
class ModelEntry:
    """NCCL's estimate for one (collective, algorithm, protocol): latency (us) and algbw (GB/s)."""

    latency_us: float
    bandwidth: float  # GB/s of algorithm bandwidth; 0 = not available
    busbw_cap: float  # GB/s ceiling NCCL assumes on top of link bandwidth (inf = none)


def nsteps_of(coll: str, nranks: int) -> int:
    """NCCL's step count per collective in its model (tuning.cc: 2(n-1), n-1 or n)."""
    if coll == "all_reduce":
        return 2 * (nranks - 1)
    if coll in ("reduce_scatter", "all_gather"):
        return nranks - 1
    return nranks


def model_entry(coll: str, algo: int, proto: int, shape: CommShape) -> ModelEntry:
    """NCCL's latency/bandwidth model for one candidate (``ncclTopoTuneModel``)."""
    if coll not in COLLS:
        raise NetsimError(f"NCCL's tuning model has no collective {coll!r}")
    nnodes, nranks = shape.nnodes, shape.nranks
    unavailable = ModelEntry(0.0, 0.0, 0.0)
    if nranks <= 1:
        return ModelEntry(0.0, math.inf, math.inf)
    cc = COMPCAP_IDX[shape.arch]
    index2 = nnodes - 1 if nnodes <= 2 else 2
    index1 = cc if nnodes == 1 else (1 if shape.cpu_vendor == "amd" else 0)
    ll_max_bw = LL_MAX_BW[index1][index2]
    nsteps = nsteps_of(coll, nranks)
    ppn = shape.ppn
    # which algorithms exist for which collective
    if coll in ("broadcast", "reduce") and algo != RING:
        return unavailable
    if coll in ("reduce_scatter", "all_gather") and algo not in (RING, NVLS):
        return unavailable
    if algo in (COLLNET_DIRECT, COLLNET_CHAIN, PAT):
        return unavailable
    if algo in (NVLS, NVLS_TREE):
        if proto != SIMPLE or not shape.nvls or ppn < 2:
            return unavailable
        if algo == NVLS and nnodes > 1:
            return unavailable  # multi-node NVLS needs collnet
        if algo == NVLS_TREE and (nnodes == 1 or coll != "all_reduce"):
            return unavailable
        if shape.nvls_channels < 2:
            return unavailable
    if algo == TREE and coll != "all_reduce":
        return unavailable
    is_nvls = algo in (NVLS, NVLS_TREE)
    nch = shape.nvls_channels if is_nvls else shape.ring_channels
    bw_intra = shape.nvls_bw_intra if is_nvls else shape.ring_bw_intra
    bw_inter = shape.nvls_bw_inter if is_nvls else shape.ring_bw_inter
    bw = bw_intra if nnodes <= 2 else bw_inter
    cap = math.inf
    if is_nvls:
        intra = bw_intra * NVLS_EFFICIENCY[cc] * (nch - 1) / nch
        intra *= 2.0 if coll == "all_reduce" else (ppn - 1) / ppn
        inter = bw_inter * (2 if (nnodes <= 2 and algo == NVLS_TREE) else 1)
        bw = min(intra, inter, PER_CH_MAX_NVLS_TREE_BW[cc][index2] if algo == NVLS_TREE else math.inf)
        if algo == NVLS_TREE:
            cap = nch * PER_CH_MAX_NVLS_TREE_BW[cc][index2]
    bus = nch * bw
    if algo == RING and proto == LL:
        bus = min(ll_max_bw, bus * 0.5)
        cap = ll_max_bw
    if algo == RING and proto == LL128:
        cap = nch * PER_CH_MAX_RING_LL128_BW[cc][index2]
        bus = min(bus * 0.92, cap)
    if algo == TREE and coll == "all_reduce":
        cap = nch * PER_CH_MAX_TREE_BW[cc][index2]
        bus = min(bus * 0.92, cap)
    if algo == TREE and proto == LL:
        bus = min(bus / 3.8, ll_max_bw)
        cap = min(cap, ll_max_bw)
    if algo == TREE and proto == LL128:
        c2 = nch * PER_CH_MAX_TREE_LL128_BW[cc][index2]
        bus = min(bus * (7.0 / 9.0 if nnodes == 1 else 120.0 / 128.0), c2)
        cap = min(cap, c2)
    # bus bandwidth -> algorithm bandwidth
    if not (algo != RING and coll in ("all_gather", "reduce_scatter")):
        ratio = nranks / nsteps if algo in (RING, NVLS, NVLS_TREE) else 0.5
        bus *= ratio
    # latency
    lat = BASE_LAT[algo][proto]
    intra_lat = HW_LAT[shape.intra_hw][algo][proto]
    inter_lat = HW_LAT[HW_NET][TREE][proto] if ppn == 1 else HW_LAT[HW_NET][algo][proto]
    hw = shape.intra_hw if nnodes == 1 else HW_NET
    if algo == RING:
        step_lat = HW_LAT[hw][algo][proto]
        if coll in ("reduce", "broadcast"):
            if proto == SIMPLE:
                step_lat = HW_LAT[hw][TREE][proto]
            lat += nsteps * step_lat
        else:
            net_overhead = 0.0
            if nnodes > 1:
                net_overhead = NET_OVERHEAD_US.get(shape.cpu_vendor, 1.0) * (3 if proto == SIMPLE else 1)
            intra_lat = max(intra_lat, net_overhead)
            n_inter = 0 if nnodes == 1 else (2 * (nnodes - 1) if coll == "all_reduce" else nnodes - 1)
            lat += (nsteps - n_inter) * intra_lat + n_inter * inter_lat
    elif algo == TREE:
        lat += 2 * ((nranks // nnodes - 1) * intra_lat + log2i(nnodes) * inter_lat)
    elif algo == NVLS:
        lat = intra_lat + (inter_lat if nnodes > 1 else 0.0)
    elif algo == NVLS_TREE:
        lat += intra_lat + 2 * log2i(nnodes) * inter_lat
    return ModelEntry(lat, bus, cap)


def algo_time_us(coll: str, algo: int, proto: int, nbytes: int, shape: CommShape) -> float:
    """NCCL's ``ncclTopoGetAlgoTime`` for one op (numPipeOps = 1); -1 when unavailable."""
    e = model_entry(coll, algo, proto, shape)
    bw, lat = e.bandwidth, e.latency_us
    if bw == 0:
        return -1.0
    log_size = log2i(nbytes >> 6)
    if algo == TREE and coll == "all_reduce" and 0 <= log_size < 23 and nbytes >= 64:
        bw *= TREE_CORRECTION[proto][log_size]
    if (algo == RING and proto == SIMPLE and shape.nnodes > 1 and coll == "all_reduce"
            and nbytes / (shape.ring_channels * shape.nranks) >= 64):
        lat *= 1.9 if shape.arch == "volta" else 1.4
    return lat + nbytes / (1000.0 * bw)
