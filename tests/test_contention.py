"""Contention (issue #19): NCCL kernels slow compute on their GPU, concurrent collectives share
links, both deterministic whatever the order messages arrive in (fast: no rank processes)."""
from __future__ import annotations

import itertools
from collections import deque

import pytest

from phantora_prof.cost.kernels import Kernel
from phantora_prof.engine import collectives as coll
from phantora_prof.cost.profiles import load_profile
from phantora_prof.engine.contention import GpuContention, kernel_category
from phantora_prof.engine.coordinator import Coordinator

PROFILE = load_profile("h200")
SLOWDOWN = PROFILE.contention_slowdown
LAUNCH_LATENCY_NS = PROFILE.launch_latency_ns
KERNEL_GAP_NS = PROFILE.kernel_gap_ns
from phantora_prof.engine.rank_timeline import RankTimeline
from phantora_prof.protocol import CollectiveCall, Hello, OpCall

SMS = 132


def test_factor_per_category_and_pro_rata():
    c = GpuContention(SMS, SLOWDOWN, PROFILE.nccl_ctas, PROFILE.nccl_p2p_ctas)
    assert c.finish(0, "gemm", 1_000, 100_000) == 101_000  # no NCCL kernel known: alone
    c.add_nccl(0, 200_000, 300_000, 24)
    f = 1 + SLOWDOWN["gemm"] * 24 / SMS
    # entirely inside the NCCL kernel: stretched by the full factor
    assert c.finish(0, "gemm", 200_000, 10_000) == round(200_000 + 10_000 * f)
    # half of it alone before the NCCL kernel, the rest slowed
    end = c.finish(0, "gemm", 150_000, 100_000)
    assert end == round(200_000 + 50_000 * f)
    # a category NCCL barely touches, and a memcpy-like category, are (nearly) unchanged
    assert c.finish(0, "memcpy", 200_000, 10_000) == 210_000
    assert 210_000 <= c.finish(0, "reduction", 200_000, 10_000) < 210_300
    # another device is not affected
    assert c.finish(1, "gemm", 200_000, 10_000) == 210_000
    # two NCCL kernels at once hold more SMs: slower still
    c.add_nccl(0, 200_000, 300_000, 24)
    f2 = 1 + SLOWDOWN["gemm"] * 48 / SMS
    assert c.finish(0, "gemm", 200_000, 10_000) == round(200_000 + 10_000 * f2)
    assert c.slowed_ns > 0


def test_measured_factors_match_the_real_traces():
    # `phantora-prof calibrate contention measure` on the 2 x H200 DDP/FSDP traces (24 of 132 SMs held)
    assert 1 + SLOWDOWN["gemm"] * 24 / SMS == pytest.approx(1.60, abs=0.02)
    assert 1 + SLOWDOWN["elementwise"] * 24 / SMS == pytest.approx(1.16, abs=0.02)
    assert kernel_category("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "aten::mm") == "gemm"
    assert kernel_category("vectorized_elementwise_kernel", "aten::add") == "elementwise"


def _call(rank, seq, host_ns, group="0", ranks=(0, 1), nbytes=64 << 20, comm=13, stream=7):
    return CollectiveCall(rank=rank, group=group, group_desc="default_pg", ranks=tuple(ranks), seq=seq,
                          op="all_reduce", coll_name="allreduce", nbytes=nbytes, dtype="float32",
                          in_nelems=nbytes // 4, out_nelems=nbytes // 4, stream=stream, comm_stream=comm, device=0,
                          host_ns=host_ns, start_ns=host_ns - 5_000, end_ns=host_ns + 10_000,
                          external_id=1000 * seq + 1 + (100 if group != "0" else 0))


def _gemm_op(rank, host_ns, ext, stream=7, dur=500_000):
    k = Kernel("kernel", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", dur, (2, 66, 1), (384, 1, 1), 168, 213188)
    return OpCall(rank=rank, external_id=ext, name="aten::mm", args=(), kwargs={}, outputs=(), tid=0,
                  start_ns=host_ns, end_ns=host_ns + 10_000, stream=stream, device=0, launch_ns=host_ns,
                  kernels=(k,))


def _coord(tmp_path, world=2):
    c = Coordinator(world, str(tmp_path), lambda r: RankTimeline(r, 100 + r, [{}], SMS),
                    collective_model=coll.NetsimModel("h200", 1, world))
    for r in range(world):
        c._hello(None, Hello(r, world, 0))
    return c


def _feed(c, msgs):
    for m in msgs:
        c._queues.setdefault(m.rank, deque()).append((m, None))
        c._pump([m.rank])


def _gpu_spans(c):
    return tuple((r, s.name, s.tid, s.ts_ns, s.dur_ns) for r in sorted(c.ranks)
                 for s in c.ranks[r].timeline.spans if s.on_gpu)


def test_gemm_beside_an_nccl_kernel_is_slowed(tmp_path):
    # rank 0 launches an all-reduce early, rank 1 late: rank 0's NCCL kernel holds its SMs from its
    # own launch on; a GEMM launched on rank 0's compute stream meanwhile runs slower
    c = _coord(tmp_path)
    _feed(c, [_call(0, 0, 1_000_000), _call(1, 0, 3_000_000), _gemm_op(0, 1_100_000, 9)])
    spans = c.ranks[0].timeline.spans
    nccl = next(s for s in spans if s.on_gpu and s.name.startswith("ncclDevKernel"))
    gemm = next(s for s in spans if s.on_gpu and s.name.startswith("nvjet"))
    assert nccl.ts_ns == 1_000_000 + LAUNCH_LATENCY_NS and nccl.ts_ns + nccl.dur_ns > 3_000_000
    assert nccl.args["grid"] == [24, 1, 1]
    assert gemm.ts_ns == 1_100_000 + LAUNCH_LATENCY_NS
    assert gemm.dur_ns == round(500_000 * (1 + SLOWDOWN["gemm"] * 24 / SMS))
    # the same GEMM after the all-reduce ended runs alone
    end = nccl.ts_ns + nccl.dur_ns
    _feed(c, [_gemm_op(0, end + 10_000, 10)])
    late = [s for s in c.ranks[0].timeline.spans if s.on_gpu and s.name.startswith("nvjet")][-1]
    assert late.dur_ns == 500_000
    assert c.ranks[0].timeline.contention.slowed_ns == gemm.dur_ns - 500_000


def test_concurrent_collectives_share_links_deterministically(tmp_path):
    # a TP-like and a DP-like collective on the same two GPUs (two process groups, two comm
    # streams), the second launched while the first runs: it gets a share of NVLink, whatever
    # the order in which the ranks' messages reach the coordinator
    msgs = [_call(0, 0, 1_000_000, "0", comm=13), _call(0, 0, 1_020_000, "1", comm=15, nbytes=256 << 20),
            _call(1, 0, 1_010_000, "0", comm=13), _call(1, 0, 1_030_000, "1", comm=15, nbytes=256 << 20)]
    results = set()
    for i, order in enumerate(itertools.permutations(range(4))):
        per_rank = {r: [m for m in msgs if m.rank == r] for r in (0, 1)}
        seq = [per_rank[msgs[j].rank].pop(0) for j in order]
        d = tmp_path / f"o{i}"
        d.mkdir()
        c = _coord(d)
        _feed(c, seq)
        assert not c._pending and not c._parked
        results.add(_gpu_spans(c))
    assert len(results) == 1
    spans = next(iter(results))
    model = coll.NetsimModel("h200", 1, 2)
    alone_big = model.duration("all_reduce", (0, 1), 256 << 20)[0]
    alone_small = model.duration("all_reduce", (0, 1), 64 << 20)[0]
    big = [s for s in spans if s[0] == 0 and s[2] == 15][0]
    small = [s for s in spans if s[0] == 0 and s[2] == 13][0]
    # the first keeps its time; the second, started while the first ran, is slower than alone
    assert small[4] == alone_small + (1_010_000 - 1_000_000)  # (rank 0's kernel waits 10 us for rank 1)
    big_start = 1_030_000 + LAUNCH_LATENCY_NS
    assert big[3] + big[4] - big_start > alone_big
    assert big[3] + big[4] - big_start < alone_big + alone_small


def test_collectives_apart_in_time_do_not_share(tmp_path):
    c = _coord(tmp_path)
    model = coll.NetsimModel("h200", 1, 2)
    alone = model.duration("all_reduce", (0, 1), 64 << 20)[0]
    late = 1_000_000 + LAUNCH_LATENCY_NS + alone + KERNEL_GAP_NS + 50_000
    _feed(c, [_call(0, 0, 1_000_000), _call(1, 0, 1_000_000), _call(0, 0, late, "1", comm=15),
              _call(1, 0, late, "1", comm=15)])
    durs = sorted(s.dur_ns for s in c.ranks[0].timeline.spans if s.on_gpu)
    assert durs == [alone, alone]


def test_two_groups_and_a_gemm_end_to_end(cli):
    """Rank processes: two groups' all-reduces launched together share NVLink (the second takes
    longer than alone), the GEMM launched beside them is slower than the same GEMM alone, and a
    rerun with ranks reaching the coordinator in other orders gives the same traces."""
    import sys

    from conftest import SCRIPTS
    from tracing.kineto import load_trace

    script = str(SCRIPTS / "dist_contention.py")
    r = cli("--nproc-per-node", "2", "--out", "a", sys.executable, script, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = load_trace(cli.cwd / "a" / "rank0.pt.trace.json.gz")
    kernels = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    gemms = [e for e in kernels if "nccl" not in e["name"]]
    big = [e for e in gemms if e["dur"] > 100]  # the 8192^3 GEMMs (~1 ms), not the fills
    assert len(big) == 3
    # (the NCCL kernels cover part of it: slower than alone, less than the full 1.6x)
    assert all(1.05 * big[0]["dur"] < g["dur"] < 1.6 * big[0]["dur"] for g in big[1:])
    nccl = [e for e in kernels if e["name"].startswith("ncclDevKernel_AllReduce") and e["args"]["In msg nelems"] == 64 << 18]
    assert len(nccl) == 4 and len({e["tid"] for e in nccl}) == 2
    alone = coll.NetsimModel("h200", 1, 2).duration("all_reduce", (0, 1), 64 << 20)[0] / 1000
    first, second = nccl[0], nccl[1]
    assert second["ts"] < first["ts"] + first["dur"]  # in flight together
    assert first["dur"] == pytest.approx(alone, abs=15)  # the first keeps its time (+ launch skew)
    # shared NVLink: together they need the link for longer than the NCCL ceiling of one alone
    assert second["dur"] > 1.25 * alone
    r2 = cli("--nproc-per-node", "2", "--out", "b", sys.executable, script, timeout=300,
             env={"PHANTORA_TEST_JITTER_MS": "40"})
    assert r2.returncode == 0, r2.stderr[-3000:]
    for rank in (0, 1):
        a_doc, b_doc = (load_trace(cli.cwd / d / f"rank{rank}.pt.trace.json.gz") for d in ("a", "b"))
        for doc_ in (a_doc, b_doc):
            for key in ("trace_id", "baseTimeNanoseconds", "traceName"):
                doc_.pop(key, None)
        assert a_doc == b_doc
