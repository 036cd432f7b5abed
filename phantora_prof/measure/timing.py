"""The one GPU timing harness: calls profiled under torch.profiler, kernels matched by position.

Used by the kernel sweep (measure_kernels.py: many cases in one profiler session) and by the
measuring worker (replay.py: one op signature, cold and warm L2). Plain torch + stdlib: it
runs on a bare GPU machine from a checkout (`python -m phantora_prof.measure.<script>`).

How a call is timed:
- L2: a call that should start with a cold L2 comes right after a write of FLUSH_BYTES
  (flush_buffer().zero_(), 256 MiB against the H200's 60 MB of L2; as triton's do_bench).
  The write sits outside the call's range, so its kernel is not counted;
- every call runs inside a `record_function` range (`profiled` records them all in one
  torch.profiler session with CPU and CUDA activities);
- `calls` gives each range the GPU activities (kernels, memcpys, memsets) whose launch (the
  CUDA runtime/driver call, joined by "correlation") lies inside it, in GPU start order;
- the calls of one case are matched by position: `typical` keeps the calls with the most
  common number of activities, `position_medians` gives each position's median duration;
  `busy_ns` is a call's GPU busy time (its activities' summed durations, not wall time).
"""
from __future__ import annotations

import bisect
import json
import os
import statistics
import tempfile
from typing import Any, Callable, NamedTuple

import torch

FLUSH_BYTES = 256 << 20
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_FLUSH: list[torch.Tensor] = []


def flush_buffer() -> torch.Tensor:
    """FLUSH_BYTES on the current CUDA device, made once; `.zero_()` it to evict L2."""
    if not _FLUSH:
        _FLUSH.append(torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda"))
    return _FLUSH[0]


def profiled(body: Callable[[], None]) -> list[dict]:
    """Run `body` under torch.profiler (CPU and CUDA activities); the trace's events."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        body()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    finally:
        os.unlink(path)
    return trace["traceEvents"] if isinstance(trace, dict) else trace


class Call(NamedTuple):
    """One annotated range: its name, CPU start and end (trace us), and the GPU activities
    launched inside it as (event, launching API name), in GPU start order."""

    name: str
    start: float
    end: float
    acts: list[tuple[dict, str]]


def ranges(events: list, keep: Callable[[str], bool]) -> list[tuple[float, float, str]]:
    """(start, end, name) of the user annotations whose name `keep` accepts, by start."""
    out = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and keep(e.get("name", "")):
            ts = float(e["ts"])
            out.append((ts, ts + float(e.get("dur", 0)), e["name"]))
    out.sort()
    return out


def calls(events: list, keep: Callable[[str], bool], unlaunched_at_own_start: bool = False) -> list[Call]:
    """Every range `keep` accepts (by start) with the GPU activities launched inside it.

    An activity whose launch is not in the trace is left out, or, with
    `unlaunched_at_own_start`, placed by its own start time (the kernel sweep's choice)."""
    spans = ranges(events, keep)
    launches: dict[Any, tuple[float, str]] = {}
    gpu = []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat in ("cuda_runtime", "cuda_driver"):
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                launches[c] = (float(e["ts"]), e.get("name", ""))
        elif cat in GPU_CATS:
            gpu.append(e)
    starts = [s[0] for s in spans]
    acts: dict[int, list[tuple[float, dict, str]]] = {}
    for e in gpu:
        c = (e.get("args") or {}).get("correlation")
        launch = launches.get(c)
        if launch is None:
            if not unlaunched_at_own_start:
                continue
            launch = (float(e["ts"]), "")
        ts, api = launch
        i = bisect.bisect_right(starts, ts) - 1
        if i < 0 or ts > spans[i][1]:
            continue
        acts.setdefault(i, []).append((float(e["ts"]), e, api))
    return [Call(name, start, end, [(e, api) for _, e, api in sorted(acts.get(i, []), key=lambda x: x[0])])
            for i, (start, end, name) in enumerate(spans)]


def typical(seqs: list[list]) -> tuple[int, list[list]]:
    """(the most common length, the sequences of that length): the calls that ran the usual
    kernels, so that positions match (a call with an extra or a missing kernel is left out)."""
    n = statistics.mode(len(s) for s in seqs)
    return n, [s for s in seqs if len(s) == n]


def position_medians(seqs: list[list[tuple[dict, str]]], n: int, scale: float = 1.0) -> list[float]:
    """Per position < n, the median duration over `seqs` (activity lists of one length), in
    trace units (us) times `scale` (1000.0: ns)."""
    return [statistics.median(float(s[pos][0].get("dur", 0)) * scale for s in seqs) for pos in range(n)]


def busy_ns(acts: list[tuple[dict, str]]) -> float:
    """GPU busy time of one call: its activities' summed durations, ns."""
    return sum(float(e.get("dur", 0)) for e, _ in acts) * 1000.0
