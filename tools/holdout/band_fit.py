"""Fit the per-step error band's scale (cost/errorband.py STEP_BAND_SCALE) and check it (issue #14).

    python tools/holdout/band_fit.py RUN.json [RUN.json ...]

RUN.json: compare.py --json tables (session 37 on: each row holds the simulated run's per-step
window, `steady`). The scale is fitted as BAND_SCALE was in session 6: the smallest scale at which
the real step time falls inside the band for 90% of the same 22 cases (compare.py's sets
"holdout", the 16 older held-out cases, and "dev", the zoo's 6 development models); every other
set is reported as a check, never fitted on. CPU-only, instant: the bands are recomputed from
the stored windows (errorband.step_band with a trial scale), no simulation runs.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import in_step_band  # noqa: E402
from phantora_prof.cost import errorband  # noqa: E402

FIT_SETS = ("holdout", "dev")
COVERAGE = 0.9


def step_band(row: dict, scale: float) -> tuple[int, dict]:
    """(window, its band) of a row's per-step window at a trial scale (recomputed: a stored band
    has the scale of the code that ran the simulation)."""
    st = row["steady"]
    window = st["end_ns"] - st["start_ns"]
    return window, errorband.step_band(window, st["busy_ns"], st["sources"], st["host_busy_ns"], scale=scale)


def inside(row: dict, scale: float) -> bool:
    window, b = step_band(row, scale)
    return in_step_band(row["sim_ms"], row["real_ms"], b, window)


def usable(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("real_ms") and r.get("sim_ms") and r.get("steady")]


def fit(rows: list[dict]) -> float:
    """The smallest scale (0.01 steps) holding COVERAGE of the fit sets' real times."""
    fit_rows = [r for r in rows if r["set"] in FIT_SETS]
    if not fit_rows:
        raise SystemExit("no rows of the fit sets (holdout, dev) with a per-step window")
    need = COVERAGE * len(fit_rows)
    for i in range(50, 2001):
        s = i / 100
        if sum(inside(r, s) for r in fit_rows) >= need:
            return s
    raise SystemExit("no scale up to 20 holds 90% of the fit cases")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--scale", type=float, default=None, help="check this scale instead of fitting one")
    a = p.parse_args()
    rows = []
    for f in a.runs:
        rows += usable(json.loads(f.read_text()))
    scale = a.scale if a.scale is not None else fit(rows)
    print(f"scale {scale:.2f} ({'given' if a.scale is not None else 'fitted on ' + ', '.join(FIT_SETS)}); "
          f"STEP_BAND_SCALE now {errorband.STEP_BAND_SCALE}")
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["set"]].append(r)
    total = held = 0
    for name, rs in sorted(groups.items(), key=lambda kv: (kv[0] not in FIT_SETS, kv[0])):
        n_in = sum(inside(r, scale) for r in rs)
        old = sum(bool(r.get("inside_band_run")) for r in rs)
        widths = sorted(100 * step_band(r, scale)[1]["relative"] for r in rs)
        print(f"{name:10s} {'fit' if name in FIT_SETS else 'check':5s} inside {n_in:2d}/{len(rs):2d}  "
              f"(whole-run band at BAND_SCALE: {old:2d})  band median {widths[len(widths) // 2]:.1f}%")
        if name not in FIT_SETS:
            total += len(rs)
            held += n_in
    if total:
        print(f"check sets: {held}/{total} inside ({100.0 * held / total:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
