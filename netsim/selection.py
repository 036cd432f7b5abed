"""NCCL-like choice of algorithm and protocol by message size.

NCCL evaluates every enabled (algorithm, protocol) with its model
(:func:`netsim.tuning.algo_time_us`) and takes the fastest, scanning algorithms in its enum
order (tree, ring, collnet..., NVLS, NVLSTree, PAT) and protocols in order (LL, LL128,
Simple), keeping the first strict minimum. We do the same, so e.g. on one DGX H100 a small
all-reduce runs ring/LL and from about 2 MB on NVLS/Simple, as NCCL_DEBUG=TUNING shows on
real machines (NVIDIA/nccl-tests#309).

Callers may force an algorithm and/or protocol (like ``NCCL_ALGO``/``NCCL_PROTO``).
"""
from __future__ import annotations

from dataclasses import dataclass

from netsim.errors import NetsimError
from netsim.tuning import ALGOS, PROTOS, CommShape, algo_time_us, model_entry

_ALGO_ALIASES = {"nvlstree": "nvls_tree", "nvls-tree": "nvls_tree", "collnet": "collnet_direct"}


@dataclass(frozen=True)
class Choice:
    algo: str
    proto: str
    latency_us: float
    model_time_us: float
    busbw_cap: float  # GB/s ceiling from NCCL's model (inf = none)


def parse_algo(name: str) -> int:
    key = name.strip().lower()
    key = _ALGO_ALIASES.get(key, key)
    if key not in ALGOS:
        raise NetsimError(f"unknown algorithm {name!r}; known: tree, ring, nvls, nvls_tree")
    return ALGOS.index(key)


def parse_proto(name: str) -> int:
    for i, p in enumerate(PROTOS):
        if p.lower() == name.strip().lower():
            return i
    raise NetsimError(f"unknown protocol {name!r}; known: {', '.join(PROTOS)}")


def select(coll: str, nbytes: int, shape: CommShape, algo: str | None = None,
           proto: str | None = None) -> Choice:
    """The (algorithm, protocol) NCCL would run ``coll`` of ``nbytes`` with."""
    algos = [parse_algo(algo)] if algo else list(range(len(ALGOS)))
    protos = [parse_proto(proto)] if proto else list(range(len(PROTOS)))
    best = None
    for a in algos:
        for p in protos:
            t = algo_time_us(coll, a, p, nbytes, shape)
            if t < 0:
                continue
            if best is None or t < best[0]:
                best = (t, a, p)
    if best is None:
        what = f"algorithm={algo!r} protocol={proto!r}" if (algo or proto) else "any algorithm"
        raise NetsimError(f"{coll} on {shape.nranks} ranks / {shape.nnodes} nodes: {what} is not available")
    t, a, p = best
    e = model_entry(coll, a, p, shape)
    return Choice(ALGOS[a], PROTOS[p], e.latency_us, t, e.busbw_cap)
