"""The run's simulated time covers GPU work still queued when the host exits, and "GPU busy"
is the union over streams (never more than the run's time)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from conftest import SCRIPTS

from phantora_prof.cost.profiles import load_profile
from phantora_prof.engine.rank_timeline import RankTimeline
from phantora_prof.protocol import OpCall, OpKind, SyncKind, SyncRequest, TensorArg

L = load_profile("h200").launch_latency_ns


@dataclass
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


def _op(ext: int, start: int, stream: int, duration_ns: int) -> OpCall:
    t = TensorArg((4, 4), (4, 1), "float32", 0)
    op = OpCall(0, ext, "aten::mm", (t, t), {}, (t,), 0, start, start + 10_000, stream, 0, OpKind.COMPUTE)
    op.launch_ns = start + 5_000
    op.kernels = (_K(duration_ns=duration_ns),)
    return op


def test_end_covers_gpu_work_queued_at_exit_and_busy_is_a_union():
    tl = RankTimeline(0, 100, [{}])
    tl.handle(_op(1, 0, stream=7, duration_ns=1_000_000))
    tl.handle(_op(2, 10_000, stream=13, duration_ns=3_000_000))  # side stream, overlaps the first
    assert tl.stats.host_end_ns == 20_000  # the host is done long before the GPU
    side_end = 15_000 + L + 3_000_000
    assert tl.end_ns() == side_end
    assert tl.gpu_busy_ns() == side_end - (5_000 + L)  # the overlap counts once
    assert tl.gpu_busy_ns() <= tl.end_ns()


def test_end_is_the_host_when_it_synchronized_last():
    tl = RankTimeline(0, 100, [{}])
    tl.handle(_op(1, 0, stream=7, duration_ns=1_000_000))
    ret = tl.handle(SyncRequest(0, SyncKind.DEVICE, 0, 0, host_ns=20_000))
    assert tl.end_ns() == tl.stats.host_end_ns == ret


def test_unsynchronized_exit_counts_the_queued_gpu_work(cli):
    r = cli("--no-trace", "--summary-json", "s.json", sys.executable, str(SCRIPTS / "unsynced_exit.py"), "10")
    assert r.returncode == 0, r.stderr[-2000:]
    rank = json.loads((cli.cwd / "s.json").read_text())["ranks"][0]
    # 10 8192^3 bf16 matmuls on the default stream and 20 on a side stream, launched in well
    # under a millisecond of host time: the run lasts until the side stream's are done
    assert rank["gpu_busy_ns"] <= rank["sim_time_ns"]
    assert rank["gpu_busy_ns"] >= 0.95 * rank["sim_time_ns"]
    assert rank["sim_time_ns"] > 10_000_000
