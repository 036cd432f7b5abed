"""Representative ranks (issue #17): one live process per class of ranks, the others mirrored.

Unit tests of the layout planner and of the host exchanges with mirrored members; end-to-end,
a DDP run simulated with representative ranks gives rank 0 the same trace, event for event,
as the run with every rank live."""
from __future__ import annotations

import gzip
import json
import re
import sys

import pytest
import torch

from conftest import REPO, SCRIPTS
from phantora_prof.engine import representatives as reps
from phantora_prof.engine.collectives import CollectiveError
from phantora_prof.engine.host_exchange import HostExchanges
from phantora_prof.errors import ConfigError
from phantora_prof.protocol import HostExchange, HostRecv, HostSend
from phantora_prof.runtime.distributed import host_collectives as hc

PY = sys.executable


# ---- the layout planner ----

def test_without_pipeline_groups_rank_0_stands_for_all_and_the_last_rank_checks_it():
    lay = reps.plan(16, [((0, 1), "mesh_tp"), ((2, 3), "mesh_tp")])
    assert lay.live == (0, 15)
    assert lay.primary == (0,) and lay.checkers == (15,)
    assert [lay.rep_of(r) for r in (0, 5, 14, 15)] == [0, 0, 0, 15]
    assert lay.class_sizes() == {0: 16}


def test_pipeline_groups_give_one_live_rank_per_stage():
    # pp outermost (2 stages) x dp 4: pipeline groups {i, 4+i}
    declared = [((i, 4 + i), "mesh_pp") for i in range(4)] + [((0, 1, 2, 3), "mesh_dp"), ((4, 5, 6, 7), "mesh_dp")]
    lay = reps.plan(8, declared)
    assert lay.primary == (0, 4) and lay.checkers == (3, 7)
    assert [lay.rep_of(r) for r in range(8)] == [0, 0, 0, 3, 4, 4, 4, 7]
    assert lay.class_sizes() == {0: 4, 4: 4}
    assert lay.class_of_checker(7) == 4


def test_requested_ranks_are_live_in_their_class_with_their_pipeline_peers():
    lay = reps.plan(16, [], requested=(5, 0, 15))
    assert lay.live == (0, 5, 15) and lay.requested == (5,)
    assert lay.class_of_checker(5) == 0 and lay.rep_of(5) == 5 and lay.rep_of(6) == 0
    assert lay.class_sizes() == {0: 16}
    declared = [((i, 4 + i), "mesh_pp") for i in range(4)] + [((0, 1, 2, 3), "mesh_dp"), ((4, 5, 6, 7), "mesh_dp")]
    lay = reps.plan(8, declared, requested=(6,))
    assert lay.requested == (2, 6)  # rank 6's pipeline group: its sends and receives need rank 2 live
    assert lay.live == (0, 2, 3, 4, 6, 7)
    assert [lay.class_of_checker(r) for r in (2, 6)] == [0, 4]
    assert lay.class_sizes() == {0: 4, 4: 4}
    assert reps.check(lay, {0: (10, 5), 4: (20, 6), 2: (10, 5), 6: (21, 6)})[0].startswith("rank 6 ran 21")


def test_without_the_class_check_only_the_representatives_are_live():
    assert reps.plan(16, [], check=False).live == (0,)
    declared = [((i, 4 + i), "mesh_pp") for i in range(4)]
    lay = reps.plan(8, declared, requested=(5,), check=False)
    assert lay.checkers == () and lay.live == (0, 1, 4, 5)


def test_megatron_pipeline_group_descriptions_count_as_stages_but_expert_ones_do_not():
    assert reps.is_pipeline("PIPELINE_MODEL_PARALLEL_GROUP")
    assert reps.is_pipeline("mesh_pp")
    assert not reps.is_pipeline("EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP")
    assert not reps.is_pipeline("mesh_dp")


def test_counterpart_is_the_same_kind_of_group_around_the_representative():
    declared = [((0, 1), "mesh_tp"), ((2, 3), "mesh_tp"), ((0, 2), "mesh_dp"), ((1, 3), "mesh_dp")]
    lay = reps.plan(4, declared)
    assert lay.counterpart((2, 3), "mesh_tp", 0) == (0, 1)
    assert lay.counterpart((1, 3), "mesh_dp", 0) == (0, 2)
    assert lay.counterpart((1, 3), "undefined", 0) is None


def test_live_ranks_choice():
    assert not reps.representative_mode("auto", 8)
    assert reps.representative_mode("auto", 9)
    assert reps.representative_mode("representative", 2)
    assert not reps.representative_mode("representative", 1)
    assert not reps.representative_mode("all", 4096)
    with pytest.raises(ConfigError, match="--live-ranks"):
        reps.representative_mode("some", 4)


def test_a_checker_whose_counts_differ_is_reported():
    lay = reps.plan(4, [])
    assert reps.check(lay, {0: (100, 50), 3: (100, 50)}) == []
    msgs = reps.check(lay, {0: (100, 50), 3: (90, 50)})
    assert len(msgs) == 1 and "rank 3 ran 90 ops" in msgs[0] and "rank 0" in msgs[0]


# ---- combining the parts of a host collective ----

def test_combine_counts_mirrored_members():
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([10.0, 20.0])
    assert hc.combine("sum", [(a, 3), (b, 1)]).tolist() == [13.0, 26.0]
    assert hc.combine("avg", [(a, 3), (b, 1)]).tolist() == [3.25, 6.5]
    assert hc.combine("max", [(a, 3), (b, 1)]).tolist() == [10.0, 20.0]
    assert hc.combine("product", [(a, 2), (b, 1)]).tolist() == [10.0, 80.0]
    x, y = torch.tensor([6]), torch.tensor([3])
    assert hc.combine("bxor", [(x, 2), (y, 1)]).tolist() == [3]  # an even count cancels
    assert hc.combine("sum", [(torch.tensor([True]), 4)]).tolist() == [True]


def test_encode_decode_round_trip():
    ts = [torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), torch.tensor([], dtype=torch.int64), None,
          torch.tensor([True, False])]
    back = hc.decode(hc.encode(ts))
    assert back[2] is None
    for t, u in ((ts[0], back[0]), (ts[1], back[1]), (ts[3], back[3])):
        assert u.dtype == t.dtype and u.shape == t.shape and torch.equal(u, t)


# ---- the coordinator's side ----

def _exchanges(groups: dict[str, tuple], layout) -> HostExchanges:
    return HostExchanges(groups.get, lambda: layout)


def test_exchange_waits_for_live_members_only_and_maps_mirrors_to_their_representative():
    lay = reps.plan(4, [])  # live 0 and 3
    ex = _exchanges({"0": ((0, 1, 2, 3), "default_pg")}, lay)
    assert ex.exchange(HostExchange(0, "0", 0, "allreduce", 10, b"a"), "c0") == []
    replies = ex.exchange(HostExchange(3, "0", 0, "allreduce", 25, b"d"), "c3")
    assert [c for c, _ in replies] == ["c0", "c3"]
    reply = replies[0][1]
    assert reply.host_ns == 25
    parts = [reply.payloads[i] for i in reply.index]
    assert parts == [b"a", b"a", b"a", b"d"]


def test_a_mirror_outside_its_representatives_group_takes_the_counterparts_part():
    declared = [((0, 1), "mesh_tp"), ((2, 3), "mesh_tp")]
    lay = reps.plan(4, declared)  # live 0, 3; rank 2 mirrors rank 0, who is not in (2, 3)
    ex = _exchanges({"1": ((0, 1), "mesh_tp"), "2": ((2, 3), "mesh_tp")}, lay)
    # the checker's group arrives first: it waits for rank 0's part in (0, 1)
    assert ex.exchange(HostExchange(3, "2", 0, "broadcast", 5, b"three"), "c3") == []
    replies = ex.exchange(HostExchange(0, "1", 0, "broadcast", 7, b"zero"), "c0")
    by_conn = {c: r for c, r in replies}
    assert set(by_conn) == {"c0", "c3"}
    r3 = by_conn["c3"]
    # the checker follows its class here: its group gets what rank 0's group got (a value-
    # dependent loop, DTensor's trunc_normal_, then stops on the same iteration)
    assert [r3.payloads[i] for i in r3.index] == [b"zero", b"zero"]
    r0 = by_conn["c0"]
    assert [r0.payloads[i] for i in r0.index] == [b"zero", b"zero"]


def test_a_counterpart_exchange_of_another_collective_gives_the_checkers_own_values():
    """A checker whose program differs (uneven shards) shifts its groups' exchanges against
    its counterparts': its own part stands in instead of values of another shape."""
    declared = [((0, 1), "mesh_tp"), ((2, 3), "mesh_tp")]
    lay = reps.plan(4, declared)
    ex = _exchanges({"1": ((0, 1), "mesh_tp"), "2": ((2, 3), "mesh_tp")}, lay)
    ex.exchange(HostExchange(0, "1", 0, "values:allreduce", 7, b"seventy-bytes"), "c0")
    [(_, reply)] = ex.exchange(HostExchange(3, "2", 0, "values:allreduce", 5, b"one"), "c3")
    assert [reply.payloads[i] for i in reply.index] == [b"one", b"one"]
    assert ex.misaligned == 1


def test_an_exchange_waiting_for_a_representative_that_never_reaches_it_names_it():
    """The checker's group holds its every live member, but the part of its mirrored member
    comes from the same exchange of the representative's group, which never comes."""
    declared = [((0, 1), "mesh_tp"), ((2, 3), "mesh_tp")]
    lay = reps.plan(4, declared)  # live 0, 3; rank 2 mirrors rank 0
    ex = _exchanges({"1": ((0, 1), "mesh_tp"), "2": ((2, 3), "mesh_tp")}, lay)
    assert ex.exchange(HostExchange(3, "2", 0, "broadcast", 5, b"three"), "c3") == []
    ex.check(lambda r: False, timeout_s=300)  # rank 0 may still come
    with pytest.raises(CollectiveError, match=r"rank 0 in the group of ranks \[0, 1\].*rank\(s\) \[0\] finished "
                                              r"without reaching it.*--live-ranks all"):
        ex.check(lambda r: r == 0, timeout_s=300)
    with pytest.raises(CollectiveError, match=r"rank\(s\) \[0\] did not reach within 5 s"):
        ex.check(lambda r: False, timeout_s=5, waited_since=lambda first, ranks: first - 10)


def test_mismatched_host_collectives_are_reported():
    ex = _exchanges({"0": ((0, 1), "default_pg")}, None)
    ex.exchange(HostExchange(0, "0", 0, "allreduce", 0, b""), "c0")
    with pytest.raises(CollectiveError, match="allgather on rank 1"):
        ex.exchange(HostExchange(1, "0", 0, "allgather", 0, b""), "c1")


def test_messages_meet_in_either_order_and_a_receive_from_a_mirror_is_an_error():
    ex = _exchanges({}, None)
    assert ex.send(HostSend(0, "0", 1, 7, 0, 100, b"x")) == []
    [(conn, reply)] = ex.recv(HostRecv(1, "0", 0, 7, 0, 50), "c1")
    assert conn == "c1" and reply.payload == b"x" and reply.host_ns == 100
    assert ex.recv(HostRecv(1, "0", 0, 7, 1, 60), "c1") == []
    [(conn, reply)] = ex.send(HostSend(0, "0", 1, 7, 1, 70, b"y"))
    assert reply.payload == b"y"
    mirrored = _exchanges({}, reps.plan(4, []))
    with pytest.raises(CollectiveError, match="--live-ranks all"):
        mirrored.recv(HostRecv(0, "0", 1, 0, 0, 0), "c0")


def test_a_member_that_ends_without_joining_is_reported():
    ex = _exchanges({"0": ((0, 1), "default_pg")}, None)
    ex.exchange(HostExchange(0, "0", 0, "allreduce", 0, b""), "c0")
    ex.check(lambda r: False, timeout_s=300)
    with pytest.raises(CollectiveError, match=r"rank\(s\) \[1\] finished without joining"):
        ex.check(lambda r: r == 1, timeout_s=300)


# ---- end to end ----

def _events(path) -> list:
    doc = json.load(gzip.open(path))
    return [json.dumps(e, sort_keys=True) for e in doc["traceEvents"]], doc.get("distributedInfo")


def _steps(stdout: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for rank, t in re.findall(r"^\[rank(\d+)\]: step \d+ time_ms ([0-9.]+)", stdout, re.M):
        out.setdefault(int(rank), []).append(t)
    return out


@pytest.mark.slow  # ~70 s on 2 cores; test_host_collectives_give_mirrored_members... runs mirrored ranks by default
def test_representative_ddp_equals_every_rank_live(cli, tmp_path):
    runs = {}
    for mode in ("representative", "all"):
        extra = ["--trace-ranks", "2"] if mode == "representative" else []  # rank 2 live on request
        r = cli("--nproc-per-node", "4", "--live-ranks", mode, *extra, "--out", f"out_{mode}", "--summary-json",
                f"{mode}.json", PY, str(SCRIPTS / "dist_ddp.py"), "2", timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        runs[mode] = r
    rep, full = runs["representative"], runs["all"]
    assert "3 live ranks simulate 4" in rep.stderr and "live on request" in rep.stderr, rep.stderr[-2000:]
    assert sorted(_steps(rep.stdout)) == [0, 2, 3] and sorted(_steps(full.stdout)) == [0, 1, 2, 3]
    assert _steps(rep.stdout)[0] == _steps(full.stdout)[0]
    assert _steps(rep.stdout)[2] == _steps(full.stdout)[2]
    assert sorted(p.name for p in (tmp_path / "out_representative").glob("rank*.pt.trace.json.gz")) == [
        "rank0.pt.trace.json.gz", "rank2.pt.trace.json.gz", "rank3.pt.trace.json.gz"]
    strip = re.compile(r'"(ts)": [0-9.]+')  # absolute times differ by the runs' epochs only
    for rank in (0, 2):
        ev_rep, info_rep = _events(tmp_path / "out_representative" / f"rank{rank}.pt.trace.json.gz")
        ev_all, info_all = _events(tmp_path / "out_all" / f"rank{rank}.pt.trace.json.gz")
        assert info_rep == info_all and info_rep["world_size"] == 4 and info_rep["rank"] == rank
        assert len(ev_rep) == len(ev_all)
        assert [strip.sub("", e) for e in ev_rep] == [strip.sub("", e) for e in ev_all]
    summary = json.loads((tmp_path / "representative.json").read_text())
    assert summary["representative_ranks"]["live"] == [0, 2, 3]
    assert summary["representative_ranks"]["requested"] == [2]
    assert summary["representative_ranks"]["class_checks"] == []
    by_rank = {d["rank"]: d for d in summary["ranks"]}
    assert by_rank[1]["mirror_of"] == 0 and by_rank[1]["sim_time_ns"] == by_rank[0]["sim_time_ns"]
    full_summary = json.loads((tmp_path / "all.json").read_text())
    assert [d["sim_time_ns"] for d in full_summary["ranks"]] == [d["sim_time_ns"] for d in summary["ranks"]]


def test_host_collectives_give_mirrored_members_their_representatives_values(cli):
    r = cli("--nproc-per-node", "4", "--live-ranks", "representative", "--no-trace", PY,
            str(SCRIPTS / "dist_collectives.py"), "host-only", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # rank 0 stands for ranks 0..2 (their parts are its part), rank 3 is itself
    for rank in (0, 3):
        assert (f"[rank{rank}]: all_gather_object [{{'rank': 0, 'name': 'r0'}}, {{'rank': 0, 'name': 'r0'}}, "
                "{'rank': 0, 'name': 'r0'}, {'rank': 3, 'name': 'r3'}]") in r.stdout
        assert f"[rank{rank}]: broadcast_object_list ['from0', 0]" in r.stdout
        assert f"[rank{rank}]: cpu_all_reduce 7.0" in r.stdout  # 1 + 1 + 1 + 4
        assert f"[rank{rank}]: cpu_all_gather [[0, 7], [0, 7], [0, 7], [3, 7]]" in r.stdout
        assert f"[rank{rank}]: device_all_reduce 7.0" in r.stdout


def test_point_to_point_with_a_mirrored_rank_is_a_clear_error(cli):
    r = cli("--nproc-per-node", "4", "--live-ranks", "representative", "--no-trace", PY,
            str(REPO / "examples" / "pp" / "train.py"), "--steps", "1", "--layers", "4", "--dim", "64",
            "--heads", "2", "--seq", "32", "--vocab", "256", timeout=600)
    assert r.returncode != 0
    assert "runs no program" in r.stderr and "--live-ranks all" in r.stderr, r.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("example,args,ranks", [
    ("pp", ["--dp", "4", "--layers", "4", "--steps", "2"], 8),
    ("fsdp_tp", ["--steps", "2"], 4),
])
def test_representative_examples_match_every_rank_live(cli, tmp_path, example, args, ranks):
    steps = {}
    for mode in ("representative", "all"):
        r = cli("--nproc-per-node", str(ranks), "--live-ranks", mode, "--out", f"out_{mode}", PY,
                str(REPO / "examples" / example / "train.py"), *args, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        steps[mode] = _steps(r.stdout)
    for rank, times in steps["representative"].items():
        want = [float(t) for t in steps["all"][rank]]
        got = [float(t) for t in times]
        assert got == pytest.approx(want, rel=0.01), (rank, got, want)
