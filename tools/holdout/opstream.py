"""Op stream of a simulated trace against a real one: aten ops and kernels per profiled step.

    python tools/holdout/opstream.py REAL.pt.trace.json.gz SIM.pt.trace.json.gz [--top 40]

Counts, per ProfilerStep, every `cpu_op` by name and every GPU activity (kernel, memcpy,
memset) by name, and prints the totals and the names whose counts differ most. This is the
check issue #14 asks for ("op names and counts per step equal the real trace's"), and the
first thing to read when a held-out model's time is off: a different op stream means a
different program, whatever the kernel-time models say.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys
from pathlib import Path

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# --outside-attention: the ops of scaled-dot-product attention (forward subtrees of these, and
# the backward nodes their forward ops created), where SDPA's backend choice decides the ops
ATTENTION = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
             "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_efficient_attention",
             "aten::_scaled_dot_product_attention_math")


def load(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _short(name: str) -> str:
    """Kernel names without template arguments beyond the first level (they differ by build)."""
    name = re.sub(r"\(.*$", "", name)
    return name[:90]


def attention_ops(events: list[dict]) -> set[int]:
    """Indices (in `events`) of the cpu_ops of attention: the subtrees of ATTENTION ops, and the
    autograd::engine::evaluate_function subtrees of the nodes created inside them."""
    ops = [(i, e) for i, e in enumerate(events) if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    threads: dict = collections.defaultdict(list)
    for i, e in ops:
        ts = round(e["ts"] * 1000)
        threads[(e.get("pid"), e.get("tid"))].append((ts, ts + round(e.get("dur", 0) * 1000), i, e))
    out: set[int] = set()
    seqs: set = set()
    roots: list = []  # (thread, start, end) of excluded subtrees: forward first, then backward
    for key, items in threads.items():
        items.sort(key=lambda x: (x[0], -x[1]))
        for ts, end, i, e in items:
            if e["name"] in ATTENTION:
                roots.append((key, ts, end))
    for key, items in threads.items():
        for ts, end, i, e in items:
            if any(k == key and a <= ts and end <= b for k, a, b in roots):
                out.add(i)
                seq = e.get("args", {}).get("Sequence number")
                if seq is not None:
                    seqs.add(seq)
    for key, items in threads.items():
        for ts, end, i, e in items:
            if e["name"].startswith("autograd::engine::evaluate_function") \
                    and e.get("args", {}).get("Sequence number") in seqs:
                for ts2, end2, j, _ in items:
                    if ts <= ts2 and end2 <= end:
                        out.add(j)
    return out


def per_step(events: list[dict], exclude: set[int] | None = None) -> dict:
    steps = sorted((e for e in events if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X"
                    and e.get("cat") in ("user_annotation", "cpu_op", "python_function")), key=lambda e: e["ts"])
    if not steps:
        raise SystemExit("no ProfilerStep# ranges in the trace")
    # GPU activities belong to the step of their launch (correlation -> runtime event time)
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    ops = collections.Counter()
    gpu = collections.Counter()
    gpu_time = collections.Counter()

    def step_of(ts: float) -> int | None:
        for i, s in enumerate(steps):
            if s["ts"] <= ts <= s["ts"] + s["dur"]:
                return i
        return None

    for idx, e in enumerate(events):
        cat = e.get("cat")
        if cat == "cpu_op" and step_of(e["ts"]) is not None and not (exclude and idx in exclude):
            ops[e["name"]] += 1
        elif cat in GPU_CATS:
            ts = launch_ts.get(e.get("args", {}).get("correlation"))
            if ts is not None and step_of(ts) is not None:
                gpu[_short(e["name"])] += 1
                gpu_time[_short(e["name"])] += e.get("dur", 0)
    n = len(steps)
    return {"steps": n, "ops": {k: v / n for k, v in ops.items()}, "gpu": {k: v / n for k, v in gpu.items()},
            "gpu_us": {k: v / n for k, v in gpu_time.items()}}


def compare(real: dict, sim: dict, top: int = 40) -> dict:
    def totals(d):
        return sum(d.values())

    out = {"real_ops": totals(real["ops"]), "sim_ops": totals(sim["ops"]), "real_kernels": totals(real["gpu"]),
           "sim_kernels": totals(sim["gpu"]), "real_gpu_ms": totals(real["gpu_us"]) / 1e3,
           "sim_gpu_ms": totals(sim["gpu_us"]) / 1e3}
    for kind in ("ops", "gpu"):
        names = set(real[kind]) | set(sim[kind])
        diffs = sorted(((sim[kind].get(n, 0) - real[kind].get(n, 0), n) for n in names), key=lambda x: -abs(x[0]))
        out[f"{kind}_diff"] = [(n, real[kind].get(n, 0), sim[kind].get(n, 0)) for d, n in diffs[:top] if d]
    names = set(real["gpu_us"]) | set(sim["gpu_us"])
    diffs = sorted(((sim["gpu_us"].get(n, 0) - real["gpu_us"].get(n, 0), n) for n in names), key=lambda x: -abs(x[0]))
    out["gpu_time_diff_us"] = [(n, round(real["gpu_us"].get(n, 0), 1), round(sim["gpu_us"].get(n, 0), 1))
                               for d, n in diffs[:top]]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("real", type=Path)
    p.add_argument("sim", type=Path)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--json", action="store_true")
    p.add_argument("--outside-attention", action="store_true",
                   help="leave out the cpu_ops of scaled-dot-product attention (forward subtrees of the SDPA ops "
                        "and the backward nodes they created): where the SDPA backends differ")
    a = p.parse_args(argv)
    real, sim = load(a.real), load(a.sim)
    if a.outside_attention:
        res = compare(per_step(real, attention_ops(real)), per_step(sim, attention_ops(sim)), a.top)
    else:
        res = compare(per_step(real), per_step(sim), a.top)
    if a.json:
        json.dump(res, sys.stdout, indent=1)
        return 0
    print(f"per step        real      sim")
    print(f"cpu ops     {res['real_ops']:8.1f} {res['sim_ops']:8.1f}  ({res['sim_ops'] / res['real_ops'] - 1:+.1%})")
    print(f"GPU acts    {res['real_kernels']:8.1f} {res['sim_kernels']:8.1f}  "
          f"({res['sim_kernels'] / res['real_kernels'] - 1:+.1%})")
    print(f"GPU ms      {res['real_gpu_ms']:8.2f} {res['sim_gpu_ms']:8.2f}  ({res['sim_gpu_ms'] / res['real_gpu_ms'] - 1:+.1%})")
    for title, key in (("ops whose count differs (name, real, sim)", "ops_diff"),
                       ("GPU activities whose count differs", "gpu_diff"),
                       ("GPU time per activity name, us (real, sim)", "gpu_time_diff_us")):
        print(f"\n{title}:")
        for n, r, s in res[key]:
            print(f"  {r:8.1f} {s:8.1f}  {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
