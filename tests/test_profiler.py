"""The user's own torch.profiler produces the simulated profile (windows, annotations, tables)."""
from __future__ import annotations

import re
import sys

from conftest import SCRIPTS, reference_trace
from tracing.kineto import load_trace
from tracing.validate import validate_trace

PY = sys.executable


def _annotations(doc: dict, cat: str = "user_annotation") -> list[str]:
    return [e["name"] for e in doc["traceEvents"] if e.get("cat") == cat]


def test_schedule_windows_record_functions_and_table(cli):
    r = cli("--no-trace", PY, str(SCRIPTS / "profiled.py"), "prof")
    assert r.returncode == 0, r.stderr[-3000:]
    out_dir = cli.cwd / "prof"
    windows = sorted(out_dir.glob("worker0.*.pt.trace.json"))
    assert len(windows) == 2  # schedule(wait=1, warmup=1, active=2, repeat=2)
    reference = load_trace(reference_trace("gpt_small"))
    steps_seen = []
    for path in windows:
        doc = load_trace(path)
        assert validate_trace(doc, reference) == []
        names = _annotations(doc)
        steps = sorted(n for n in names if n.startswith("ProfilerStep#"))
        steps_seen.append(steps)
        # nested record_function ranges, the decorator form, and torch's optimizer ranges
        for expected in ("forward", "inner", "decorated_loss", "backward", "Optimizer.step#AdamW.step"):
            assert names.count(expected) == 2, (expected, names)
        gpu = _annotations(doc, "gpu_user_annotation")
        assert "ProfilerStep#" + steps[0][len("ProfilerStep#"):] in gpu
        spans = {e["name"]: e for e in doc["traceEvents"] if e.get("cat") == "user_annotation"}
        inner, outer = spans["inner"], spans["forward"]
        assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
        assert doc["record_shapes"] == 1
    assert steps_seen == [["ProfilerStep#2", "ProfilerStep#3"], ["ProfilerStep#6", "ProfilerStep#7"]]
    # key_averages().table() prints simulated CPU and CUDA times
    assert "Self CUDA time total" in r.stdout
    cuda_total = re.search(r"Self CUDA time total: ([0-9.]+)(us|ms)", r.stdout)
    assert cuda_total and float(cuda_total.group(1)) > 0
    assert re.search(r"ProfilerStep#6\s", r.stdout)
    # the context-manager form without a schedule, exported by hand
    plain = load_trace(out_dir / "plain.json")
    assert validate_trace(plain, reference) == []
    assert "ProfilerStep#0" not in _annotations(plain)
    assert any(e.get("cat") == "kernel" for e in plain["traceEvents"])


def test_reference_gpt_with_profile_dir_covers_three_active_steps(cli):
    workloads = reference_trace("gpt_small").parent.parent.parent / "workloads"
    r = cli("--no-trace", PY, str(workloads / "gpt.py"), "--layers", "2", "--steps", "7", "--profile-dir", "pd")
    assert r.returncode == 0, r.stderr[-3000:]
    files = list((cli.cwd / "pd").glob("*.pt.trace.json"))
    assert len(files) == 1
    doc = load_trace(files[0])
    assert validate_trace(doc, load_trace(reference_trace("gpt_small"))) == []
    steps = sorted(n for n in _annotations(doc) if n.startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]  # as in the reference trace
    assert sorted(n for n in _annotations(doc, "gpu_user_annotation") if n.startswith("ProfilerStep")) == steps


def test_profile_memory_window_has_memory_events(cli):
    """The reference memory probe (profile_memory=True, one active step) under simulation."""
    workloads = reference_trace("gpt_small_memory").parent.parent.parent / "workloads"
    r = cli("--no-trace", PY, str(workloads / "memory_probe.py"), "mt")
    assert r.returncode == 0, r.stderr[-3000:]
    files = list((cli.cwd / "mt").glob("*.pt.trace.json"))
    assert len(files) == 1
    doc = load_trace(files[0])
    real = load_trace(reference_trace("gpt_small_memory"))
    assert validate_trace(doc, real) == []
    assert doc["profile_memory"] == 1
    mem = [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]
    real_mem = [e for e in real["traceEvents"] if e.get("name") == "[memory]"]
    assert set(mem[0]["args"]) == set(real_mem[0]["args"])
    assert mem[0]["cat"] == "cpu_instant_event" and mem[0]["ph"] == "i"
    # the same allocations and frees as the real active step (the allocator model is within
    # 0.005% of the real peak here: 8,706,438,656 vs 8,706,176,512 bytes)
    assert abs(len(mem) - len(real_mem)) <= 0.02 * len(real_mem)
    peak = max(e["args"]["Total Allocated"] for e in mem)
    real_peak = max(e["args"]["Total Allocated"] for e in real_mem)
    assert abs(peak - real_peak) <= 0.001 * real_peak


def test_a_window_ending_inside_open_ranges_records_them(cli):
    """Kineto keeps a range still open when a profiling cycle stops (the real 2 x H200 profiles
    of tests/data/real/h200x2, stepped from an optimizer post-hook, hold the last
    `Optimizer.step#AdamW.step`); the simulated window records it ending at the window's end, once."""
    r = cli("--no-trace", PY, str(SCRIPTS / "profiler_open_range.py"), "trace.json")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = load_trace(cli.cwd / "trace.json")
    names = _annotations(doc)
    assert names.count("Optimizer.step#AdamW.step") == 2, names
    assert names.count("train_step") == 2, names
    ends = [e["ts"] + e["dur"] for e in doc["traceEvents"] if e.get("cat") in ("user_annotation", "cpu_op")]
    last_step = max((e for e in doc["traceEvents"] if e.get("name") == "Optimizer.step#AdamW.step"
                     and e.get("cat") == "user_annotation"), key=lambda e: e["ts"])
    assert last_step["ts"] + last_step["dur"] >= max(ends) - 0.01  # ends with the window
