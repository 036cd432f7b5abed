"""The GPU timing harness (phantora_prof/measure/timing.py) on synthetic profiler traces.

Both users of the harness are checked through it: the kernel sweep's `run_chunk`
(measure_kernels.py: cases of several calls each, one L2 flush before every call) and the
measuring worker's replay (replay.py: cold and warm calls, the geometric mean of their
medians). Real traces come from a GPU; these say, on a CPU, which activity belongs to which
call and what is kept of it. (Checked on an H200 when the harness was factored out: the old and
the new code gave identical records on the same profiled events.)
"""
from __future__ import annotations

import math

from phantora_prof.measure import measure_kernels, replay, timing


class Trace:
    """A chrome trace in the making: ranges, launches and the GPU activities they start."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = 0

    def range(self, name: str, ts: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur})

    def launch(self, ts: float, name: str, gpu_ts: float, dur: float, api: str = "cudaLaunchKernel",
               cat: str = "kernel", launched: bool = True, grid=(4, 1, 1)) -> None:
        self.corr += 1
        if launched:
            self.events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "ts": ts, "dur": 0.5,
                                "args": {"correlation": self.corr}})
        self.events.append({"ph": "X", "cat": cat, "name": name, "ts": gpu_ts, "dur": dur,
                            "args": {"correlation": self.corr, "grid": list(grid), "block": [128, 1, 1]}})


def test_calls_take_what_was_launched_inside_them():
    t = Trace()
    t.range("rep", 10, 5)
    t.launch(9, "flush", 50, 40)  # launched before the range: the L2 flush, not the call's
    t.launch(11, "b", 95, 2)  # the GPU runs it late (queued): its launch decides
    t.launch(12, "a", 90, 3)
    t.launch(0, "orphan", 12, 1, launched=False)  # its launch is not in the trace
    t.range("rep", 20, 5)
    (c1, c2) = timing.calls(t.events, lambda n: n == "rep")
    assert [e["name"] for e, _ in c1.acts] == ["a", "b"]  # in GPU order
    assert [api for _, api in c1.acts] == ["cudaLaunchKernel"] * 2
    assert c2.acts == [] and (c1.start, c1.end, c1.name) == (10, 15, "rep")
    (c1, _) = timing.calls(t.events, lambda n: n == "rep", unlaunched_at_own_start=True)
    assert [e["name"] for e, _ in c1.acts] == ["orphan", "a", "b"]
    assert timing.busy_ns(c1.acts) == 6000.0


def test_typical_calls_and_their_medians():
    def acts(*durs):
        return [({"dur": d}, "") for d in durs]

    seqs = [acts(1.0, 10.0), acts(2.0, 30.0), acts(9.0), acts(3.0, 20.0)]
    n, same = timing.typical(seqs)
    assert n == 2 and len(same) == 3  # the one-kernel call is left out
    assert timing.position_medians(same, n) == [2.0, 20.0]
    assert timing.position_medians(same, n, scale=1000.0) == [2000.0, 20000.0]


def _sweep_trace(durations: dict[int, list[list[float]]]) -> list[dict]:
    """case index -> per call, its kernels' durations (us); a flush before every call."""
    t = Trace()
    ts = 100.0
    for i, calls in durations.items():
        start = ts
        for durs in calls:
            t.launch(ts + 0.1, "flush", ts + 1, 30.0)
            ts += 2
            for j, d in enumerate(durs):
                t.launch(ts + 0.2 + 0.1 * j, f"k{j}", ts + 5 + j, d, grid=(i + 1, 1, 1))
            t.range("rep", ts, 3)
            ts += 4
        t.range(f"case:{i}", start - 0.01, ts - start + 0.02)
        ts += 100
    return t.events


def test_sweep_records(monkeypatch):
    cases = [("mem", "add", {"n": 1}, 7.0), ("mem", "mul", {"n": 2})]
    events = _sweep_trace({0: [[1.0, 4.0], [3.0, 2.0], [2.0, 3.0], [5.0]], 1: [[6.0], [8.0], [7.0]]})
    monkeypatch.setattr(timing, "profiled", lambda body: events)
    monkeypatch.setattr(measure_kernels, "setup", lambda case: ((lambda: None), 64))
    monkeypatch.setattr(measure_kernels, "COLD", False)
    monkeypatch.setattr(measure_kernels.torch.cuda, "synchronize", lambda *a: None)
    names, out = measure_kernels.Interner(), []
    measure_kernels.run_chunk(cases, 4, names, out)
    assert names.values == ["k0", "k1"]
    a, b = out
    # the 1-kernel call is not matched by position, but counts in the total busy time
    assert a["k"] == [[0, 2000, [1, 1, 1], [128, 1, 1]], [1, 3000, [1, 1, 1], [128, 1, 1]]]
    assert a["t"] == 5000 and a["n"] == 4 and a["flops"] == 7.0 and a["bytes"] == 64
    assert b["k"] == [[0, 7000, [2, 1, 1], [128, 1, 1]]] and b["t"] == 7000 and "flops" not in b


def test_replay_takes_the_geometric_mean_of_cold_and_warm():
    t = Trace()
    ts = 0.0
    for rep, (cold, warm) in enumerate([(4.0, 1.0), (9.0, 2.0), (16.0, 3.0)]):
        for name, d in (("cold", cold), ("warm", warm)):
            t.launch(ts + 0.1, "gemm", ts + 10, d, api="cuLaunchKernelEx")
            t.launch(ts + 0.2, "memset", ts + 20, 1.0, api="cudaMemsetAsync", cat="gpu_memset")
            t.range(name, ts, 1)
            ts += 2
    res = replay._kernels_from_trace({"traceEvents": t.events}, 3)
    (k, m) = res["kernels"]
    assert k[:3] == ["kernel", "gemm", round(math.sqrt(9.0 * 2.0) * 1000)] and k[-1] == "cuLaunchKernelEx"
    assert m[0] == "memset" and m[2] == 1000 and m[-1] == "cudaMemsetAsync"
    assert res["reps"] == 3
    assert replay._kernels_from_trace({"traceEvents": []}, 3) == {"kernels": [], "reps": 0}

