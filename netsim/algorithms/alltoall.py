"""All-to-all (even or uneven splits), as NCCL runs it: concurrent send/recv to every peer.

Every ordered pair (i, j) with bytes to move is its own flow (over NVLink inside a node,
over PXN and the fabric across nodes), all started together; max-min sharing decides how
the NICs and NVLink ports are shared, and the all-to-all ends when the last pair is done.
On N nodes with one NIC per GPU this gives busbw = N/(N-1) x per-NIC bandwidth, the value
NVIDIA gives for nccl-tests' alltoall (NVIDIA/nccl-tests#130).

Cost: n*(n-1) flows, so this is meant for groups up to a few hundred ranks (expert
parallelism), not for all-to-alls over tens of thousands of GPUs.
"""
from __future__ import annotations

import numpy as np

from netsim.errors import NetsimError


def even_split(n: int, nbytes: int) -> np.ndarray:
    """nccl-tests' alltoall: each rank sends nbytes/n to every rank (itself included)."""
    m = np.full((n, n), nbytes // n, dtype=np.int64)
    return m


def check_split(split, n: int) -> np.ndarray:
    m = np.asarray(split, dtype=np.int64)
    if m.shape != (n, n):
        raise NetsimError(f"all_to_all split must be an {n}x{n} matrix of bytes (src row, dst column), got shape {m.shape}")
    if (m < 0).any():
        raise NetsimError("all_to_all split has negative byte counts")
    return m
