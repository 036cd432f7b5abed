"""netsim benchmarks (pytest-benchmark). Not collected by default; run with

    python -m pytest tests/bench_netsim.py -m benchmark -n 0 --benchmark-columns=min,median,max

Targets (issue 5): one max-min recomputation for 10,000 flows over 1,000 links <= 2 ms;
a ring all-reduce of 1 GiB simulated on 1,024 GPUs <= 1 s and on 16,384 GPUs <= 30 s
(wall, building the topology and the plan included); events per second reported; the
numba kernel compared with the numpy version of the same algorithm.
"""
import time

import numpy as np
import pytest

from netsim import CollectiveRequest, Network
from netsim.maxmin import maxmin_rates, maxmin_rates_numpy

pytestmark = pytest.mark.benchmark


def _instance(nflows=10_000, nlinks=1_000, seed=0):
    rng = np.random.default_rng(seed)
    lens = rng.integers(2, 8, nflows)
    ptr = np.zeros(nflows + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(lens)
    link = np.concatenate([rng.choice(nlinks, k, replace=False) for k in lens]).astype(np.int64)
    w = np.ones(len(link))
    cap = np.full(nflows, np.inf)
    lcap = rng.uniform(10.0, 100.0, nlinks)
    return ptr, link, w, cap, lcap


def test_maxmin_10k_flows_1k_links(benchmark):
    ptr, link, w, cap, lcap = _instance()
    maxmin_rates(ptr, link, w, cap, lcap)  # compile / load cache
    rates = benchmark(maxmin_rates, ptr, link, w, cap, lcap)
    t0 = time.perf_counter()
    reps = 3
    for _ in range(reps):
        ref = maxmin_rates_numpy(ptr, link, w, cap, lcap)
    numpy_s = (time.perf_counter() - t0) / reps
    numba_s = benchmark.stats.stats.median
    benchmark.extra_info.update(numpy_median_s=numpy_s, numba_median_s=numba_s, speedup=numpy_s / numba_s)
    print(f"\nmax-min 10k flows x 1k links: numba {numba_s * 1e3:.2f} ms, numpy {numpy_s * 1e3:.1f} ms, "
          f"numba is {numpy_s / numba_s:.0f}x faster")
    assert np.allclose(rates, ref, rtol=1e-9)
    assert numba_s <= 2e-3


def _ring(nnodes):
    t0 = time.perf_counter()
    net = Network.from_cluster("dgx-h100", nnodes)
    (res,) = net.simulate_collectives([CollectiveRequest("all_reduce", range(nnodes * 8), 1 << 30, algorithm="ring")])
    wall = time.perf_counter() - t0
    return wall, res, net.last_stats


@pytest.mark.parametrize("nnodes,limit_s", [(128, 1.0), (2048, 30.0)], ids=["1024gpus", "16384gpus"])
def test_ring_allreduce_1gib(benchmark, nnodes, limit_s):
    _ring(1)  # load compiled kernels
    wall, res, stats = benchmark.pedantic(_ring, args=(nnodes,), rounds=3 if nnodes <= 128 else 1, iterations=1)
    benchmark.extra_info.update(stats, simulated_us=res.duration_ns / 1e3, algorithm=f"{res.algorithm}/{res.protocol}",
                                events_per_s=stats["events"] / wall)
    print(f"\nring all-reduce 1 GiB on {nnodes * 8} GPUs: wall {wall:.3f} s, simulated {res.duration_ns / 1e3:.0f} us "
          f"({res.algorithm}/{res.protocol}), {stats['events']:.0f} events")
    assert wall <= limit_s


def _mixed_step(nnodes=128, waves=4):
    """A 1,024-GPU training-like mix: per-node TP all-reduces and per-rail DP reduce-scatters,
    issued in staggered waves so that they overlap and contend on NVLink and the NICs."""
    net = Network.from_cluster("dgx-h100", nnodes)
    reqs = []
    for w in range(waves):
        t = w * 50_000.0
        for node in range(nnodes):
            reqs.append(CollectiveRequest("all_reduce", range(node * 8, node * 8 + 8), (16 + node % 7) << 20,
                                          start_ns=t + 37.0 * node))
        for rail in range(8):
            reqs.append(CollectiveRequest("reduce_scatter", range(rail, nnodes * 8, 8), 256 << 20,
                                          start_ns=t + 1000.0 * rail))
    t0 = time.perf_counter()
    res = net.simulate_collectives(reqs)
    wall = time.perf_counter() - t0
    return wall, res, net.last_stats


def test_event_rate_concurrent_collectives(benchmark):
    _mixed_step(nnodes=2, waves=1)
    wall, res, stats = benchmark.pedantic(_mixed_step, rounds=2, iterations=1)
    benchmark.extra_info.update(stats, events_per_s=stats["events"] / wall, collectives=len(res))
    print(f"\n{len(res)} concurrent collectives on 1024 GPUs: {stats['events']:.0f} events, "
          f"{stats['recomputes']:.0f} max-min recomputations in {wall:.3f} s = {stats['events'] / wall:,.0f} events/s")


def _alltoall(nnodes=4):
    net = Network.from_cluster("dgx-h100", nnodes, pair_flow_limit=nnodes * 8)
    rng = np.random.default_rng(0)
    n = nnodes * 8
    split = rng.integers(1 << 16, 1 << 20, (n, n))  # uneven (MoE-like) splits
    t0 = time.perf_counter()
    (res,) = net.simulate_collectives([CollectiveRequest("all_to_all", range(n), 0, split=split)])
    return time.perf_counter() - t0, res, net.last_stats


def test_alltoall_1024_ranks_merged(benchmark):
    """Large all-to-alls run as one merged flow: cost is building the n^2 pair paths."""
    def run():
        net = Network.from_cluster("dgx-h100", 128)
        t0 = time.perf_counter()
        (res,) = net.simulate_collectives([CollectiveRequest("all_to_all", range(1024), 1 << 30)])
        return time.perf_counter() - t0, res
    wall, res = benchmark.pedantic(run, rounds=1, iterations=1)
    busbw = (1 << 30) / res.duration_ns * 1023 / 1024
    print(f"\nall-to-all 1 GiB on 1024 GPUs (merged flow): wall {wall:.2f} s, busbw {busbw:.1f} GB/s")


def test_event_rate_uneven_alltoall_32_ranks_pair_flows(benchmark):
    _alltoall(nnodes=1)
    wall, res, stats = benchmark.pedantic(_alltoall, rounds=3, iterations=1)
    benchmark.extra_info.update(stats, events_per_s=stats["events"] / wall)
    print(f"\nuneven all-to-all, 32 ranks, one flow per pair: {stats['flows']:.0f} flows, {stats['events']:.0f} events in "
          f"{wall:.2f} s = {stats['events'] / wall:,.0f} events/s")
