"""The "phantora" process group: simulated NCCL for CUDA tensors, real gloo for CPU tensors.

A collective on CUDA tensors sends one `CollectiveCall` to the coordinator (which starts it
when every member launched it and their streams reached it) and returns at once, as NCCL
does: the CPU does not block. Its outputs keep their shapes (fake tensors have no data).
`Work.wait()` makes the current stream wait for it; so does the first op that reads an
output of an un-waited collective (what a DDP reducer's future or a functional collective's
`wait_tensor` amount to).

CPU collectives (CPU tensors, Python objects) really exchange their values, through the
coordinator (`host_collectives`): the host returns when the last member arrived, as a
real blocking collective would make it.
"""
from __future__ import annotations

import logging
import os
import random
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from phantora_prof.protocol import CollectiveCall, CollectiveWait, GroupCreated, StreamCreated, SyncKind
from phantora_prof.runtime.process import state as _state

log = logging.getLogger(__name__)

# Test-only: sleep a random real time (up to this many ms) before each collective, so ranks
# reach the coordinator in random orders; the simulated result must not change.
_JITTER_S = float(os.environ.get("PHANTORA_TEST_JITTER_MS", "0") or 0) / 1e3
_jitter_rng = random.Random()

HOST_NS = 25_000  # host time of one c10d collective call (launch included)
LAUNCH_AT_NS = 12_000

from phantora_prof.runtime.distributed.pending import PENDING, consume as consume_pending
from phantora_prof.runtime.distributed import pending as _pending
from phantora_prof.runtime.distributed import host_collectives as _hc
from phantora_prof.runtime.distributed.host_collectives import HostGroup


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def _redop(opts: Any) -> str:
    op = getattr(opts, "reduceOp", None)
    if op is None:
        return "sum"
    if isinstance(op, str):
        return op.lower()
    name = str(getattr(op, "op", op)).split(".")[-1].lower()
    return {"sum": "sum", "avg": "avg", "product": "product", "min": "min", "max": "max",
            "premul_sum": "premul_sum", "band": "sum", "bor": "sum", "bxor": "sum"}.get(name, "sum")


def _flat(tensors) -> list[torch.Tensor]:
    out = []
    for t in tensors:
        if isinstance(t, (list, tuple)):
            out.extend(_flat(t))
        elif isinstance(t, torch.Tensor):
            out.append(t)
    return out


def _on_cuda(tensors) -> bool:
    return any(t.device.type == "cuda" for t in _flat(tensors))


class SimWork(dist.Work):
    """An NCCL-like work handle: wait() makes the current stream wait; the CPU never blocks."""

    def __init__(self, pg: "PhantoraProcessGroup | None", key: tuple[str, int] | None, outputs: list,
                 device: int = 0):
        super().__init__()
        self._pg = pg
        self._key = key
        self._outputs = outputs
        self._device = device
        self._complete_values = None  # a small recv's real values arrive in wait() (values.p2p)

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self._complete_values is not None:
            complete, self._complete_values = self._complete_values, None
            _state.get().channel.flush()  # the peer may be waiting for our messages at the coordinator
            complete()
        if self._key is not None:
            st = _state.get()
            stream = st.stream_of(self._device)
            keys = self._key if isinstance(self._key, list) else [self._key]
            for key in keys:
                st.channel.send(CollectiveWait(st.config.rank, key[0], key[1], stream, self._device,
                                               st.clock.now_ns))
            for t in _flat(self._outputs):
                if _pending.pending_of(t) in keys:
                    _pending.clear(t)
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self):
        return None

    def result(self):
        return self._outputs

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(self._outputs)
        return fut

    def synchronize(self) -> None:
        self.wait()


class PhantoraProcessGroup(dist.ProcessGroup):
    def __init__(self, store, rank: int, size: int, timeout: timedelta, name: str, global_ranks: list[int]):
        super().__init__(rank, size)
        self._name = name
        self._group_desc = "default_pg" if name == "0" else "undefined"
        self._global_ranks = tuple(global_ranks) if global_ranks else tuple(range(size))
        self._ranks_sent = False  # CollectiveCall.ranks: sent once per group
        self._group_index: dict[int, int] | None = None  # global rank -> group rank, built on first use
        self._seq = 0
        self._p2p_seq: dict[tuple[int, int], int] = {}
        self._comm_streams: dict[int, int] = {}
        self._coalescing: list | None = None
        self._host = HostGroup(name, self._global_ranks, rank)
        st = _state.get()
        st.channel.send(GroupCreated(st.config.rank, name, self._desc(), self._global_ranks))
        _GROUPS[name] = self

    # ---- identity ----
    def getBackendName(self) -> str:  # noqa: N802 - c10d's name
        return "nccl"

    def getGroupName(self) -> str:  # noqa: N802
        return self._name

    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._name = name

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._group_desc

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._group_desc = desc
        if desc and desc != "undefined":  # named after creation: tell the coordinator (distributedInfo)
            st = _state.get()
            st.channel.send(GroupCreated(st.config.rank, self._name, desc, self._global_ranks))

    def _desc(self) -> str:
        d = self._group_desc
        if not d or d == "undefined":
            return "default_pg" if self._name == "0" else "undefined"
        return d

    def _comm_stream(self, device: int) -> int:
        s = self._comm_streams.get(device)
        if s is None:
            st = _state.get()
            s = next(st.stream_ids)
            st.channel.send(StreamCreated(st.config.rank, s, device, -1))
            self._comm_streams[device] = s
        return s

    # ---- simulated collectives ----
    def _launch(self, op: str, coll_name: str, inputs: list, outputs: list, nbytes: int, in_nelems: int,
                out_nelems: int, opts: Any = None, root: int = 0, peer: int = -1,
                splits: list | None = None) -> SimWork:
        st = _state.get()
        if _JITTER_S:
            from phantora_prof.runtime.process.clock import real_time

            st.channel.flush()
            real_time("sleep")(_jitter_rng.uniform(0, _JITTER_S))
        ref = (inputs or outputs)[0]
        device = ref.device.index or 0
        stream = st.stream_of(device)
        if peer >= 0:
            # one channel per direction: the k-th send from A to B meets the k-th recv on B from A
            me = st.config.rank
            pair = (me, peer) if coll_name == "send" else (peer, me)
            seq = self._p2p_seq.get(pair, 0)
            self._p2p_seq[pair] = seq + 1
            group = f"{self._name}:p2p:{pair[0]}->{pair[1]}"
            ranks = pair
            comm = self._comm_stream(device)
        else:
            seq = self._seq
            self._seq += 1
            group = self._name
            # the member list travels with this rank's first collective of the group only
            ranks = () if self._ranks_sent else self._global_ranks
            self._ranks_sent = True
            comm = self._comm_stream(device)
        if PENDING:
            consume_pending(inputs, comm, device)
        ext = st.next_external_id()
        st.next_external_id()
        st.next_external_id()
        start = st.clock.now_ns
        call = CollectiveCall(
            rank=st.config.rank, group=group, group_desc=self._desc(), ranks=tuple(ranks), seq=seq, op=op,
            coll_name=coll_name, nbytes=int(nbytes), dtype=_dtype(ref), in_nelems=int(in_nelems),
            out_nelems=int(out_nelems), stream=stream, comm_stream=comm, device=device,
            host_ns=start + LAUNCH_AT_NS, start_ns=start, end_ns=start + HOST_NS, external_id=ext, tid=st.tid(),
            reduce_op=_redop(opts) if opts is not None else "sum", root=root, peer=peer,
            input_dims=tuple(tuple(t.shape) for t in inputs[:8]))
        st.clock.advance_to(start + HOST_NS)
        key = (group, seq)
        if self._coalescing is not None:
            # inside a coalesced group (batch_isend_irecv, coalescing manager): sent together at
            # its end, all but the last marked `coalesced` so that they run concurrently
            call.coalesced = True
            self._coalescing.append(call)
        else:
            st.channel.send(call)
            st.channel.flush()  # other ranks may be waiting for this collective at the coordinator
        for t in outputs:
            _pending.mark(t, (group, seq))
        from phantora_prof.runtime.dispatch import values  # small outputs' real values flags, counts

        complete_values = None
        if peer >= 0:
            complete_values = values.p2p(self._host, coll_name, peer, inputs, outputs, nbytes)
        else:
            values.exchange(self._host, op, coll_name, call.reduce_op, inputs, outputs, nbytes,
                            self._group_rank_of(root), splits)
        work = SimWork(self, key, outputs, device)
        work._complete_values = complete_values
        return work

    def _group_rank_of(self, global_rank: int) -> int:
        """The group rank of a global rank (0 if not a member), without a scan of the group."""
        index = self._group_index
        if index is None:
            index = self._group_index = {r: i for i, r in enumerate(self._global_ranks)}
        return index.get(global_rank, 0)

    # ---- collectives on CPU tensors: real values, exchanged through the coordinator ----

    def _done(self, outputs: list) -> SimWork:
        return SimWork(None, None, outputs, 0)

    def _cpu_allreduce(self, tensors, opts) -> SimWork:
        op = _hc.reduce_op_name(opts)
        with _hc.simulator_work():
            parts = self._host.exchange("allreduce", _hc.encode(tensors))
            for i, t in enumerate(tensors):
                t.copy_(_hc.reduced(op, parts, lambda p, i=i: p[i]))
        return self._done(list(tensors))

    def _cpu_broadcast(self, tensors, opts) -> SimWork:
        root = getattr(opts, "rootRank", 0) if opts is not None else 0
        mine = self.rank() == root
        with _hc.simulator_work():
            parts = self._host.exchange("broadcast", _hc.encode(tensors) if mine else _hc.encode([]))
            if not mine:
                sent = parts.of(root)
                if len(sent) != len(tensors):
                    raise RuntimeError(
                        f"phantora-prof: a CPU broadcast from rank {self._global_ranks[root]}, which is simulated "
                        "by a representative that is not the root of this group: its values are unknown. Run "
                        "with --live-ranks all")
                for t, v in zip(tensors, sent):
                    t.copy_(v)
        return self._done(list(tensors))

    def _cpu_allgather(self, output_tensors, input_tensors) -> SimWork:
        with _hc.simulator_work():
            parts = self._host.exchange("allgather", _hc.encode(input_tensors))
            for i, outs in enumerate(output_tensors):
                for j, o in enumerate(outs):
                    o.copy_(parts.of(j)[i])
        return self._done(list(output_tensors))

    def _cpu_allgather_into(self, outputs, inputs) -> SimWork:
        with _hc.simulator_work():
            parts = self._host.exchange("_allgather_base", _hc.encode(inputs))
            for i, o in enumerate(outputs):
                o.copy_(torch.cat([parts.of(j)[i].reshape(-1) for j in range(len(parts))]).reshape(o.shape))
        return self._done(list(outputs))

    def _cpu_reduce_scatter(self, outputs, inputs: list[list], opts) -> SimWork:
        """`inputs[i][j]`: this member's contribution to member j's output i."""
        op = _hc.reduce_op_name(opts)
        n = self.size()
        me = self.rank()
        with _hc.simulator_work():
            parts = self._host.exchange("reduce_scatter", _hc.encode([t for ins in inputs for t in ins]))
            for i, o in enumerate(outputs):
                o.copy_(_hc.reduced(op, parts, lambda p, i=i: p[i * n + me]).reshape(o.shape))
        return self._done(list(outputs))

    def _cpu_alltoall_base(self, output, input, input_split_sizes) -> SimWork:
        n = self.size()
        me = self.rank()
        splits = torch.tensor(list(input_split_sizes) if input_split_sizes else [input.shape[0] // n] * n)
        with _hc.simulator_work():
            parts = self._host.exchange("alltoall_base", _hc.encode([input, splits]))
            chunks = []
            for j in range(n):
                data, sp = parts.of(j)
                sizes = [int(x) for x in sp]
                chunks.append(data.split(sizes)[me])
            output.copy_(torch.cat(chunks).reshape(output.shape))
        return self._done([output])

    def _cpu_alltoall(self, output_tensors, input_tensors) -> SimWork:
        me = self.rank()
        with _hc.simulator_work():
            parts = self._host.exchange("alltoall", _hc.encode(input_tensors))
            for j, o in enumerate(output_tensors):
                o.copy_(parts.of(j)[me])
        return self._done(list(output_tensors))

    def _cpu_reduce(self, tensors, opts) -> SimWork:
        op = _hc.reduce_op_name(opts)
        root = getattr(opts, "rootRank", 0) if opts is not None else 0
        with _hc.simulator_work():
            parts = self._host.exchange("reduce", _hc.encode(tensors))
            if self.rank() == root:
                for i, t in enumerate(tensors):
                    t.copy_(_hc.reduced(op, parts, lambda p, i=i: p[i]))
        return self._done(list(tensors))

    def _cpu_gather(self, output_tensors, input_tensors, opts) -> SimWork:
        root = getattr(opts, "rootRank", 0) if opts is not None else 0
        with _hc.simulator_work():
            parts = self._host.exchange("gather", _hc.encode(input_tensors))
            if self.rank() == root:
                for i, outs in enumerate(output_tensors):
                    for j, o in enumerate(outs):
                        o.copy_(parts.of(j)[i])
        return self._done(_flat(output_tensors))

    def _cpu_scatter(self, output_tensors, input_tensors, opts) -> SimWork:
        root = getattr(opts, "rootRank", 0) if opts is not None else 0
        me = self.rank()
        with _hc.simulator_work():
            mine = [t for ins in input_tensors for t in ins] if me == root else []
            parts = self._host.exchange("scatter", _hc.encode(mine))
            sent = parts.of(root)
            n = self.size()
            for i, o in enumerate(output_tensors):
                o.copy_(sent[i * n + me])
        return self._done(list(output_tensors))

    def _cpu_send(self, tensors, dst_rank: int, tag: int) -> SimWork:
        with _hc.simulator_work():
            self._host.send(self._global_ranks[dst_rank], tag, _hc.encode(tensors))
        return self._done([])

    def _cpu_recv(self, tensors, src_rank: int, tag: int) -> SimWork:
        with _hc.simulator_work():
            got = _hc.decode(self._host.recv(self._global_ranks[src_rank], tag))
            for t, v in zip(tensors, got):
                t.copy_(v)
        return self._done(list(tensors))

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("phantora-prof does not simulate dist.recv without a source rank (recv from any "
                           "source): pass src=")

    def allreduce(self, tensors, opts=None):
        if not _on_cuda(tensors):
            return self._cpu_allreduce(tensors, opts)
        n = sum(t.numel() for t in tensors)
        nb = sum(t.numel() * t.element_size() for t in tensors)
        return self._launch("all_reduce", "allreduce", list(tensors), list(tensors), nb, n, n, opts)

    def allreduce_coalesced(self, tensors, opts=None):
        if not _on_cuda(tensors):
            return self._cpu_allreduce(tensors, opts)
        n = sum(t.numel() for t in tensors)
        nb = sum(t.numel() * t.element_size() for t in tensors)
        return self._launch("all_reduce", "allreduce_coalesced", list(tensors), list(tensors), nb, n, n, opts)

    def broadcast(self, tensors, opts=None):
        if not _on_cuda(tensors):
            return self._cpu_broadcast(tensors, opts)
        n = sum(t.numel() for t in tensors)
        nb = sum(t.numel() * t.element_size() for t in tensors)
        root = self._global_ranks[getattr(opts, "rootRank", 0)] if opts is not None else self._global_ranks[0]
        return self._launch("broadcast", "broadcast", list(tensors), list(tensors), nb, n, n, opts, root=root)

    def allgather(self, output_tensors, input_tensors, opts=None):
        if not _on_cuda(input_tensors):
            return self._cpu_allgather(output_tensors, input_tensors)
        outs = _flat(output_tensors)
        n_in = sum(t.numel() for t in input_tensors)
        nb = sum(t.numel() * t.element_size() for t in outs)
        return self._launch("all_gather", "allgather", list(input_tensors), outs, nb, n_in,
                            sum(t.numel() for t in outs), opts)

    def _allgather_base(self, output, input, opts=None):
        if not _on_cuda([input]):
            return self._cpu_allgather_into([output], [input])
        return self._launch("all_gather", "_allgather_base", [input], [output], output.numel() * output.element_size(),
                            input.numel(), output.numel(), opts)

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        if not _on_cuda(inputs):
            return self._cpu_allgather_into(outputs, inputs)
        nb = sum(t.numel() * t.element_size() for t in outputs)
        return self._launch("all_gather", "allgather_into_tensor_coalesced", list(inputs), list(outputs), nb,
                            sum(t.numel() for t in inputs), sum(t.numel() for t in outputs), opts)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        if not _on_cuda(output_tensors):
            return self._cpu_reduce_scatter(output_tensors, [list(x) for x in input_tensors], opts)
        ins = _flat(input_tensors)
        nb = sum(t.numel() * t.element_size() for t in ins)
        return self._launch("reduce_scatter", "reduce_scatter", ins, list(output_tensors), nb,
                            sum(t.numel() for t in ins), sum(t.numel() for t in output_tensors), opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        if not _on_cuda([input]):
            return self._cpu_reduce_scatter([output], [list(input.chunk(self.size()))], opts)
        return self._launch("reduce_scatter", "_reduce_scatter_base", [input], [output],
                            input.numel() * input.element_size(), input.numel(), output.numel(), opts)

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        if not _on_cuda(inputs):
            return self._cpu_reduce_scatter(outputs, [list(i.chunk(self.size())) for i in inputs], opts)
        nb = sum(t.numel() * t.element_size() for t in inputs)
        return self._launch("reduce_scatter", "reduce_scatter_tensor_coalesced", list(inputs), list(outputs), nb,
                            sum(t.numel() for t in inputs), sum(t.numel() for t in outputs), opts)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        if not _on_cuda([input]):
            return self._cpu_alltoall_base(output, input, input_split_sizes)
        return self._launch("all_to_all", "all_to_all", [input], [output], input.numel() * input.element_size(),
                            input.numel(), output.numel(), opts, splits=list(input_split_sizes or []))

    all_to_all_single = alltoall_base

    def alltoall(self, output_tensors, input_tensors, opts=None):
        if not _on_cuda(input_tensors):
            return self._cpu_alltoall(output_tensors, input_tensors)
        nb = sum(t.numel() * t.element_size() for t in input_tensors)
        return self._launch("all_to_all", "all_to_all", list(input_tensors), list(output_tensors), nb,
                            sum(t.numel() for t in input_tensors), sum(t.numel() for t in output_tensors), opts)

    def reduce(self, tensors, opts=None):
        if not _on_cuda(tensors):
            return self._cpu_reduce(tensors, opts)
        n = sum(t.numel() for t in tensors)
        nb = sum(t.numel() * t.element_size() for t in tensors)
        root = self._global_ranks[getattr(opts, "rootRank", 0)] if opts is not None else self._global_ranks[0]
        return self._launch("reduce", "reduce", list(tensors), list(tensors), nb, n, n, opts, root=root)

    def gather(self, output_tensors, input_tensors, opts=None):
        """NCCL gathers with grouped send/recv; timed as an all-gather of the same total size."""
        if not _on_cuda(input_tensors):
            return self._cpu_gather(output_tensors, input_tensors, opts)
        n = sum(t.numel() for t in input_tensors)
        nb = sum(t.numel() * t.element_size() for t in input_tensors) * self.size()
        return self._launch("all_gather", "gather", list(input_tensors), _flat(output_tensors), nb, n,
                            n * self.size(), opts)

    def scatter(self, output_tensors, input_tensors, opts=None):
        """NCCL scatters with grouped send/recv; timed as an all-gather of the same total size."""
        if not _on_cuda(output_tensors):
            return self._cpu_scatter(output_tensors, input_tensors, opts)
        n = sum(t.numel() for t in output_tensors)
        nb = sum(t.numel() * t.element_size() for t in output_tensors) * self.size()
        return self._launch("all_gather", "scatter", _flat(input_tensors), list(output_tensors), nb,
                            n * self.size(), n, opts)

    def send(self, tensors, dst_rank, tag=0):
        if not _on_cuda(tensors):
            return self._cpu_send(tensors, dst_rank, tag)
        n = sum(t.numel() for t in tensors)
        nb = sum(t.numel() * t.element_size() for t in tensors)
        return self._launch("send_recv", "send", list(tensors), [], nb, n, n, None, peer=self._global_ranks[dst_rank])

    def recv(self, tensors, src_rank, tag=0):
        if not _on_cuda(tensors):
            return self._cpu_recv(tensors, src_rank, tag)
        n = sum(t.numel() for t in tensors)
        nb = sum(t.numel() * t.element_size() for t in tensors)
        return self._launch("send_recv", "recv", [], list(tensors), nb, n, n, None, peer=self._global_ranks[src_rank])

    def barrier(self, opts=None):
        """NCCL's barrier: a one-element all-reduce on the device, and the host waits for it.
        The element is `at::zeros` (ProcessGroupNCCL::barrier): its fill kernel runs before the
        all-reduce, as the real profile shows."""
        st = _state.get()
        from phantora_prof.runtime.device.streams import host_sync

        device = st.current_device
        with torch.no_grad():
            t = torch.zeros(1, dtype=torch.float32, device=f"cuda:{device}")
        self._launch("all_reduce", "barrier", [t], [t], 4, 1, 1, None)
        _pending.clear(t)
        host_sync(SyncKind.STREAM, self._comm_stream(device), device)
        return SimWork(self, None, [t], device)

    def start_coalescing(self, device=None):
        self._coalescing = []

    def end_coalescing(self, device=None):
        calls, self._coalescing = self._coalescing or [], None
        if not calls:
            return SimWork(self, None, [], 0)
        calls[-1].coalesced = False
        st = _state.get()
        for call in calls:
            st.channel.send(call)
        st.channel.flush()
        return SimWork(self, [(c.group, c.seq) for c in calls], [], calls[-1].device)


_GROUPS: dict[str, "PhantoraProcessGroup"] = {}  # by c10d group name


def next_seq(call: CollectiveCall) -> int:
    """The sequence number the next launch of `call`'s kind in its group gets (a CUDA graph
    replaying a captured collective, runtime/device/cuda_graphs.py)."""
    if call.peer >= 0:
        pg = _GROUPS[call.group.split(":p2p:")[0]]
        a, b = call.group.split(":p2p:")[1].split("->")
        pair = (int(a), int(b))
        seq = pg._p2p_seq.get(pair, 0)
        pg._p2p_seq[pair] = seq + 1
        return seq
    pg = _GROUPS[call.group]
    seq = pg._seq
    pg._seq += 1
    return seq


def create(backend_opts, pg_options=None):
    """The creator registered with `dist.Backend.register_backend(..., extended_api=True)`."""
    return PhantoraProcessGroup(backend_opts.store, backend_opts.group_rank, backend_opts.group_size,
                                backend_opts.timeout, str(backend_opts.group_id),
                                list(backend_opts.global_ranks_in_group or []))


# ---- functional collectives (DTensor, tensor parallel): captured in the dispatch mode ----

_FUNCTIONAL = {
    "all_reduce": ("all_reduce", "allreduce"), "all_reduce_": ("all_reduce", "allreduce"),
    "all_reduce_coalesced": ("all_reduce", "allreduce_coalesced"),
    "all_reduce_coalesced_": ("all_reduce", "allreduce_coalesced"),
    "all_gather_into_tensor": ("all_gather", "_allgather_base"),
    "all_gather_into_tensor_out": ("all_gather", "_allgather_base"),
    "all_gather_into_tensor_coalesced": ("all_gather", "allgather_into_tensor_coalesced"),
    "reduce_scatter_tensor": ("reduce_scatter", "_reduce_scatter_base"),
    "reduce_scatter_tensor_out": ("reduce_scatter", "_reduce_scatter_base"),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", "reduce_scatter_tensor_coalesced"),
    "all_to_all_single": ("all_to_all", "all_to_all"),
    "broadcast": ("broadcast", "broadcast"), "broadcast_": ("broadcast", "broadcast"),
}
# The out-of-place ops whose C++ kernel (torch/csrc/distributed/c10d/Functional.cpp) clones its
# input(s) (`clone(MemoryFormat::Contiguous)`: a device-to-device copy) and runs the in-place
# collective on the clone; a real profile shows aten::clone inside the op, before c10d's record.
_CLONES_INPUT = frozenset(("all_reduce", "all_reduce_coalesced", "broadcast"))
_WRAP_TENSOR_AUTOGRAD = "_wrap_tensor_autograd"


def functional(mode: Any, func: Any, args: tuple, kwargs: dict, tls: Any = None) -> Any:
    """`_c10d_functional.*` on CUDA tensors, as a CUDA build runs them: the output is the clone
    the op's C++ kernel makes (all_reduce, broadcast: the clone is captured as an op of its own)
    or comes from the op's fake kernel, and the collective goes to the coordinator;
    `_wrap_tensor_autograd` runs its own kernel (torch's Python: the output is an
    AsyncCollectiveTensor, whose first use dispatches `wait_tensor`, as on the GPU);
    `wait_tensor` makes the current stream wait."""
    from torch.distributed import distributed_c10d as c10d

    name = func._schema.name.split("::", 1)[1]
    st = _state.get()
    if name == "wait_tensor":
        t = args[0]
        dev = t.device.index or 0
        if PENDING:
            consume_pending((t,), st.stream_of(dev), dev)
        return t
    if name == _WRAP_TENSOR_AUTOGRAD:
        return _wrapped(func, args, kwargs)
    spec = _FUNCTIONAL.get(name)
    if name in _CLONES_INPUT:
        if isinstance(args[0], (list, tuple)):
            out = mode._as_parts(tls, lambda: [t.clone(memory_format=torch.contiguous_format) for t in args[0]])
        else:
            out = mode._as_parts(tls, lambda: args[0].clone(memory_format=torch.contiguous_format))
    else:
        with mode.fake_mode:
            out = func(*args, **kwargs)
        mode._track_memory(out)
    if spec is None:  # other helpers: no communication
        return out
    group_name = args[-1] if args and isinstance(args[-1], str) else kwargs.get("group_name")
    pg = c10d._resolve_process_group(group_name) if group_name is not None else None
    if not isinstance(pg, PhantoraProcessGroup):
        raise RuntimeError(f"phantora-prof cannot simulate {func._schema.name} on process group {group_name!r} "
                           f"({type(pg).__name__}): CUDA collectives need an NCCL group")
    op, coll = spec
    inputs = _flat(args[0] if isinstance(args[0], (list, tuple)) else [args[0]])
    outputs = _flat(out if isinstance(out, (list, tuple)) else [out])
    n_in = sum(t.numel() for t in inputs)
    n_out = sum(t.numel() for t in outputs)
    size_of = outputs if op == "all_gather" else inputs
    nbytes = sum(t.numel() * t.element_size() for t in size_of)
    reduce_op = next((a for a in args[1:] if isinstance(a, str) and a != group_name), "sum")
    root = pg._global_ranks[args[1]] if op == "broadcast" and isinstance(args[1], int) else 0

    class _Opts:
        pass

    opts = _Opts()
    opts.reduceOp = reduce_op
    pg._launch(op, coll, inputs, outputs, nbytes, n_in, n_out, opts, root=root)
    return out


def _wrapped(func: Any, args: tuple, kwargs: dict) -> Any:
    """`_wrap_tensor_autograd(t)`: its kernel (CompositeExplicitAutograd, torch's own Python)
    wraps `t` in an AsyncCollectiveTensor, counted as the program's Python like any torch
    Python that a CUDA build runs. No new memory: the wrapper shares `t`'s storage."""
    from phantora_prof.runtime.host import pyhost

    key = torch._C.DispatchKey.CompositeExplicitAutograd
    return pyhost.run_as_program(_state.get().pyhost, func._op_dk, key, *args, **kwargs)
