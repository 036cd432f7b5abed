"""netsim unit tests: max-min properties, flow engine, paths, algorithms, tuning, TOML, API."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from netsim import CollectiveRequest, Network, NetsimError, Topology, get_preset, load_cluster_file
from netsim.algorithms import ring, tree
from netsim.cluster_file import cluster_from_dict, resolve_cluster
from netsim.flowsim import FlowDagBuilder, run_dag
from netsim.maxmin import maxmin_rates, maxmin_rates_numpy
from netsim.nccl_tests import busbw_factor, format_table, run_sweep
from netsim.topology import splitmix64
from netsim.tuning import CommShape, model_entry, RING, LL

INF = np.inf


def _csr(paths, weights=None):
    ptr = np.zeros(len(paths) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(p) for p in paths])
    link = np.array([l for p in paths for l in p], dtype=np.int64)
    if weights is None:
        w = np.ones(len(link))
    else:
        w = np.array([x for ws in weights for x in ws], dtype=np.float64)
    return ptr, link, w


# ---------------------------------------------------------------- max-min
def test_maxmin_equal_share():
    ptr, link, w = _csr([[0], [0]])
    r = maxmin_rates(ptr, link, w, np.full(2, INF), np.array([10.0]))
    assert r.tolist() == [5.0, 5.0]


def test_maxmin_hand_computed_bottlenecks():
    # f0 on A (cap 10); f1 on A and B (cap 4); f2 on B and C (cap 100)
    ptr, link, w = _csr([[0], [0, 1], [1, 2]])
    r = maxmin_rates(ptr, link, w, np.full(3, INF), np.array([10.0, 4.0, 100.0]))
    # B saturates first at 2 each (f1, f2); then f0 takes the rest of A: 8
    assert np.allclose(r, [8.0, 2.0, 2.0])


def test_maxmin_weights_and_caps():
    # f0 loads link 0 twice as hard as f1 -> equal rates x with 2x + x = 12 -> x = 4
    ptr, link, w = _csr([[0], [0]], [[2.0], [1.0]])
    r = maxmin_rates(ptr, link, w, np.full(2, INF), np.array([12.0]))
    assert np.allclose(r, [4.0, 4.0])
    # a capped flow leaves the rest to the other
    ptr, link, w = _csr([[0], [0]])
    r = maxmin_rates(ptr, link, w, np.array([3.0, INF]), np.array([10.0]))
    assert np.allclose(r, [3.0, 7.0])


def _random_instance(seed, nflows=300, nlinks=60):
    rng = np.random.default_rng(seed)
    paths = [list(rng.choice(nlinks, rng.integers(1, 6), replace=False)) for _ in range(nflows)]
    weights = [list(rng.uniform(0.2, 2.0, len(p))) for p in paths]
    ptr, link, w = _csr(paths, weights)
    cap = np.where(rng.random(nflows) < 0.1, rng.uniform(0.05, 1.0, nflows), INF)
    lcap = rng.uniform(1.0, 50.0, nlinks)
    return ptr, link, w, cap, lcap


@pytest.mark.parametrize("seed", range(5))
def test_maxmin_properties_random(seed):
    ptr, link, w, cap, lcap = _random_instance(seed)
    r = maxmin_rates(ptr, link, w, cap, lcap)
    owner = np.repeat(np.arange(len(r)), np.diff(ptr))
    load = np.bincount(link, weights=w * r[owner], minlength=len(lcap))
    assert (load <= lcap * (1 + 1e-9)).all(), "a link is over capacity"
    saturated = load >= lcap * (1 - 1e-7)
    for f in range(len(r)):
        links = link[ptr[f]:ptr[f + 1]]
        at_cap = np.isfinite(cap[f]) and r[f] >= cap[f] * (1 - 1e-9)
        # bottlenecked: a saturated link on which f has the (weight-normalized) top rate, or its cap
        assert at_cap or saturated[links].any(), f"flow {f} is not bottlenecked"
    rn = maxmin_rates_numpy(ptr, link, w, cap, lcap)
    assert np.allclose(r, rn, rtol=1e-9)
    assert np.array_equal(r, maxmin_rates(ptr, link, w, cap, lcap)), "not deterministic"


# ---------------------------------------------------------------- flow engine
def test_flow_engine_events_and_dependencies():
    b = FlowDagBuilder()
    a = b.add([0], 1, 100)                     # shares link 0 with c until c ends
    c = b.add([0, 1], 1, 50)
    d = b.add([1], 1, 30, deps=[c], delay=5)   # starts 5 ns after c ends, alone on link 1
    e = b.add([], [], 0.0, deps=[a, d])        # marker: both done
    start, end, nev, _ = run_dag(np.array([10.0, 10.0]), b.build())
    assert end[c] == pytest.approx(10.0)
    assert end[a] == pytest.approx(15.0)
    assert start[d] == pytest.approx(15.0) and end[d] == pytest.approx(18.0)
    assert end[e] == pytest.approx(18.0)
    assert nev >= 8


def test_flow_engine_is_deterministic():
    ptr, link, w, cap, lcap = _random_instance(7, nflows=80, nlinks=20)
    rng = np.random.default_rng(1)

    def build():
        b = FlowDagBuilder()
        for f in range(80):
            deps = [int(rng.integers(0, f))] if f > 10 and f % 3 == 0 else []
            b.add(link[ptr[f]:ptr[f + 1]], w[ptr[f]:ptr[f + 1]], float(rng.uniform(1, 100)),
                  release=float(rng.uniform(0, 50)), deps=deps)
        return b.build()

    rng = np.random.default_rng(1)
    r1 = run_dag(lcap, build())
    rng = np.random.default_rng(1)
    r2 = run_dag(lcap, build())
    assert np.array_equal(r1[0], r2[0]) and np.array_equal(r1[1], r2[1])


# ---------------------------------------------------------------- topology
def test_splitmix64_is_stable():
    assert splitmix64(0) == 0xE220A8397B1DCDAF


def test_paths_rail_optimized_and_pxn():
    topo = Topology(get_preset("dgx-h100"), 4)
    # same node: NVLink up + down
    assert topo.path(0, 3) == [int(topo.nvl_up[0]), int(topo.nvl_dn[3])]
    # same rail across nodes: PCIe, NIC, NIC, PCIe; no spine inside one unit
    p = topo.path(2, 10)
    kinds = [topo.link_kind[l] for l in p]
    assert [topo.link_name(l).split("[")[0] for l in p] == ["pcie_up", "nic_tx", "nic_rx", "pcie_dn"], kinds
    # cross rail with PXN: NVLink hop to the GPU on the destination's rail first
    p = topo.path(1, 13)
    assert p[:2] == [int(topo.nvl_up[1]), int(topo.nvl_dn[5])]
    # without PXN the source NIC is used and the flow crosses the spine
    p = topo.path(1, 13, pxn=False)
    assert any(topo.link_name(l).startswith("leaf_up") for l in p)


def test_paths_deterministic_across_processes_and_torch_free():
    topo = Topology(get_preset("dgx-h100"), 80)
    mine = [topo.path(s, d, tag=t, pxn=False) for s, d, t in [(1, 600, 0), (9, 300, 3), (77, 500, 11)]]
    code = textwrap.dedent("""
        import json, sys
        import netsim.nccl_tests
        from netsim import Topology, get_preset
        assert "torch" not in sys.modules and "phantora_prof" not in sys.modules, "netsim must not import them"
        topo = Topology(get_preset("dgx-h100"), 80)
        print(json.dumps([topo.path(s, d, tag=t, pxn=False) for s, d, t in [(1, 600, 0), (9, 300, 3), (77, 500, 11)]]))
    """)
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == mine


def test_oversubscription_sets_uplink_capacity():
    spec = cluster_from_dict({"network": {"oversubscription": 2.0, "nodes_per_leaf": 4, "spines": 4}})
    topo = Topology(spec, 8)
    assert topo.uplink_cap == pytest.approx(4 * spec.network.nic_effective / (4 * 2.0))


# ---------------------------------------------------------------- algorithms
@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_ring_step_counts_and_schedule(n):
    assert ring.steps("all_reduce", n) == 2 * (n - 1)
    assert ring.steps("all_gather", n) == n - 1 and ring.steps("reduce_scatter", n) == n - 1
    sched = ring.allreduce_schedule(n)
    assert len(sched) == 2 * (n - 1)
    # execute it: each rank starts with its own contribution in every chunk
    data = [[{r} for _ in range(n)] for r in range(n)]
    for step in sched:
        sends = [(s, d, c, op, set(data[s][c])) for s, d, c, op in step]
        for s, d, c, op, payload in sends:
            data[d][c] = data[d][c] | payload if op == "reduce" else payload
    assert all(data[r][c] == set(range(n)) for r in range(n) for c in range(n))


def test_btree_matches_nccl_picture_and_double_tree_property():
    assert tree.btree(14, 0) == (-1, -1, 8)
    assert tree.btree(14, 12) == (8, 10, 13)
    assert tree.btree(14, 13)[0] == 12
    for n in range(2, 40):
        t0, t1 = tree.dtree_edges(n)
        assert len(t0) == n - 1 and len(t1) == n - 1
        interior0 = {p for _, p in t0}
        interior1 = {p for _, p in t1}
        # every node is an interior node in at most one tree (leaves in the other) except tiny n
        if n > 3:
            assert len(interior0 & interior1) <= 1
        assert tree.depth(n) == max(1, (n - 1).bit_length())


def test_ring_link_loads_single_node():
    net = Network.from_cluster("dgx-h100", 1)
    plan = net.plan(CollectiveRequest("all_reduce", range(8), 1 << 30, algorithm="ring", protocol="Simple"))
    topo = net.topology
    w = dict(zip(plan.links.tolist(), plan.weights.tolist()))
    for g in range(8):
        assert w[int(topo.nvl_up[g])] == pytest.approx(2 * 7 / 8)
        assert w[int(topo.nvl_dn[g])] == pytest.approx(2 * 7 / 8)


def test_nvls_and_ring_multi_node_loads():
    net = Network.from_cluster("dgx-h100", 2)
    topo = net.topology
    req = CollectiveRequest("all_gather", range(16), 1 << 30, algorithm="ring", protocol="Simple")
    plan = net.plan(req)
    w = dict(zip(plan.links.tolist(), plan.weights.tolist()))
    # 16 channels over 8 NICs: each NIC carries 2 channel-rings each way, (n-1)/n of size / 16 each
    for nic in range(16):
        assert w[int(topo.nic_tx[nic])] == pytest.approx(2 * (15 / 16) / 16)
    # LL doubles the wire bytes
    ll = net.plan(CollectiveRequest("all_gather", range(16), 1 << 30, algorithm="ring", protocol="LL"))
    assert ll.weights.max() == pytest.approx(2 * plan.weights.max())


# ---------------------------------------------------------------- tuning / selection
def test_nccl_latency_model_values():
    shape = CommShape(nranks=16, nnodes=2)
    # tree/LL on 2 nodes of 8: 6.8 + 2 * (7 * 0.6 + 1 * 5.0) us (NCCL tuning.cc)
    assert model_entry("all_reduce", 0, LL, shape).latency_us == pytest.approx(6.8 + 2 * (7 * 0.6 + 5.0))
    one = CommShape(nranks=8, nnodes=1)
    assert model_entry("all_reduce", RING, LL, one).latency_us == pytest.approx(6.6 + 14 * 0.6)


def test_selection_follows_message_size_on_dgx_h100():
    net = Network.from_cluster("dgx-h100", 1)
    assert (net.choose("all_reduce", range(8), 1024).algo, net.choose("all_reduce", range(8), 1024).proto) == ("ring", "LL")
    assert net.choose("all_reduce", range(8), 64 << 20).algo == "nvls"
    assert net.choose("all_gather", range(8), 1 << 30).algo == "ring"
    net4 = Network.from_cluster("dgx-h100", 4)
    assert net4.choose("all_reduce", range(32), 8).algo == "tree"
    assert net4.choose("all_reduce", range(32), 1 << 30).algo == "nvls_tree"
    a100 = Network.from_cluster("dgx-a100", 1)
    assert a100.choose("all_reduce", range(8), 1 << 30).algo == "ring"  # no NVLS on A100
    with pytest.raises(NetsimError):
        a100.choose("all_reduce", range(8), 1 << 30, algorithm="nvls")


# ---------------------------------------------------------------- cluster files
def test_presets_and_resolution(tmp_path):
    h100 = get_preset("DGX_H100")
    assert h100.node.nvls and h100.network.nic_gbits == 400 and h100.node.gpus_per_node == 8
    assert not get_preset("dgx-a100").node.nvls
    with pytest.raises(NetsimError, match="unknown cluster preset"):
        get_preset("dgx-h900")
    f = tmp_path / "c.toml"
    f.write_text('name = "mine"\nbase = "dgx-a100"\n[node]\ngpus_per_node = 4\n[network]\nnic_gbits = 100\n')
    spec = resolve_cluster(str(f))
    assert spec.name == "mine" and spec.node.gpus_per_node == 4 and spec.node.gpu_arch == "ampere"
    assert spec.network.nic_gbits == 100.0


@pytest.mark.parametrize("text,match", [
    ('[node]\ngpus_per_nod = 8\n', r"unknown key\(s\) in \[node\]: gpus_per_nod"),
    ('[node]\ngpus_per_node = "8"\n', r"node.gpus_per_node must be an integer"),
    ('[node]\nnvlink_efficiency = 1.5\n', r"node.nvlink_efficiency must be in \(0, 1\]"),
    ('[network]\noversubscription = 0.5\n', r"network.oversubscription must be >= 1"),
    ('[node]\nnvswitch = false\n', r"nvls \(NVLink SHARP\) needs node.nvswitch"),
    ('[node]\ngpu_arch = "kepler"\n', r"node.gpu_arch must be one of"),
    ('base = "dgx-h900"\n', r"unknown cluster preset"),
    ('[fabric]\nx = 1\n', r"unknown top-level key\(s\): fabric"),
    ('[node\n', r"not valid TOML"),
])
def test_cluster_file_validation_errors(tmp_path, text, match):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(NetsimError, match=match) as e:
        load_cluster_file(f)
    assert str(f) in str(e.value)


def test_cluster_file_missing(tmp_path):
    with pytest.raises(NetsimError, match="cannot read cluster file"):
        load_cluster_file(tmp_path / "nope.toml")


# ---------------------------------------------------------------- engine API
def test_fast_path_equals_event_loop():
    net = Network.from_cluster("dgx-h100", 2)
    for op, nbytes in [("all_reduce", 1 << 28), ("all_gather", 1 << 26), ("broadcast", 1 << 24), ("send_recv", 1 << 20)]:
        req = CollectiveRequest(op, range(16), nbytes, start_ns=1000.0)
        fast = net.collective_time(req)
        (slow,) = net.simulate_collectives([req])
        assert slow.start_ns == pytest.approx(1000.0)
        assert slow.end_ns == pytest.approx(fast.end_ns, rel=1e-9), op


def test_concurrent_collectives_contend():
    net = Network.from_cluster("dgx-h100", 2)
    tp = CollectiveRequest("all_reduce", range(8), 256 << 20, algorithm="ring", protocol="Simple")
    single = net.collective_time(tp)
    alone = single.duration_ns
    # the same all-reduce twice at once on the same GPUs: each gets half the links, or its own
    # ceiling (NCCL's size ramp, netsim/ramp.py) where that is lower
    a, b = net.simulate_collectives([tp, tp])
    plan = net.plan(tp)
    link_rate = float(np.min(net.topology.link_cap[plan.links] / plan.weights))
    assert plan.cap_algbw < link_rate  # the ramp holds a 256 MiB ring below the NVLink rate
    expect = single.latency_ns + tp.nbytes / min(plan.cap_algbw, link_rate / 2)
    assert a.duration_ns == pytest.approx(expect, rel=1e-9) and b.end_ns == pytest.approx(a.end_ns)
    assert alone < a.duration_ns < 2 * alone
    # a DP reduce-scatter across the NICs of the other node's GPUs does not touch node 0's NVLink
    dp_other = CollectiveRequest("reduce_scatter", [8 + i for i in range(8)], 1 << 30)
    r_tp, _ = net.simulate_collectives([tp, dp_other])
    assert r_tp.duration_ns == pytest.approx(alone, rel=1e-6)
    # a DP reduce-scatter over both nodes shares node 0's NVLink ports with the TP ring: slower
    dp = CollectiveRequest("reduce_scatter", range(16), 1 << 30)
    r_tp2, r_dp = net.simulate_collectives([tp, dp])
    assert r_tp2.duration_ns > alone * 1.05
    assert r_dp.duration_ns > net.collective_time(dp).duration_ns


def test_after_dependencies_and_uneven_alltoall():
    net = Network.from_cluster("dgx-h100", 2)
    r0 = CollectiveRequest("all_reduce", range(16), 1 << 24)
    r1 = CollectiveRequest("all_gather", range(16), 1 << 24, start_ns=0.0, after=(0,))
    res = net.simulate_collectives([r0, r1])
    assert res[1].start_ns == pytest.approx(res[0].end_ns)
    n = 16
    split = np.zeros((n, n), dtype=np.int64)
    split[0, 15] = 1 << 26  # one heavy cross-node pair
    split[1, 2] = 1 << 20
    (r,) = net.simulate_collectives([CollectiveRequest("all_to_all", range(n), 0, split=split)])
    nic = net.topology.spec.network.nic_effective
    assert r.duration_ns == pytest.approx(r.latency_ns + (1 << 26) / nic, rel=1e-6)
    with pytest.raises(NetsimError, match="all_to_all split must be"):
        net.simulate_collectives([CollectiveRequest("all_to_all", range(n), 0, split=np.ones((2, 2)))])


def test_request_validation():
    with pytest.raises(NetsimError, match="unknown collective"):
        CollectiveRequest("allsum", range(8), 8)
    with pytest.raises(NetsimError, match="nbytes"):
        CollectiveRequest("all_reduce", range(8), -1)
    net = Network.from_cluster("dgx-h100", 1)
    with pytest.raises(NetsimError, match="outside this cluster"):
        net.collective_time(CollectiveRequest("all_reduce", range(16), 8))


# ---------------------------------------------------------------- nccl-tests table
def test_sweep_rows_and_table():
    rows = run_sweep("all_gather", 1, 8, "dgx-h100", 8, 1 << 20, 2)
    assert rows[0].size == 0 and rows[0].count == 0          # 8 B cannot hold one float per rank
    assert rows[-1].size == 1 << 20 and rows[-1].count == (1 << 20) // 4 // 8
    assert rows[-1].busbw == pytest.approx(rows[-1].algbw * 7 / 8)
    table = format_table(rows)
    assert "algbw" in table and "busbw" in table and "# Avg bus bandwidth" in table
    line = table.splitlines()[-2]
    assert line.split()[:5] == ["1048576", "32768", "float", "none", "-1"]
    assert busbw_factor("all_reduce", 16) == pytest.approx(30 / 16)
    assert busbw_factor("sendrecv", 16) == 1.0
    from netsim.nccl_tests import parse_size
    assert parse_size("8G") == 8 << 30 and parse_size("64K") == 65536 and parse_size("8") == 8
    with pytest.raises(NetsimError, match="cannot read size"):
        parse_size("8Q")
    with pytest.raises(NetsimError, match="unknown nccl-tests op"):
        run_sweep("allsum", 1, 8, "dgx-h100", 8, 8)


def test_two_dp_groups_share_an_oversubscribed_spine():
    spec = cluster_from_dict({"network": {"nodes_per_leaf": 2, "spines": 1, "oversubscription": 2.0}})
    net = Network(Topology(spec, 4))
    a = CollectiveRequest("all_gather", [0, 16], 1 << 30, algorithm="ring", protocol="Simple")   # nodes 0, 2
    b = CollectiveRequest("all_gather", [8, 24], 1 << 30, algorithm="ring", protocol="Simple")   # nodes 1, 3
    alone = net.collective_time(a)
    ra, rb = net.simulate_collectives([a, b])
    transfer = alone.duration_ns - alone.latency_ns
    assert ra.duration_ns == pytest.approx(alone.latency_ns + 2 * transfer, rel=1e-6)
    assert rb.end_ns == pytest.approx(ra.end_ns)
    # same groups on a non-blocking fabric do not slow each other down
    net2 = Network.from_cluster("dgx-h100", 4)
    r2a, _ = net2.simulate_collectives([a, b])
    assert r2a.duration_ns == pytest.approx(net2.collective_time(a).duration_ns, rel=1e-9)
