"""NCCL collective algorithms as traffic patterns on a topology.

Each module turns (collective, ranks, channels, protocol) into the bytes every link carries
per byte of the collective's size ("link weights"), the way NCCL moves the data: ring
(``ring``), double binary tree (``tree``), NVLink SHARP and NVLS+tree (``nvls``),
all-to-all (``alltoall``) and point-to-point (``p2p``). ``common`` holds the rank layout and
the weight accumulator. They also expose the logical step schedules (e.g. a ring all-reduce
is 2(n-1) steps) that the tests check.
"""
from netsim.algorithms.common import LinkWeights, RankLayout

__all__ = ["LinkWeights", "RankLayout"]
