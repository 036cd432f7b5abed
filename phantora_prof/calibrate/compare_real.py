"""Compare real reference data (measure/capture_real.py) with phantora-prof's simulation.

Why: tests/data/real/README.md reports how far the simulator is from real GPUs; this tool
computes those numbers so they can be recomputed when the simulator changes.

    phantora-prof calibrate compare-real collectives tests/data/real/h200x2/collectives.json --cluster dgx-h200
    phantora-prof calibrate compare-real steps REAL.log SIM.log

``collectives`` holds netsim's nccl-tests sweep (the same code as ``phantora-prof collective``)
against the real table, size by size, and prints the relative busbw error. Sizes below the run of largest sizes whose real
time is at least twice the sweep's smallest real time are reported but marked launch-bound: from Python,
torch.distributed pays ~35-45 us of host launch per call on the measured machine, which the
nccl-tests-style netsim sweep (device time only) does not include. The second error column
compares the real time with max(netsim time, the host's launch cost), the launch cost being the
median real time of the sizes up to 2 MiB (LAUNCH_FLOOR_MAX_BYTES): that is what a loop of calls
measures when the device finishes before the next call is launched. ``--band-json`` writes, per
op, the largest |error| over the bandwidth-bound sizes (the measured error band that
tests/test_real_h200x2.py holds netsim to).

``steps`` reads the ``rank 0 step N ... time_ms T`` lines of two runs and prints the median of
steps 4..7 (after warm-up and after the profiled window, whose trace export inflates step 3).
"""
from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

# capture_real.py's names -> nccl-tests names netsim.nccl_tests understands
OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
       "alltoall": "alltoall", "sendrecv": "sendrecv"}
# The host's launch cost per call (Python + torch.distributed + NCCL enqueue): the median real
# time of the sizes up to this, which every model of the device finishes in < 25 us.
LAUNCH_FLOOR_MAX_BYTES = 2 << 20
# Real samples that contradict their neighbours (a 32 MiB all_to_all slower per byte than 8 MiB and
# 128 MiB): kept in the tables, left out of checks. tests/data/real/README.md says why.
OUTLIERS = {("alltoall", 32 << 20)}


def launch_floor(rows: list[dict]) -> float:
    """Median real time of the launch-bound sizes (<= LAUNCH_FLOOR_MAX_BYTES): the host's cost per call."""
    return statistics.median(r["time_us"] for r in rows if r["size"] <= LAUNCH_FLOOR_MAX_BYTES)


def compare_collectives(real: dict, cluster: str) -> dict[str, list[dict]]:
    """Per op, rows of real vs simulated time/busbw for each size of the real sweep."""
    from netsim.nccl_tests import run_sweep

    n = int(real["nranks"])
    out: dict[str, list[dict]] = {}
    for op, rows in real["ops"].items():
        if not rows:
            continue
        floor = min(r["time_us"] for r in rows)
        # bandwidth-bound: the run of largest sizes whose real time is >= 2x the launch floor
        # (a contiguous suffix, so a lone launch-jitter spike at a small size is not counted)
        first_bw = len(rows)
        while first_bw > 0 and rows[first_bw - 1]["time_us"] >= 2.0 * floor:
            first_bw -= 1
        sizes = [r["size"] for r in rows]
        sim = {s.size: s for s in run_sweep(OPS[op], 1, n, cluster, min(sizes), max(sizes), 4.0, "float32")}
        host = launch_floor(rows)
        cmp = []
        for i, r in enumerate(rows):
            s = sim.get(r["size"])
            if s is None:
                continue
            # what the real loop measures: the device time, or the host's launch cost when that is
            # longer (the GPU then waits for each call)
            total = max(s.time_us, host)
            cmp.append({"size": r["size"], "real_us": r["time_us"], "sim_us": s.time_us,
                        "real_busbw": r["busbw"], "sim_busbw": s.busbw,
                        "err": (s.busbw - r["busbw"]) / r["busbw"] if r["busbw"] > 0 else math.nan,
                        # busbw error with the launch cost: real time / simulated time - 1
                        "sim_launch_us": total, "err_launch": r["time_us"] / total - 1,
                        "host_bound": host > s.time_us, "outlier": (op, r["size"]) in OUTLIERS,
                        "bandwidth_bound": i >= first_bw, "algorithm": f"{s.algorithm}/{s.protocol}"})
        out[op] = cmp
    return out


def error_band(cmp: dict[str, list[dict]]) -> dict[str, float]:
    """Largest |relative busbw error| over the bandwidth-bound sizes of each op (outliers left out)."""
    return {op: max(abs(r["err"]) for r in rows if r["bandwidth_bound"] and not r["outlier"])
            for op, rows in cmp.items() if any(r["bandwidth_bound"] and not r["outlier"] for r in rows)}


def step_times(log: Path, rank: int = 0) -> dict[int, float]:
    pat = re.compile(rf"rank {rank} step (\d+) .*?time_ms ([0-9.]+)")
    return {int(m.group(1)): float(m.group(2)) for m in pat.finditer(log.read_text())}


def collectives_report(cmp: dict[str, list[dict]]) -> str:
    """The per-op tables and the error band line, as `compare-real collectives` prints them."""
    lines = []
    for op, rows in cmp.items():
        lines.append(f"## {op}\n| size (B) | real us | sim us | real busbw | sim busbw | err | "
                     "sim incl. launch us | err incl. launch | sim algo |\n"
                     "|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in rows:
            mark = "" if r["bandwidth_bound"] else " (launch-bound)"
            mark += " (outlier)" if r["outlier"] else ""
            host = " (host)" if r["host_bound"] else ""
            lines.append(f"| {r['size']} | {r['real_us']:.1f} | {r['sim_us']:.1f} | {r['real_busbw']:.1f} | "
                         f"{r['sim_busbw']:.1f} | {100 * r['err']:+.0f}%{mark} | {r['sim_launch_us']:.1f}{host} | "
                         f"{100 * r['err_launch']:+.0f}% | {r['algorithm']} |")
        lines.append("")
    band = error_band(cmp)
    lines.append("error band (max |err|, bandwidth-bound sizes): "
                 + ", ".join(f"{k} {100 * v:.0f}%" for k, v in band.items()))
    return "\n".join(lines)


def band_json(cmp: dict[str, list[dict]], cluster: str) -> str:
    """The measured error band file (tests/data/real/h200x2/netsim_error_band.json)."""
    largest = {op: abs(rows[-1]["err"]) for op, rows in cmp.items()}
    return json.dumps({"cluster": cluster, "written_by": "phantora-prof calibrate compare-real collectives --band-json",
                       "band": error_band(cmp), "band_largest_size": largest}, indent=1) + "\n"


def steps_report(real_log: Path, sim_log: Path, first: int = 4) -> str:
    """Median step time of steps >= `first` of two runs' logs, and the error."""
    real, sim = step_times(real_log), step_times(sim_log)
    r = statistics.median(v for k, v in real.items() if k >= first)
    m = statistics.median(v for k, v in sim.items() if k >= first)
    return f"real {r:.2f} ms  sim {m:.2f} ms  err {100 * (m - r) / r:+.1f}%"
