"""A cProfile statistics file as JSON rows, per step (issue #15).

`phases.py --cprofile FILE` profiles the main thread of a real run from the fourth optimizer
step on; this turns the statistics into one row per function or builtin (file, line, name,
calls, own time and cumulative time per step) so that a run on the GPU machine can bring them
back as text and the host model's per-op and per-function charges can be held against them.

    python tools/holdout/cprofile_table.py STATS --steps N [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import pstats
import sys


def rows(stats_path: str, steps: int) -> list[dict]:
    st = pstats.Stats(stats_path)
    out = []
    for (file, line, name), (cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        out.append({"file": file, "line": line, "name": name, "calls": nc / steps,
                    "tottime_us": tt * 1e6 / steps, "cumtime_us": ct * 1e6 / steps})
    out.sort(key=lambda r: -r["tottime_us"])
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stats")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps the profile covers")
    p.add_argument("--out")
    a = p.parse_args()
    r = rows(a.stats, a.steps)
    text = json.dumps(r, indent=0)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
