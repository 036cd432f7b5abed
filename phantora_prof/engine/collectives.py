"""Collectives across ranks: their timing model and their place on each member's timeline.

A collective couples the timelines of its members. Each member's `CollectiveCall` tells
when that member's GPU is *ready* for it (the work enqueued before it on the launching
stream and on the communicator stream is done, and it was launched). The coordinator
collects the calls of all members (`PendingCollective`); when the last one arrives, the
collective starts at the latest readiness and lasts what the `CollectiveModel` says. Each
member's timeline then gets the kernel on its communicator stream and the host spans
(`c10d::*`, `record_param_comms`, `nccl:*`) that a real trace has.

The result depends only on the members' call sequences, never on the order in which their
messages reached the coordinator, so a run is reproducible whatever the OS scheduling.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from phantora_prof import hostcost
from phantora_prof.errors import PhantoraError
from phantora_prof.protocol import CollectiveCall

log = logging.getLogger(__name__)


class CollectiveError(PhantoraError):
    """Ranks disagree about a collective (mismatch, missing rank, deadlock)."""


# ---- timing model ----

class CollectiveModel(Protocol):
    def duration(self, op: str, ranks: tuple[int, ...], nbytes: int, root: int = 0,
                 peer: int = -1) -> tuple[int, str, str]:
        """(duration ns, algorithm, protocol) of one collective running alone."""


_CLUSTER_OF_GPU = {"h200": "dgx-h200", "h100": "dgx-h100", "a100": "dgx-a100"}
_ARCH_NAMES = {"sm70": "volta", "sm80": "ampere", "sm90": "hopper", "sm100": "blackwell"}


def default_cluster(gpu: str) -> str:
    """The network preset a GPU comes in (its DGX); an error for a GPU with none, rather than
    another GPU's network."""
    from phantora_prof.errors import ConfigError

    key = gpu.lower()
    if key not in _CLUSTER_OF_GPU:
        raise ConfigError(f"no network preset for GPU {gpu!r} (known: {', '.join(sorted(_CLUSTER_OF_GPU))}): "
                          "pass --cluster PRESET or a TOML cluster file")
    return _CLUSTER_OF_GPU[key]


def check_cluster(cluster: str, gpu) -> str:
    """Validate --cluster (a preset name or a TOML file) against the simulated GPU; returns the
    preset name or the file's absolute path, for the coordinator."""
    from pathlib import Path

    from netsim import NetsimError
    from netsim.cluster_file import resolve_cluster

    from phantora_prof.errors import ConfigError

    try:
        spec = resolve_cluster(cluster)
    except (NetsimError, OSError) as exc:
        raise ConfigError(f"--cluster {cluster}: {exc}") from None
    arch = _ARCH_NAMES.get(gpu.arch)
    if arch is not None and spec.node.gpu_arch != arch:
        raise ConfigError(f"--cluster {cluster} has {spec.node.gpu_arch} GPUs, but --gpu {gpu.key} is {arch}: "
                          "pick a cluster of that GPU or another --gpu")
    p = Path(cluster).expanduser()
    return str(p.resolve()) if p.exists() else cluster


class NetsimModel:
    """Times collectives with netsim's flow-level model of NCCL: alone (`duration`), or
    together with the collectives still in flight on its members (`shared_duration`)."""

    def __init__(self, gpu: str, nnodes: int, gpus_per_node: int, cluster: str | None = None):
        from netsim import Network

        self.cluster = cluster or default_cluster(gpu)
        self.net = Network.from_cluster(self.cluster, nnodes, gpus_per_node)
        self._cache: dict[tuple, tuple[int, str, str]] = {}

    def duration(self, op: str, ranks: tuple[int, ...], nbytes: int, root: int = 0,
                 peer: int = -1) -> tuple[int, str, str]:
        key = (op, ranks, nbytes, root)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        req = self._request(op, ranks, nbytes, root)
        if req is None:
            # NCCL with one rank: an in-place no-op or a device copy
            res = (2_000 + nbytes // 1_000, "RING", "LL")  # (no kernel is traced for one rank)
            self._cache[key] = res
            return res
        r = self.net.collective_time(req)
        res = (max(1_000, int(round(r.end_ns - r.start_ns))), _algo_name(r.algorithm), str(r.protocol).upper())
        self._cache[key] = res
        return res

    def shared_duration(self, op: str, ranks: tuple[int, ...], nbytes: int, root: int, start_ns: int,
                        running: list) -> tuple[int, str, str]:
        """Like `duration`, for a collective that starts at `start_ns` while the `running` ones
        (engine.contention.InFlightCollective) are in flight: netsim simulates them together, so
        they share the links they have in common."""
        own = self._request(op, ranks, nbytes, root)
        others = [(c, self._request(c.op, c.ranks, c.nbytes, c.root)) for c in running]
        others = [(c, r) for c, r in others if r is not None]
        if own is None or not others:
            return self.duration(op, ranks, nbytes, root)
        t0 = min([start_ns] + [c.start_ns for c, _ in others])
        key = ("shared", op, ranks, nbytes, root, start_ns - t0,
               tuple((c.op, c.ranks, c.nbytes, c.root, c.start_ns - t0) for c, _ in others))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        from dataclasses import replace

        reqs = [replace(r, start_ns=float(c.start_ns - t0)) for c, r in others]
        reqs.append(replace(own, start_ns=float(start_ns - t0)))
        r = self.net.simulate_collectives(reqs)[-1]
        res = (max(1_000, int(round(r.end_ns - r.start_ns))), _algo_name(r.algorithm), str(r.protocol).upper())
        if len(self._cache) < 100_000:
            self._cache[key] = res
        return res

    def _request(self, op: str, ranks: tuple[int, ...], nbytes: int, root: int):
        from netsim import CollectiveRequest

        if op == "send_recv":  # ranks = (sender, receiver)
            return CollectiveRequest("send_recv", (ranks[0],), nbytes, peer=ranks[-1])
        if len(ranks) == 1:
            return None
        idx = ranks.index(root) if op in ("broadcast", "reduce") and root in ranks else 0
        return CollectiveRequest(op, ranks, nbytes, root=idx)


def _algo_name(a: str) -> str:
    # NCCL's kernel names (src/device/generate.py): ALGO in TREE, RING, NVLS, NVLS_TREE, COLLNET_*, PAT
    return {"ring": "RING", "tree": "TREE", "nvls": "NVLS", "nvls_tree": "NVLS_TREE", "p2p": "P2P",
            "collnet_direct": "COLLNET_DIRECT", "collnet_chain": "COLLNET_CHAIN"}.get(a, a.upper())


# ---- names as NCCL and the profiler spell them ----

_NCCL_DTYPE = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64", "int64": "i64",
               "int32": "i32", "uint8": "u8", "int8": "i8", "bool": "u8", "float8_e4m3fn": "f8e4m3",
               "float8_e5m2": "f8e5m2"}
_PROFILER_DTYPE = {"float32": "Float", "bfloat16": "BFloat16", "float16": "Half", "float64": "Double",
                   "int64": "Long", "int32": "Int", "uint8": "Byte", "int8": "Char", "bool": "Bool",
                   "int16": "Short"}
_KERNEL_OP = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
              "broadcast": "Broadcast", "reduce": "Reduce"}
_REDOP = {"sum": "Sum", "avg": "Sum", "product": "Prod", "min": "MinMax", "max": "MinMax",
          "premul_sum": "PreMulSum"}
_ANNOTATION = {"all_reduce": "nccl:all_reduce", "all_gather": "nccl:_all_gather_base",
               "reduce_scatter": "nccl:_reduce_scatter_base", "broadcast": "nccl:broadcast",
               "reduce": "nccl:reduce", "all_to_all": "nccl:all_to_all", "send_recv": "nccl:send"}


_ANNOTATION_TYPE = {"float32": "float", "bfloat16": "c10::BFloat16", "float16": "c10::Half", "float64": "double",
                    "int64": "long int", "int32": "int", "uint8": "unsigned char", "int8": "signed char", "bool": "bool"}


def profiler_dtype(dtype: str) -> str:
    return _PROFILER_DTYPE.get(dtype, dtype)


def kernel_name(call: CollectiveCall, algorithm: str, protocol: str) -> str:
    suffix = "(ncclDevKernelArgsStorage<4096ul>)"
    if call.op in ("send_recv", "all_to_all"):
        return f"ncclDevKernel_SendRecv{suffix}"
    op = _KERNEL_OP.get(call.op, call.op)
    dt = _NCCL_DTYPE.get(call.dtype, call.dtype)
    if call.op in ("all_gather", "broadcast"):
        return f"ncclDevKernel_{op}_{algorithm}_{protocol}{suffix}"
    red = _REDOP.get(call.reduce_op, "Sum")
    return f"ncclDevKernel_{op}_{red}_{dt}_{algorithm}_{protocol}{suffix}"


# ---- the coordinator's table of collectives in flight ----

@dataclass
class PendingCollective:
    key: tuple[str, int]  # (group, seq)
    ranks: tuple[int, ...]
    calls: dict[int, CollectiveCall] = field(default_factory=dict)
    ready: dict[int, int] = field(default_factory=dict)
    first_arrival_s: float = 0.0

    def missing(self) -> list[int]:
        return [r for r in self.ranks if r not in self.calls]

    def check(self, call: CollectiveCall) -> None:
        """Raise if `call` disagrees with the calls already here."""
        if not self.calls:
            return
        other_rank = min(self.calls)
        other = self.calls[other_rank]
        diffs = []
        if call.ranks is not other.ranks and tuple(call.ranks) != tuple(other.ranks):
            diffs.append(f"group ranks {list(other.ranks)} vs {list(call.ranks)}")
        if call.op != other.op:
            diffs.append(f"op {other.op} ({other.coll_name}) vs {call.op} ({call.coll_name})")
        if call.nbytes != other.nbytes:
            diffs.append(f"size {other.nbytes} vs {call.nbytes} bytes")
        if call.dtype != other.dtype:
            diffs.append(f"dtype {other.dtype} vs {call.dtype}")
        if call.op in ("all_reduce", "reduce", "reduce_scatter") and call.reduce_op != other.reduce_op:
            diffs.append(f"reduce op {other.reduce_op} vs {call.reduce_op}")
        if call.op in ("broadcast", "reduce") and call.root != other.root:
            diffs.append(f"root {other.root} vs {call.root}")
        if diffs:
            raise CollectiveError(
                f"mismatched collective in process group {call.group!r} ({call.group_desc}, ranks "
                f"{list(call.ranks)}), collective #{call.seq} of the group on each rank: rank {other_rank} called "
                f"{other.coll_name}, rank {call.rank} called {call.coll_name}; they differ in "
                f"{'; '.join(diffs)}. Every member must issue the same collectives, in the same order, "
                "with the same sizes and dtypes.")


# ---- a member's timeline ----

# torch.profiler (saveNcclMeta, truncate on by default) lists at most this many group ranks
_RANKS_SHOWN = 30


def ranks_arg(ranks: tuple[int, ...]) -> str:
    """A collective's "Process Group Ranks" as torch.profiler writes it: the list, or for a
    group of more than 30 ranks its first 30 and ", ..." (also keeps a 16,384-rank group's
    trace events small)."""
    if len(ranks) > _RANKS_SHOWN:
        return "[" + ", ".join(map(str, ranks[:_RANKS_SHOWN])) + ", ...]"
    return str(list(ranks))


def readiness(tl: Any, call: CollectiveCall) -> int:
    """When this member's GPU can start the collective (NCCL: the communicator stream waits
    for the launching stream, then runs in order)."""
    gpu = tl.gpu(call.device)
    gpu.stream(call.comm_stream)
    ready = max(gpu.record_event(call.stream, call.host_ns), gpu.stream_done_ns(call.comm_stream),
                call.host_ns + tl.profile.launch_latency_ns)
    return ready


def complete(tl: Any, call: CollectiveCall, start_ns: int, end_ns: int, algorithm: str, protocol: str,
             ready_ns: int | None = None) -> None:
    """Put the resolved collective on this member's timeline and trace. The transfer runs over
    [start_ns, end_ns] on every member; this member's kernel runs from `ready_ns` (when its
    stream reached it; it waits for the other members until `start_ns`), as NCCL's does."""
    from tracing.model import Flow, FlowEnd, Span

    gpu = tl.gpu(call.device)
    s = gpu.stream(call.comm_stream)
    s.pending_waits.clear()
    s.tail_ns = max(s.tail_ns, end_ns)
    start_ns = start_ns if ready_ns is None else min(start_ns, ready_ns)
    s.busy_ns += end_ns - start_ns
    ends = getattr(tl, "collective_end", None)
    if ends is None:
        ends = tl.collective_end = {}
    ends[(call.group, call.seq)] = end_ns
    groups = getattr(tl, "pg_seen", None)
    if groups is None:
        groups = tl.pg_seen = {}
    if call.group not in groups or groups[call.group][0] == "undefined":  # a description set after creation wins
        groups[call.group] = (call.group_desc, tuple(call.ranks))

    tid = tl._host_tid(call.tid)
    n = len(call.ranks)
    dtype = profiler_dtype(call.dtype)
    ranks_str = ranks_arg(call.ranks)
    stride = (call.ranks[1] - call.ranks[0]) if n > 1 else 1
    dims = [list(d) for d in call.input_dims] if call.input_dims else [[call.in_nelems]]
    span = call.end_ns - call.start_ns
    ext = call.external_id
    strides = [[1] for _ in dims]
    tl.spans.append(Span("cpu_op", f"c10d::{_c10d_op(call)}", tid, call.start_ns, span, {
        "External id": ext, "Record function id": 0, "Concrete Inputs": ["", "", "", "", "True", "-1"],
        "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"], "Input Strides": [strides, [], [], [], [], []],
        "Input Dims": [dims, [], [], [], [], []]}))
    rpc_start = call.start_ns + span // 5
    rpc_dur = max(1, span * 3 // 5)
    coll_args = {
        "Collective name": call.coll_name, "Process Group Description": call.group_desc, "dtype": dtype,
        "Rank": call.rank,
        "Out msg nelems": call.out_nelems, "Process Group Name": call.group.split(":")[0],
        "Global rank stride": stride, "Out split size": "[]", "In split size": "[]",
        "Process Group Ranks": ranks_str, "Group size": n, "Global rank start": call.ranks[0],
        "In msg nelems": call.in_nelems,
    }
    args = {"External id": ext + 1, "Record function id": 0}
    args.update(coll_args)
    args["Concrete Inputs"] = ["", "", "", str(call.rank), "", "[]", "[]", str(call.ranks[0]), str(stride), str(n)]
    args["Input type"] = ["TensorList", "", "", "Scalar", "", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"]
    args["Input Strides"] = [strides] + [[] for _ in range(9)]
    args["Input Dims"] = [dims] + [[] for _ in range(9)]
    tl.spans.append(Span("cpu_op", "record_param_comms", tid, rpc_start, rpc_dur, args))
    ann = _ANNOTATION.get(call.op, f"nccl:{call.op}")
    if call.coll_name == "recv":
        ann = "nccl:recv"
    elif call.coll_name == "barrier":
        ann = "nccl:all_reduce_barrier"  # ProcessGroupNCCL::barrier's range, as the real pp profile shows it
    tl.spans.append(Span("user_annotation", ann, tid, rpc_start + rpc_dur // 8, rpc_dur * 5 // 8, {
        "External id": ext + 2, "Record function id": 0, "Concrete Inputs": [""],
        "Input type": [_ANNOTATION_TYPE.get(call.dtype, call.dtype)], "Input Strides": [[1]], "Input Dims": dims[:1]}))
    if n == 1 and call.op != "send_recv":
        return  # NCCL launches no kernel for a one-rank communicator (see the gpt_ddp1 reference)
    api = "cuLaunchKernelEx"
    corr = tl._api_span(api, tid, call.host_ns, hostcost.api_ns(api), ext + 1)
    ctas = tl.contention.nccl_ctas(call.op, n)  # NCCL's channels: one CTA each (as the H200 traces show)
    threads = 640 if call.op in ("send_recv", "all_to_all") else 512
    kargs = {"External id": ext + 1, "queued": 0, "device": call.device, "context": 1,
             "stream": call.comm_stream, "correlation": corr, "registers per thread": 96,
             "shared memory": 8784, "blocks per SM": round(ctas / tl.num_sms, 6),
             "warps per SM": round(ctas * threads // 32 / tl.num_sms, 6), "grid": [ctas, 1, 1],
             "block": [threads, 1, 1], "est. achieved occupancy %": 0}
    kargs.update(coll_args)
    tl.spans.append(Span("kernel", kernel_name(call, algorithm, protocol), call.comm_stream, start_ns,
                         end_ns - start_ns, kargs, on_gpu=True, device=call.device))
    tl.flows.append(Flow("ac2g", corr, FlowEnd(False, tid, call.host_ns),
                         FlowEnd(True, call.comm_stream, start_ns, call.device)))
    tl.add_gpu_work(call.host_ns, start_ns, end_ns, call.comm_stream, call.device)
    tl.stats.kernels += 1
    tl.stats.gpu_ns += end_ns - start_ns
    contention = getattr(tl, "contention", None)
    if contention is not None:
        contention.add_nccl(call.device, start_ns, end_ns, ctas)


def _c10d_op(call: CollectiveCall) -> str:
    return {"allreduce": "allreduce_", "broadcast": "broadcast_", "_allgather_base": "_allgather_base_",
            "allgather": "allgather_", "_reduce_scatter_base": "_reduce_scatter_base_",
            "reduce_scatter": "reduce_scatter_", "reduce": "reduce_", "send": "send", "recv": "recv_",
            "alltoall_base": "alltoall_base_", "alltoall": "alltoall_", "barrier": "barrier",
            "allgather_into_tensor_coalesced": "allgather_into_tensor_coalesced_",
            "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced_",
            "allreduce_coalesced": "allreduce_coalesced_"}.get(call.coll_name, call.coll_name)


def wait(tl: Any, rank_group_seq: tuple[str, int], stream: int, device: int) -> None:
    """`stream` waits for a resolved collective (Work.wait(), or a use of its output)."""
    end = getattr(tl, "collective_end", {}).get(rank_group_seq)
    if end is not None:
        tl.gpu(device).wait_event(stream, end)
