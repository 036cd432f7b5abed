"""The coordinator's collective logic without rank processes: resolution independent of
arrival order, mismatches, wait cycles, timeouts (fast: no torch, no subprocesses)."""
from __future__ import annotations

import itertools
import time
from collections import deque

import pytest

from phantora_prof.cost.profiles import load_profile
from phantora_prof.engine import collectives as coll
from phantora_prof.engine.coordinator import Coordinator
from phantora_prof.engine.rank_timeline import RankTimeline
from phantora_prof.errors import ProtocolError
from phantora_prof.protocol import CollectiveCall, CollectiveWait, Hello, SyncKind, SyncRequest


class FixedModel:
    def duration(self, op, ranks, nbytes, root=0, peer=-1):
        return 10_000 + nbytes // 100, "RING", "Simple"


def _coord(tmp_path, world, timeout=300.0):
    c = Coordinator(world, str(tmp_path), lambda r: RankTimeline(r, 100 + r, [{}], 132), collective_model=FixedModel(),
                    collective_timeout_s=timeout)
    for r in range(world):
        c._hello(None, Hello(r, world, 0))
    return c


def _call(rank, seq, host_ns, ranks=(0, 1), group="0", op="all_reduce", nbytes=1 << 20, dtype="float32"):
    return CollectiveCall(rank=rank, group=group, group_desc="default_pg", ranks=tuple(ranks), seq=seq, op=op,
                          coll_name="allreduce", nbytes=nbytes, dtype=dtype, in_nelems=nbytes // 4,
                          out_nelems=nbytes // 4, stream=7, comm_stream=13, device=0, host_ns=host_ns,
                          start_ns=host_ns - 5_000, end_ns=host_ns + 10_000, external_id=10 * seq + 1)


def _feed(c, items):
    for msg in items:
        c._queues.setdefault(msg.rank, deque()).append((msg, None))
        c._pump([msg.rank])


def test_resolution_does_not_depend_on_arrival_order(tmp_path):
    msgs = [_call(0, 0, 1_000_000), _call(1, 0, 3_000_000), CollectiveWait(0, "0", 0, 7, 0, 1_020_000),
            _call(0, 1, 2_000_000, nbytes=4096), _call(1, 1, 3_100_000, nbytes=4096)]
    results = set()
    for order in itertools.permutations(range(len(msgs))):
        # keep each rank's own order (a rank's messages arrive in its order)
        ranks_seq = [msgs[i].rank for i in order]
        per_rank = {r: [m for m in msgs if m.rank == r] for r in (0, 1)}
        seq = [per_rank[r].pop(0) for r in ranks_seq]
        d = tmp_path / "o{}".format("".join(map(str, order)))
        d.mkdir()
        c = _coord(d, 2)
        _feed(c, seq)
        assert not c._pending and not c._parked
        spans = tuple((r, s.name, s.ts_ns, s.dur_ns) for r in (0, 1) for s in c.ranks[r].timeline.spans
                      if s.on_gpu)
        results.add(spans)
    assert len(results) == 1
    (spans,) = results
    kernels = [s for s in spans if s[0] == 0]
    peer = [s for s in spans if s[0] == 1]
    # the transfer starts when the later member launched it (rank 1 at 3 ms + launch latency);
    # rank 0's kernel runs from its own launch on, waiting for rank 1, as an NCCL kernel does
    assert kernels[0][2] == 1_000_000 + load_profile("h200").launch_latency_ns and peer[0][2] >= 3_000_000
    assert kernels[0][2] + kernels[0][3] == peer[0][2] + peer[0][3] >= 3_000_000 + 10_000


def test_parked_request_is_answered_after_the_collective(tmp_path):
    c = _coord(tmp_path, 2)
    _feed(c, [_call(0, 0, 1_000_000), SyncRequest(0, SyncKind.DEVICE, 0, 0, 1_100_000)])
    assert c._parked == {0: {("0", 0)}} and len(c._queues[0]) == 1  # the sync waits in the queue
    _feed(c, [_call(1, 0, 5_000_000)])
    assert not c._parked and not c._queues[0]


def test_mismatch_names_ranks_group_and_sequence(tmp_path):
    c = _coord(tmp_path, 2)
    _feed(c, [_call(0, 3, 1_000, nbytes=4096)])
    with pytest.raises(coll.CollectiveError, match=r"process group '0'.*collective #3.*size 4096 vs 8192"):
        _feed(c, [_call(1, 3, 1_000, nbytes=8192)])
    (tmp_path / "b").mkdir()
    c = _coord(tmp_path / "b", 2)
    _feed(c, [_call(0, 0, 1_000, dtype="bfloat16")])
    with pytest.raises(coll.CollectiveError, match="dtype bfloat16 vs float32"):
        _feed(c, [_call(1, 0, 1_000)])


def test_wait_cycle_between_groups_is_a_deadlock_error(tmp_path):
    c = _coord(tmp_path, 2)
    _feed(c, [_call(0, 0, 1_000, group="A"), _call(1, 0, 1_000, group="B")])
    with pytest.raises(coll.CollectiveError, match="deadlock"):
        c._check_stuck()


def test_missing_rank_times_out(tmp_path):
    c = _coord(tmp_path, 2, timeout=0.01)
    _feed(c, [_call(0, 0, 1_000)])
    time.sleep(0.05)
    with pytest.raises(coll.CollectiveError, match=r"rank\(s\) \[1\] did not launch it within"):
        c._check_stuck()


def test_a_missing_rank_that_keeps_sending_is_busy_not_stuck(tmp_path):
    c = _coord(tmp_path, 2, timeout=0.05)
    _feed(c, [_call(0, 0, 1_000)])
    time.sleep(0.08)
    c._last_heard[1] = time.monotonic()  # rank 1's latest batch just arrived (it is still simulating)
    c._check_stuck()
    time.sleep(0.08)
    with pytest.raises(coll.CollectiveError, match=r"rank\(s\) \[1\] did not launch it within"):
        c._check_stuck()


def test_torchrun_command_line_is_understood():
    import sys

    from phantora_prof.errors import ConfigError
    from phantora_prof.launcher import torchrun_command

    assert torchrun_command(["torchrun", "--standalone", "--nproc-per-node=8", "train.py", "--lr", "1"]) == \
        (8, 1, [sys.executable, "train.py", "--lr", "1"])
    assert torchrun_command(["torchrun", "--nnodes", "1:2", "--nproc_per_node", "4", "-m", "pkg.train"]) == \
        (4, 2, [sys.executable, "-m", "pkg.train"])
    with pytest.raises(ConfigError, match="--bogus"):
        torchrun_command(["torchrun", "--bogus", "x.py"])


def test_python_m_torch_distributed_run_is_torchrun():
    """`phantora-prof python -m torch.distributed.run ...` (torchrun's other spelling) was run as
    a plain script, whose launcher then found no NCCL (a new user's report)."""
    from phantora_prof.execute import _torchrun_spelled_as_module as spelled

    assert spelled(["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "t.py"]) == \
        ["torchrun", "--nproc-per-node", "2", "t.py"]
    assert spelled(["python3", "-u", "-X", "importtime", "-m", "torch.distributed.run", "t.py"]) == ["torchrun", "t.py"]
    assert spelled(["python", "-m", "pkg.train"]) == ["python", "-m", "pkg.train"]
    assert spelled(["python", "t.py", "-m", "torch.distributed.run"]) == ["python", "t.py", "-m", "torch.distributed.run"]


def test_coalesced_calls_run_concurrently_not_in_order(tmp_path):
    """batch_isend_irecv on two ranks: each sends first, then receives; as one NCCL group
    this completes (in stream order it would deadlock)."""
    def p2p(rank, src, dst, coalesced):
        c = _call(rank, 0, 1_000_000, ranks=(src, dst), group=f"0:p2p:{src}->{dst}", op="send_recv")
        c.coalesced = coalesced
        return c

    c = _coord(tmp_path, 2)
    _feed(c, [p2p(0, 0, 1, True), p2p(0, 1, 0, False), p2p(1, 1, 0, True), p2p(1, 0, 1, False)])
    assert not c._pending and not c._parked and not c._groups
    c._check_stuck()
    first = [(s.name, s.ts_ns, s.dur_ns) for s in c.ranks[0].timeline.spans]
    (tmp_path / "b").mkdir()
    c = _coord(tmp_path / "b", 2)  # the other rank's messages first: the same timelines
    _feed(c, [p2p(1, 1, 0, True), p2p(0, 0, 1, True), p2p(1, 0, 1, False), p2p(0, 1, 0, False)])
    assert [(s.name, s.ts_ns, s.dur_ns) for s in c.ranks[0].timeline.spans] == first


def test_a_groups_member_list_travels_once_and_is_filled_in(tmp_path):
    """A rank sends a group's ranks with its first collective of the group only (O(1) per
    later call): the coordinator fills them in; without any, it says what is wrong."""
    c = _coord(tmp_path, 2)
    c._members["0"] = ((0, 1), "default_pg")  # as the receive loop records the group's GroupCreated
    _feed(c, [_call(0, 0, 1_000_000), _call(1, 0, 1_000_000), _call(0, 1, 2_000_000, ranks=()),
              _call(1, 1, 2_000_000, ranks=())])
    assert not c._pending
    assert sum(1 for s in c.ranks[0].timeline.spans if s.on_gpu) == 2
    (tmp_path / "fresh").mkdir()
    fresh = _coord(tmp_path / "fresh", 2)
    with pytest.raises(ProtocolError, match="without its member list"):
        _feed(fresh, [_call(0, 0, 1_000_000, group="7", ranks=())])


def test_trace_args_list_at_most_30_group_ranks_as_torch_profiler_does():
    assert coll.ranks_arg((0, 1)) == "[0, 1]"
    big = coll.ranks_arg(tuple(range(16384)))
    assert big == "[" + ", ".join(map(str, range(30))) + ", ...]"
