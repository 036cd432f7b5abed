"""NCCL's size ramp on NVLink: the rate a ring or p2p collective reaches inside a node.

The flow engine moves a collective's bytes at the rate its links allow, so without this a
collective reaches the NVLink plateau as soon as NCCL's latency is amortized (~128 MiB).
Measured NCCL does not: on 2 x H200 (tests/data/real/h200x2, NCCL 2.28.9) busbw keeps
growing up to 2-8 GiB (all_reduce 241 GB/s at 32 MiB, 311 at 512 MiB, 343 at 8 GiB), and
the published DGX H100 curves in tests/data/nccl_tests ramp the same way in mid sizes.
Per byte each rank sends, the measured curves of all_reduce, all_gather, reduce_scatter,
alltoall and sendrecv lie on one shape; only their ceilings differ.

The model (a ceiling on the collective's rate; the links still bound it, and concurrent
collectives still share them in the flow engine):

    per-rank send rate <= nvlink_gbps * eff(op, n) * ramp(S)
    ramp(S)      = 1 / (1 + (RAMP_BYTES / S) ** RAMP_EXPONENT),   S = bytes one rank sends
    eff(op, n)   = 1 / (1 + OWN_DATA_COST[op] / (n - 1))

``nvlink_gbps`` is the raw NVLink bandwidth per GPU and direction; the NVLink-effective link
rate (NCCL's 20.6 of 25 GB/s per link) binds first at large sizes, so the plateau is the
link's as before. ``ramp`` stands for whatever keeps NCCL's Simple protocol from filling
NVLink below GiB sizes; the cause is not identified (candidates: per-step flag handshakes over
its 512 KiB FIFO slots, channels starting unevenly, clocks), and the shape is fitted, not derived. ``eff`` is the work a rank
does on its own block besides sending (all_gather copies it into the output, reduce_scatter
reduces it, all_to_all copies it): one block in n - 1 sent, so it costs most on two ranks and
fades with more. ``phantora-prof calibrate nccl-ramp`` fits the constants to the 2 x H200 sweep and
prints the residuals (busbw within 7% at 32 MiB - 8 GiB; tests/test_generated_data.py checks that
these are still its fit). The ramp applies to single-node communicators on NVLink with the
Simple protocol (ring, p2p), where it was measured. NVLS, tree, LL/LL128 and multi-node collectives keep the plain flow-engine rate (the H200 capture
had NVLS off; multi-node rings are NIC-bound). On 8 ranks (DGX H100) it brings the simulated
reduce_scatter/all_gather at 1 GiB from 2-5% above the published figures to 6-8% below them
(within the checked 10%); at 8 GiB they stay within 3%.
"""
from __future__ import annotations

import math

RAMP_BYTES = 8 << 20          # S at which ramp(S) = 1/2 (bytes one rank sends)
RAMP_EXPONENT = 0.25
# extra work on a rank's own block, relative to sending one block (fitted on 2 ranks)
OWN_DATA_COST = {"all_reduce": 0.06, "all_gather": 0.22, "reduce_scatter": 0.24, "all_to_all": 0.09,
                 "send_recv": 0.02, "broadcast": 0.0, "reduce": 0.0}


def sent_per_rank(op: str, n: int, nbytes: float) -> float:
    """Bytes one rank sends for an ``op`` of ``nbytes`` (nccl-tests' size) on ``n`` ranks."""
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n * nbytes
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n * nbytes
    return float(nbytes)  # send_recv, broadcast, reduce: the whole buffer


def ramp(sent_bytes: float) -> float:
    if sent_bytes <= 0:
        return 0.0
    return 1.0 / (1.0 + (RAMP_BYTES / sent_bytes) ** RAMP_EXPONENT)


def efficiency(op: str, n: int) -> float:
    return 1.0 / (1.0 + OWN_DATA_COST.get(op, 0.0) / max(1, n - 1))


def rate_ceiling(op: str, n: int, sent_bytes: float, nvlink_gbps: float) -> float:
    """Bytes/ns a rank that sends ``sent_bytes`` in all can send at for this collective."""
    if sent_bytes <= 0:
        return math.inf
    return nvlink_gbps * efficiency(op, n) * ramp(sent_bytes)


def send_rate_ceiling(op: str, n: int, nbytes: float, nvlink_gbps: float) -> float:
    """:func:`rate_ceiling` for an ``op`` of ``nbytes`` (nccl-tests' size) on ``n`` ranks."""
    return rate_ceiling(op, n, sent_per_rank(op, n, nbytes), nvlink_gbps)
