"""nccl-tests style sweeps: the rows and the table ``all_reduce_perf`` & co. print.

``run_sweep("all_reduce", nnodes=2, nproc_per_node=8, cluster="dgx-h100", min_bytes=8,
max_bytes=8 << 30, factor=2)`` simulates each size alone on the cluster (like nccl-tests,
one collective at a time over all ranks) and returns :class:`Row` objects;
:func:`format_table` renders them in nccl-tests' layout (out-of-place columns only).

Sizes and counts follow nccl-tests: the size is rounded down to a whole number of elements
per rank (all_gather, reduce_scatter, alltoall) or of elements (others), and the count
column is per rank for all_gather/reduce_scatter/alltoall. Bus bandwidth uses nccl-tests'
factors (doc/PERFORMANCE.md): all_reduce 2(n-1)/n; all_gather, reduce_scatter and
alltoall (n-1)/n; broadcast, reduce and sendrecv 1.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from netsim.cluster_file import resolve_cluster
from netsim.errors import NetsimError
from netsim.network import CollectiveRequest, Network
from netsim.topology import ClusterSpec

log = logging.getLogger(__name__)

DTYPES = {"int8": 1, "uint8": 1, "char": 1, "half": 2, "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4,
          "float": 4, "float32": 4, "int64": 8, "uint64": 8, "double": 8, "float64": 8, "fp8_e4m3": 1,
          "fp8_e5m2": 1}
# nccl-tests binary names -> netsim ops
TEST_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "alltoall": "all_to_all", "all_to_all": "all_to_all", "broadcast": "broadcast", "reduce": "reduce",
            "sendrecv": "send_recv", "send_recv": "send_recv"}
_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum"}
_DTYPE_NAME = {"float32": "float", "float16": "half", "float64": "double", "uint8": "uint8", "int8": "int8"}


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor for ``op`` on ``n`` ranks."""
    op = TEST_OPS.get(op, op)
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class Row:
    """One line of an nccl-tests table."""

    size: int           # bytes
    count: int          # elements (per rank for all_gather/reduce_scatter/alltoall)
    dtype: str
    redop: str
    root: int
    time_us: float
    algbw: float        # GB/s
    busbw: float        # GB/s
    algorithm: str
    protocol: str


def _align(op: str, size: int, n: int, wsize: int) -> tuple[int, int]:
    """nccl-tests' rounding of a requested size, and its count column."""
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        per_rank = size // wsize // n
        return per_rank * n * wsize, per_rank
    count = size // wsize
    return count * wsize, count


def parse_size(text: str | int) -> int:
    """nccl-tests' size syntax: a byte count with an optional K, M or G suffix (powers of 1024)."""
    if isinstance(text, int):
        return text
    t = str(text).strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if t and t[-1] in mult:
            return int(float(t[:-1]) * mult[t[-1]])
        return int(t)
    except ValueError:
        raise NetsimError(f"cannot read size {text!r}: use a byte count like 8, 64K, 128M or 8G") from None


def sizes(min_bytes: int, max_bytes: int, factor: float = 2.0, step_bytes: int | None = None) -> list[int]:
    """The sizes nccl-tests sweeps: multiply by ``factor`` (or add ``step_bytes``)."""
    if min_bytes < 0 or max_bytes < min_bytes:
        raise NetsimError(f"need 0 <= min_bytes <= max_bytes, got {min_bytes} and {max_bytes}")
    out = []
    s = min_bytes
    while s <= max_bytes:
        out.append(int(s))
        if step_bytes:
            s += step_bytes
        else:
            if factor <= 1:
                raise NetsimError(f"factor must be > 1, got {factor}")
            s = int(s * factor) if s > 0 else 1
    return out


def run_sweep(op: str, nnodes: int, nproc_per_node: int, cluster: str | ClusterSpec, min_bytes: int,
              max_bytes: int, factor: float = 2.0, dtype: str = "float32", *, step_bytes: int | None = None,
              algorithm: str | None = None, protocol: str | None = None, root: int = 0) -> list[Row]:
    """Simulate an nccl-tests sweep of ``op`` over all ``nnodes * nproc_per_node`` GPUs."""
    key = op.strip().lower()
    if key not in TEST_OPS:
        raise NetsimError(f"unknown nccl-tests op {op!r}; known: {', '.join(sorted(set(TEST_OPS) - {'all_to_all', 'send_recv'}))}")
    nop = TEST_OPS[key]
    if dtype not in DTYPES:
        raise NetsimError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    wsize = DTYPES[dtype]
    spec = resolve_cluster(cluster)
    if not isinstance(nnodes, int) or nnodes < 1:
        raise NetsimError(f"nnodes must be an integer >= 1, got {nnodes!r}")
    if not isinstance(nproc_per_node, int) or nproc_per_node < 1:
        raise NetsimError(f"nproc_per_node must be an integer >= 1, got {nproc_per_node!r}")
    if nproc_per_node > spec.node.gpus_per_node:
        # more processes than the design has GPUs: a node of that many GPUs, same links
        spec = spec.with_gpus_per_node(nproc_per_node)
    net = Network.from_cluster(spec, nnodes)
    gpn = net.topology.gpus_per_node
    ranks = [node * gpn + i for node in range(nnodes) for i in range(nproc_per_node)]
    n = len(ranks)
    rows: list[Row] = []
    for s in sizes(min_bytes, max_bytes, factor, step_bytes):
        size, count = _align(nop, s, n, wsize)
        req = CollectiveRequest(nop, ranks, size, algorithm=algorithm, protocol=protocol, root=root)
        res = net.collective_time(req)
        t_us = res.duration_ns / 1e3
        algbw = size / res.duration_ns if res.duration_ns > 0 else 0.0
        rows.append(Row(size, count, _DTYPE_NAME.get(dtype, dtype), _REDOP.get(nop, "none"),
                        root if nop in ("broadcast", "reduce") else -1, t_us, algbw,
                        algbw * busbw_factor(nop, n), res.algorithm, res.protocol))
    return rows


def _fmt_time(t: float) -> str:
    if t >= 10000.0:
        return f"{t:7.0f}"
    if t >= 100.0:
        return f"{t:7.1f}"
    return f"{t:7.2f}"


def format_table(rows: list[Row], show_algorithm: bool = False) -> str:
    """Render rows like nccl-tests (out-of-place columns), with its average busbw line."""
    head = ["#                                                              out-of-place",
            "#       size         count      type   redop    root     time   algbw   busbw"
            + ("  algorithm" if show_algorithm else ""),
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"]
    lines = list(head)
    for r in rows:
        line = (f"{r.size:12d}  {r.count:12d}  {r.dtype:>8s}  {r.redop:>6s}  {r.root:6d}  "
                f"{_fmt_time(r.time_us)}  {r.algbw:6.2f}  {r.busbw:6.2f}")
        if show_algorithm:
            line += f"  {r.algorithm}/{r.protocol}"
        lines.append(line)
    avg = sum(r.busbw for r in rows) / len(rows) if rows else 0.0
    lines.append(f"# Avg bus bandwidth    : {avg:g}")
    return "\n".join(lines) + "\n"
