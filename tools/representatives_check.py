"""Representative ranks against every rank live, at a chosen scale (issue #17's acceptance check).

    python tools/representatives_check.py --ranks 64 [--only ddp,fsdp,fsdp_tp,pp] [--keep DIR] [--json OUT]

For each example (examples/<name>/train.py, a small GPT so that every rank process fits in
memory), run it twice under the simulator with traces: `--live-ranks representative` and
`--live-ranks all`. Compare every live rank's step times (the script's own `time_ms` lines)
and rank 0's Kineto trace event by event (absolute `ts` stripped: the two runs' epochs
differ). Prints one line per example and exits non-zero if any differs.

Costs: the all-live run starts one process per rank (about 100-120 MiB of private memory each
for these sizes, forked from one server) and simulates each; 64 ranks take a few minutes per
example on 2 cores, 256 ranks 7-19 minutes, and then the coordinator holds every rank's
timeline for the traces (up to 24 GB for FSDP2 at 256: on a 24 GB machine add swap). Results
at 256 ranks: tools/representatives_256.json. This is a tool, not a test: the default test suite runs the same
comparison at 4-8 ranks (tests/test_representatives.py).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SMALL = ["--layers", "2", "--dim", "256", "--heads", "8", "--seq", "128", "--batch", "2", "--vocab", "1024",
         "--steps", "3"]
EXAMPLES = {
    "ddp": SMALL,
    "fsdp": SMALL,
    "fsdp_tp": SMALL + ["--tp", "8"],
    "pp": ["--layers", "8", "--dim", "256", "--heads", "8", "--seq", "128", "--batch", "8", "--vocab", "1024",
           "--steps", "3", "--microbatches", "8"],  # --dp set from the rank count: 8 stages
}
STEP = re.compile(r"^\[rank(\d+)\]: (?:rank \d+ )?step (\d+) .*?time_ms ([0-9.]+)", re.M)
TS = re.compile(r'"ts": [0-9.]+')


def _args(name: str, ranks: int) -> list[str]:
    args = list(EXAMPLES[name])
    if name == "pp":
        args += ["--dp", str(ranks // 8)]
    return args


def _run(name: str, ranks: int, mode: str, out: Path, per_node: int) -> tuple[dict, float, str]:
    nnodes, per_node = (ranks // per_node, per_node) if ranks % per_node == 0 else (1, ranks)
    cmd = [sys.executable, "-m", "phantora_prof", "--nnodes", str(nnodes), "--nproc-per-node", str(per_node),
           "--live-ranks", mode, "--format", "kineto", "--out", str(out), "--summary-json", str(out / "summary.json"),
           "python", str(REPO / "examples" / name / "train.py"), *_args(name, ranks)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=out.parent,
                       env=dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")))
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"{name} {mode}: rc {r.returncode}\n{r.stderr[-3000:]}")
    steps: dict = {}
    for rank, step, t in STEP.findall(r.stdout + r.stderr):
        steps.setdefault(int(rank), {})[int(step)] = t
    return steps, wall, r.stderr


def _events(path: Path) -> tuple[list[str], dict]:
    doc = json.load(gzip.open(path))
    return [TS.sub("", json.dumps(e, sort_keys=True)) for e in doc["traceEvents"]], doc.get("distributedInfo")


def check(name: str, ranks: int, work: Path, per_node: int = 8) -> dict:
    res: dict = {"example": name, "ranks": ranks, "args": _args(name, ranks)}
    runs = {}
    for mode in ("representative", "all"):
        out = work / f"{name}_{ranks}_{mode}"
        out.mkdir(parents=True, exist_ok=True)
        steps, wall, _ = _run(name, ranks, mode, out, per_node)
        runs[mode] = (steps, out)
        res[f"wall_s_{mode}"] = round(wall, 1)
    rep_steps, rep_out = runs["representative"]
    all_steps, all_out = runs["all"]
    worst = 0.0
    for rank, times in rep_steps.items():
        for step, t in times.items():
            want = float(all_steps[rank][step])
            worst = max(worst, abs(float(t) - want) / want if want else 0.0)
    res["live_ranks_representative"] = sorted(rep_steps)
    res["step_time_max_rel_diff"] = worst
    ev_rep, info_rep = _events(rep_out / "rank0.pt.trace.json.gz")
    ev_all, info_all = _events(all_out / "rank0.pt.trace.json.gz")
    res["rank0_events"] = [len(ev_rep), len(ev_all)]
    res["rank0_events_differing"] = sum(a != b for a, b in zip(ev_rep, ev_all)) + abs(len(ev_rep) - len(ev_all))
    res["distributed_info_equal"] = info_rep == info_all
    res["ok"] = bool(rep_steps) and worst <= 0.01 and res["rank0_events_differing"] == 0 and res["distributed_info_equal"]
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--only", default=",".join(EXAMPLES))
    p.add_argument("--keep", type=Path, help="keep the runs' traces here (default: a temporary folder)")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--per-node", type=int, default=8,
                   help="simulated GPUs per node (default 8; a CUDA build of torch simulates only as many as it sees)")
    a = p.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = a.keep or Path(tmp)
        for name in a.only.split(","):
            r = check(name, a.ranks, work, a.per_node)
            results.append(r)
            print(json.dumps(r), flush=True)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1) + "\n")
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
