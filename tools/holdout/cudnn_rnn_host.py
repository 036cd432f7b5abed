"""The host time of cuDNN RNN calls in real profiles (host_model.json "cudnn_rnn", session 49).

For every innermost `aten::_cudnn_rnn` / `aten::_cudnn_rnn_backward` (an autocast wrapper's outer
call is left out): its duration, its exclusive time (less its child ops and CUDA API calls:
cuDNN's own host work), and the kernels it launched (GPU kernels correlated with launches
inside it). Then a fit of exclusive time = base + per_kernel x kernels per direction.

    python tools/holdout/cudnn_rnn_host.py TRACE.pt.trace.json.gz ...
"""
from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import defaultdict

NAMES = ("aten::_cudnn_rnn", "aten::_cudnn_rnn_backward")


def calls(path: str) -> list[tuple[str, float, float, int]]:
    """(name, duration, exclusive, kernels) per innermost call, in microseconds."""
    doc = json.load(gzip.open(path))
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    kernel_corr = {e["args"].get("correlation") for e in ev if e.get("cat") == "kernel"}
    host = defaultdict(list)
    for e in ev:
        if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver"):
            host[e["tid"]].append(e)
    out = []
    for lst in host.values():
        lst.sort(key=lambda e: (e["ts"], -e["dur"]))
        for i, e in enumerate(lst):
            if e["name"] not in NAMES:
                continue
            end, kids, inner, j = e["ts"] + e["dur"], [], [], i + 1
            child_end = e["ts"]
            while j < len(lst) and lst[j]["ts"] < end:
                f = lst[j]
                inner.append(f)
                if f["ts"] >= child_end:
                    kids.append(f)
                    child_end = f["ts"] + f["dur"]
                j += 1
            if any(k["name"] == e["name"] for k in kids):
                continue  # the autocast wrapper around the real call
            excl = e["dur"] - sum(k["dur"] for k in kids)
            n = sum(1 for f in inner if f.get("cat") != "cpu_op" and f["args"].get("correlation") in kernel_corr)
            out.append((e["name"], e["dur"], excl, n))
    return out


def main() -> None:
    rows = defaultdict(list)
    for path in sys.argv[1:]:
        for name, dur, excl, n in calls(path):
            rows[name].append((path, dur, excl, n))
        for name in NAMES:
            mine = [r for r in rows[name] if r[0] == path]
            if mine:
                print(f"{path}: {name} calls {len(mine)}, median duration {statistics.median(r[1] for r in mine):.1f} us, "
                      f"exclusive {statistics.median(r[2] for r in mine):.1f} us, kernels {statistics.median(r[3] for r in mine):.0f}")
    for name in NAMES:
        pts = [(r[3], r[2]) for r in rows[name]]
        if len({k for k, _ in pts}) < 2:
            continue
        # least squares over the per-trace medians (one point per trace, each trace one shape)
        per = defaultdict(list)
        for r in rows[name]:
            per[r[0]].append((r[3], r[2]))
        xs = [statistics.median(k for k, _ in v) for v in per.values()]
        ys = [statistics.median(t for _, t in v) for v in per.values()]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        print(f"{name}: exclusive = {my - slope * mx:.1f} us + {slope:.2f} us per kernel (per-trace medians)")


if __name__ == "__main__":
    main()
