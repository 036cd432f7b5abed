"""CUDA's bounded launch queue: a host that never synchronizes runs at most the queue's depth of
launches ahead of its GPU, then at the GPU's pace (runtime/device/launch_queue.py)."""
from __future__ import annotations

import json
import re
import sys

from conftest import SCRIPTS

from phantora_prof.runtime.device.launch_queue import LaunchQueue

PY = sys.executable


def test_a_loop_without_syncs_runs_at_the_gpus_pace_once_the_queue_is_full(cli):
    r = cli("--no-trace", "--summary-json", "s.json", PY, str(SCRIPTS / "no_sync_loop.py"), "30")
    assert r.returncode == 0, r.stderr[-3000:]
    steps = [float(t) for t in re.findall(r"step \d+ time_ms ([0-9.]+)", r.stdout)]
    final = float(re.search(r"final_sync_ms ([0-9.]+)", r.stdout).group(1))
    steady = json.loads((cli.cwd / "s.json").read_text())["ranks"][0]["steady"]
    gpu_step = steady["busy_ns"] / steady["steps"] / 1e6  # the GPU's time per step (GPU-bound)
    # the first steps only launch (the queue has room): the host's own time, far below the GPU's
    assert steps[0] < 0.05 * gpu_step
    # once full, every step waits for the GPU: the GPU's time per step, the same at each step
    late = steps[15:]
    assert max(late) - min(late) < 0.001 * gpu_step
    assert abs(late[0] - gpu_step) < 0.01 * gpu_step, (late[0], gpu_step)
    # the synchronize at the end waits for what the queue still holds: several steps of GPU work
    assert 3 * gpu_step < final < 20 * gpu_step
    # a rerun gives the same figures (where the waits fall depends on the launches only)
    again = cli("--no-trace", PY, str(SCRIPTS / "no_sync_loop.py"), "30")
    assert again.stdout == r.stdout


def test_the_wait_is_inside_the_blocked_launch_call(cli):
    """As torch.profiler shows a full queue: a long cudaLaunchKernel, its kernel after it."""
    from tracing.kineto import load_trace

    r = cli("--format", "kineto", "--out", "t", PY, str(SCRIPTS / "no_sync_loop.py"), "14")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = load_trace(cli.cwd / "t" / "rank0.pt.trace.json.gz")
    launches = [e for e in doc["traceEvents"] if e.get("name") == "cudaLaunchKernel"]
    long = [e for e in launches if e["dur"] > 1000]  # us: a GEMM of this loop takes milliseconds
    assert long and len(long) < len(launches) / 2
    kernels = {e["args"]["correlation"]: e for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    for e in long:
        k = kernels[e["args"]["correlation"]]
        assert k["ts"] >= e["ts"] + e["dur"] - 1  # the kernel starts once its launch got room
    # each op's span holds its launch calls
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    ext = {e["args"]["External id"]: e for e in ops}
    for e in long:
        op = ext[e["args"]["External id"]]
        assert op["ts"] <= e["ts"] and e["ts"] + e["dur"] <= op["ts"] + op["dur"] + 1


class _Clock:
    def __init__(self):
        self.now_ns = 0

    def advance_to(self, t):
        self.now_ns = max(self.now_ns, t)


def test_launches_within_the_depth_never_ask(monkeypatch):
    from phantora_prof.runtime.device import streams

    asked = []
    monkeypatch.setattr(streams, "queue_turns", lambda depth, device, waited: asked.append(depth) or (0, ()))
    q = LaunchQueue(8, _Clock())
    for _ in range(8):
        q.launch(1, 0)
    assert asked == []
    q.synced()  # a synchronization empties the queue
    for _ in range(8):
        q.launch(1, 0)
    assert asked == []
    q.launch(1, 0)  # the ninth since the sync: the queue is full
    assert asked == [8]


def test_turns_are_taken_on_the_ranks_clock_and_reported(monkeypatch):
    from phantora_prof.runtime.device import streams

    calls = []

    def turns(depth, device, waited):
        calls.append(waited)
        return 100, (150, 120, 400)  # go at 100; the next launches' turns after that

    monkeypatch.setattr(streams, "queue_turns", turns)
    clock = _Clock()
    q = LaunchQueue(2, clock)
    q.launch(2, 0)
    assert clock.now_ns == 0 and calls == []
    q.launch(1, 0)  # asks, waits until 100
    assert clock.now_ns == 100 and calls == [0]
    q.launch(2, 0)  # two turns: 150, then 120 (already past)
    assert clock.now_ns == 150
    q.launch(1, 0)  # the turn at 400
    assert clock.now_ns == 400
    assert q.take_waited() == 50 + 250  # the turns' waits, for the coordinator's host-busy figure
    q.launch(1, 0)  # turns used up: asks again, with what was waited since (nothing: taken above)
    assert calls == [0, 0]
