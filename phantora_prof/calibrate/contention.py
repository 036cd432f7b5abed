"""Measure how much NCCL kernels slow compute kernels, from real traces (engine/contention.py).

Why: on a real GPU an NCCL kernel holds SMs (one CTA per channel) from the moment its stream
reaches it, also while it waits for its peers; kernels on other streams run slower meanwhile.
This measures that per kernel category (the categories of ``phantora-prof diff``) and
checks the engine's model against the real traces.

``phantora-prof calibrate contention measure REAL_TRACE...``: in each trace (rank 0 of tests/data/real/h200x2/traces/ddp, fsdp),
kernels are grouped by kernel name and the launching op with its input shapes; a kernel fully
overlapped by an NCCL kernel (> 95% of its time) is compared with the median of the same
kernel that no NCCL kernel overlaps. Prints, per category, the time-weighted ratio, and the
coefficient k of the engine's factor 1 + k * C / num_sms for C = the NCCL CTAs of the trace.

``phantora-prof calibrate contention replay REAL_TRACE SIM_TRACE``: times the real trace's compute kernels with the simulator's
model: each kernel's duration alone comes from the simulated trace (the same op and shapes,
median over the simulated calls no NCCL kernel overlapped), stretched by the engine's model
under the *real* trace's NCCL kernels. Prints per category real, simulated, and replayed time
(ms per profiled step). Replayed vs real measures the contention model with the real overlap;
simulated vs replayed measures what the simulated run's different overlap (its NCCL kernels
wait less: its ranks are symmetric) costs.
"""
from __future__ import annotations

import collections
import gzip
import json
import statistics

from phantora_prof.cost.profiles import load_profile
from phantora_prof.engine.contention import GpuContention
from tracing.diff.categories import categorize


def _load(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _kernels(ev: list[dict]) -> list[tuple[dict, tuple, int]]:
    """(kernel event, (op name, input dims), position within the op's kernels), in time order."""
    ext_of_corr = {e["args"]["correlation"]: e["args"].get("External id") for e in ev
                   if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops: dict = {}
    for e in ev:
        if e.get("cat") == "cpu_op" and "External id" in e.get("args", {}):
            ops.setdefault(e["args"]["External id"], e)
    out, count = [], collections.Counter()
    for e in sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"]):
        ext = ext_of_corr.get(e["args"].get("correlation"))
        op = ops.get(ext)
        sig = (op["name"], json.dumps(op["args"].get("Input Dims"))) if op else ("", "")
        out.append((e, sig, count[ext]))
        count[ext] += 1
    return out


def _steps(ev: list[dict]) -> list[tuple[float, float]]:
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                  if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#"))


def _nccl(ks) -> list[tuple[float, float, int]]:
    return sorted((e["ts"], e["ts"] + e["dur"], int(e["args"].get("grid", [24])[0])) for e, _, _ in ks
                  if "nccl" in e["name"].lower())


def _overlap(e: dict, nccl) -> float:
    s, t = e["ts"], e["ts"] + e["dur"]
    return sum(max(0.0, min(t, b) - max(s, a)) for a, b, _ in nccl) / max(e["dur"], 1e-9)


def _cat(e: dict, sig: tuple) -> str:
    return categorize("kernel", e["name"], sig[0], False)


def measure(paths: list[str], num_sms: int, gpu: str = "h200") -> None:
    slowdown = load_profile(gpu).contention_slowdown  # the engine's k (the GPU profile's)
    agg = collections.defaultdict(lambda: [0.0, 0.0, 0])
    ctas = set()
    for p in paths:
        ks = _kernels(_load(p))
        nccl = _nccl(ks)
        ctas |= {c for _, _, c in nccl}
        groups = collections.defaultdict(list)
        for e, sig, pos in ks:
            if "nccl" not in e["name"].lower():
                groups[(e["name"], sig, pos)].append((e, _overlap(e, nccl)))
        for (name, sig, _), lst in groups.items():
            alone = [e["dur"] for e, f in lst if f < 0.01]
            if not alone:
                continue
            m = statistics.median(alone)
            for e, f in lst:
                if f > 0.95:
                    a = agg[_cat(e, sig)]
                    a[0] += e["dur"]
                    a[1] += m
                    a[2] += 1
    c = max(ctas) if ctas else 24
    print(f"NCCL CTAs per kernel: {sorted(ctas)}; SMs {num_sms}")
    print("| category | kernels | time overlapped / alone | k (factor = 1 + k C / SMs) | engine k |\n|---|---:|---:|---:|---:|")
    for cat, (act, alone, n) in sorted(agg.items()):
        r = act / alone
        print(f"| {cat} | {n} | {r:.3f} | {(r - 1) / (c / num_sms):.2f} | {slowdown.get(cat, 0.0):.2f} |")


def replay(real_path: str, sim_path: str, num_sms: int, gpu: str = "h200") -> None:
    real_ev, sim_ev = _load(real_path), _load(sim_path)
    rk, sk = _kernels(real_ev), _kernels(sim_ev)

    def alone_times(ks):
        nccl = _nccl(ks)
        out = collections.defaultdict(list)
        for e, sig, pos in ks:
            if "nccl" not in e["name"].lower() and _overlap(e, nccl) < 0.01:
                out[(sig, pos)].append(e["dur"])
        return {k: statistics.median(v) for k, v in out.items()}

    sim_alone, real_alone = alone_times(sk), alone_times(rk)
    prof = load_profile(gpu)
    model = GpuContention(num_sms, prof.contention_slowdown, prof.nccl_ctas, prof.nccl_p2p_ctas)
    for a, b, c in _nccl(rk):
        model.add_nccl(0, int(a * 1000), int(b * 1000), c)
    steps_r, steps_s = _steps(real_ev), _steps(sim_ev)
    n_steps = max(1, len(steps_r))

    def inside(e, steps):
        return not steps or any(a <= e["ts"] < b for a, b in steps)

    def stretched(cat, e, w):
        start = int(e["ts"] * 1000)
        return (model.finish(0, cat, start, int(w * 1000)) - start) / 1000

    # real, simulated, replayed (simulated alone-time, real overlap), model (real alone-time, real overlap)
    tot = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
    no_twin = no_alone = 0.0
    for e, sig, pos in rk:
        if "nccl" in e["name"].lower() or not inside(e, steps_r):
            continue
        cat = _cat(e, sig)
        t = tot[cat]
        t[0] += e["dur"]
        ra = real_alone.get((sig, pos))
        if ra is None:
            no_alone += e["dur"]
            ra = e["dur"]  # never ran alone: its real time is all we have
        w = sim_alone.get((sig, pos))
        if w is None:
            no_twin += e["dur"]
            w = ra
        t[2] += stretched(cat, e, w)
        t[3] += stretched(cat, e, ra)
    for e, sig, _ in sk:
        if "nccl" not in e["name"].lower() and inside(e, steps_s):
            tot[_cat(e, sig)][1] += e["dur"] / max(1, len(steps_s)) * n_steps
    print(f"ms per step over {n_steps} profiled steps. Real kernels with no simulated twin (same op, shapes and "
          f"position; replayed from their real alone-time): {no_twin / 1000 / n_steps:.2f} ms/step; never alone "
          f"in the real trace (kept at their real time): {no_alone / 1000 / n_steps:.2f} ms/step")
    print("| category | real | simulated | err | replayed: sim. alone-times, real NCCL overlap | err | "
          "model only: real alone-times, real overlap | err |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for cat, (r, s, rp, mo, _) in sorted(tot.items(), key=lambda kv: -kv[1][0]):
        print(f"| {cat} | {r / 1000 / n_steps:.2f} | {s / 1000 / n_steps:.2f} | {100 * (s / r - 1):+.0f}% | "
              f"{rp / 1000 / n_steps:.2f} | {100 * (rp / r - 1):+.0f}% | {mo / 1000 / n_steps:.2f} | "
              f"{100 * (mo / r - 1):+.0f}% |")
