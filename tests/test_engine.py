"""Engine semantics: stream FIFO order, launch latency, events, cross-stream waits, syncs."""
from dataclasses import dataclass

from phantora_prof.cost.profiles import load_profile
from phantora_prof.engine.gpu import SimulatedGpu

LAUNCH_LATENCY_NS = load_profile("h200").launch_latency_ns
KERNEL_GAP_NS = load_profile("h200").kernel_gap_ns
from phantora_prof.engine.rank_timeline import RankTimeline
from phantora_prof.protocol import (
    EventElapsedRequest,
    EventQueryRequest,
    EventRecord,
    OpCall,
    OpKind,
    StreamWaitEvent,
    SyncKind,
    SyncRequest,
    TensorArg,
)

L = LAUNCH_LATENCY_NS


def test_stream_is_fifo_and_respects_launch_latency():
    g = SimulatedGpu(0, LAUNCH_LATENCY_NS, KERNEL_GAP_NS)
    a = g.enqueue(7, launch_ns=0, duration_ns=10_000)
    b = g.enqueue(7, launch_ns=1_000, duration_ns=5_000)
    assert a.start_ns == L and a.end_ns == L + 10_000
    assert b.start_ns == a.end_ns + KERNEL_GAP_NS  # queued behind a, after the retire/start gap
    late = g.enqueue(7, launch_ns=100_000, duration_ns=1_000)
    assert late.start_ns == 100_000 + L  # idle stream: starts after its launch


def test_streams_run_concurrently_and_events_order_them():
    g = SimulatedGpu(0, LAUNCH_LATENCY_NS, KERNEL_GAP_NS)
    g.enqueue(13, 0, 50_000)  # side stream: a long copy
    ev = g.record_event(13, host_ns=1_000)
    assert ev == L + 50_000
    k = g.enqueue(7, 2_000, 1_000)  # main stream does not wait by default
    assert k.start_ns == 2_000 + L
    g.wait_event(7, ev)
    k2 = g.enqueue(7, 3_000, 1_000)
    assert k2.start_ns == ev  # waits for the event
    # the wait applies once
    k3 = g.enqueue(7, 3_500, 1_000)
    assert k3.start_ns == k2.end_ns + KERNEL_GAP_NS


def test_wait_on_unrecorded_event_is_noop():
    g = SimulatedGpu(0, LAUNCH_LATENCY_NS, KERNEL_GAP_NS)
    g.wait_event(7, None)
    assert g.enqueue(7, 0, 1).start_ns == L


def test_device_done_is_max_over_streams():
    g = SimulatedGpu(0, LAUNCH_LATENCY_NS, KERNEL_GAP_NS)
    g.enqueue(7, 0, 10)
    g.enqueue(13, 0, 1_000_000)
    assert g.device_done_ns() == L + 1_000_000
    assert g.stream_done_ns(7) == L + 10


@dataclass(frozen=True)
class _K:
    kind: str = "kernel"
    name: str = "k"
    duration_ns: int = 100_000
    grid: tuple = (1, 1, 1)
    block: tuple = (128, 1, 1)
    registers_per_thread: int = 32
    shared_memory: int = 0
    bytes: int = 0
    launch_api: str = "cudaLaunchKernel"
    flops: float = 0.0
    source: str = "roofline"


def _op(ext, start, stream=7, kernels=(_K(),)):
    t = TensorArg((4, 4), (4, 1), "float32", 0)
    op = OpCall(0, ext, "aten::mm", (t, t), {}, (t,), 0, start, start + 10_000, stream, 0, OpKind.COMPUTE)
    op.launch_ns = start + 5_000
    op.kernels = kernels
    return op


def test_timeline_sync_blocks_until_gpu_done():
    tl = RankTimeline(0, 100, [{}])
    tl.handle(_op(1, 0))
    tl.handle(_op(2, 10_000))
    ret = tl.handle(SyncRequest(0, SyncKind.DEVICE, 0, 0, host_ns=20_000))
    # two 100 us kernels back to back after the first launch
    first_start = 5_000 + L
    assert ret >= first_start + 200_000
    # a sync with nothing pending returns after just the API cost
    ret2 = tl.handle(SyncRequest(0, SyncKind.DEVICE, 0, 0, host_ns=ret + 1_000_000))
    assert ret + 1_000_000 < ret2 < ret + 1_000_000 + 10_000


def test_timeline_events_query_and_elapsed():
    tl = RankTimeline(0, 100, [{}])
    tl.handle(EventRecord(0, 1, 7, 0, host_ns=0))
    tl.handle(_op(1, 0))
    tl.handle(EventRecord(0, 2, 7, 0, host_ns=10_000))
    assert tl.handle(EventQueryRequest(0, 2, host_ns=10_000)) is False
    assert tl.handle(EventQueryRequest(0, 2, host_ns=10_000_000)) is True
    ms = tl.handle(EventElapsedRequest(0, 1, 2))
    assert abs(ms - (5_000 + L + 100_000) / 1e6) < 1e-9


def test_timeline_cross_stream_wait():
    tl = RankTimeline(0, 100, [{}])
    tl.handle(_op(1, 0, stream=13, kernels=(_K(duration_ns=1_000_000),)))
    tl.handle(EventRecord(0, 5, 13, 0, host_ns=10_000))
    tl.handle(StreamWaitEvent(0, 7, 5, 0, host_ns=11_000))
    tl.handle(_op(2, 12_000, stream=7))
    kernels = sorted((s for s in tl.spans if s.cat == "kernel"), key=lambda s: s.ts_ns)
    assert kernels[1].ts_ns == kernels[0].ts_ns + kernels[0].dur_ns
    done = tl.handle(SyncRequest(0, SyncKind.STREAM, 7, 0, host_ns=13_000))
    assert done >= kernels[1].ts_ns + kernels[1].dur_ns


def test_timeline_launches_and_flows_pair_up():
    tl = RankTimeline(0, 100, [{}])
    tl.handle(_op(1, 0, kernels=(_K(), _K(launch_api="cuLaunchKernelEx"))))
    launches = [s for s in tl.spans if s.cat in ("cuda_runtime", "cuda_driver")]
    kernels = [s for s in tl.spans if s.cat == "kernel"]
    assert [s.cat for s in launches] == ["cuda_runtime", "cuda_driver"]
    assert {s.args["correlation"] for s in launches} == {s.args["correlation"] for s in kernels}
    assert all(f.cat == "ac2g" for f in tl.flows) and len(tl.flows) == 2
    for k in kernels:
        launch = next(s for s in launches if s.args["correlation"] == k.args["correlation"])
        assert launch.ts_ns + L <= k.ts_ns
        assert k.args["External id"] == launch.args["External id"] == 1
    assert tl.gpu_busy_ns() == 200_000
