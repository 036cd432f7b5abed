"""The kernel-time model against every real eager profile in the repository, each op priced
alone from its shapes (`phantora-prof calibrate cost-report`), each profile on the GPU it ran on.

    python tools/holdout/cost_report_all.py [--json OUT]

Prints one line per profile (total GPU time per step, measured against the model, and each op
class's error) and the summary README's "Kernel time per op" paragraph quotes: how many totals
are within 5%, the mean and median error, and the mean |error| per class. (Before session 51
the report priced every profile on the H200, whatever its GPU: 11 of the 47 single-GPU profiles
ran on H100 leases; that tree, 0395c26, gave 35 of 53 within 5%, mean |error| 4.7%.)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from phantora_prof.calibrate import cost_report as C  # noqa: E402
from phantora_prof.calibrate.split_k_observed import trace_gpu  # noqa: E402

# the 2-GPU examples' ranks (tests/data/real/h200x2); pp's rank 1 holds the other half of the model
MULTI_GPU = sorted((REPO / "tests" / "data" / "real" / "h200x2" / "traces").glob("*.pt.trace.json.gz"))


def single_gpu_profiles() -> list[Path]:
    """Every real single-GPU eager profile kept under tools/holdout/real_h200 (compiled runs'
    profiles, whose Triton kernels the eager report does not price, are not kept there)."""
    return sorted(set((HERE / "real_h200").glob("*/traces/*.pt.trace.json.gz"))
                  | set((HERE / "real_h200").glob("*/*/traces/*.pt.trace.json.gz")))


def profiles() -> list[Path]:
    """The single-GPU profiles, then the 2-GPU ranks."""
    return single_gpu_profiles() + MULTI_GPU


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the per-profile figures here")
    a = ap.parse_args()
    rows = []
    for path in profiles():
        gpu = trace_gpu(path)
        try:
            per = C.calibrate(str(path))
        except Exception as exc:  # noqa: BLE001 - a profile the report cannot read is listed, not fatal
            print(f"{path.relative_to(REPO)}: {exc}")
            continue
        classes = {c: (m, t) for c, (m, _r, t) in per.items() if c not in (C.UNPRICED, C.NO_GPU_WORK)}
        meas = sum(m for m, _ in classes.values())
        model = sum(t for _, t in classes.values())
        rows.append({"profile": str(path.relative_to(REPO)), "gpu": gpu, "measured_us": round(meas, 1),
                     "model_us": round(model, 1), "error": (model - meas) / meas if meas else 0.0,
                     "classes": {c: (m, t) for c, (m, t) in classes.items()}})
        cls = "  ".join(f"{c} {(t - m) / m * 100:+.0f}%" for c, (m, t) in classes.items() if m > 0.02 * meas)
        print(f"{path.name[:-len('.pt.trace.json.gz')]:<22} {gpu:<5} {meas:>10.1f} {model:>10.1f} "
              f"{rows[-1]['error'] * 100:+6.1f}%  {cls}")
    errs = [r["error"] for r in rows]
    print(f"\n{len(rows)} profiles: total within 5% for {sum(abs(e) <= 0.05 for e in errs)}, "
          f"mean |error| {statistics.mean(abs(e) for e in errs) * 100:.1f}%, median {statistics.median(errs) * 100:+.1f}%")
    by_class: dict[str, list[float]] = {}
    for r in rows:
        for c, (m, t) in r["classes"].items():
            if m > 0.02 * r["measured_us"]:  # classes that are at least 2% of the profile's GPU time
                by_class.setdefault(c, []).append(abs(t - m) / m)
    print("per class, mean |error| (classes over 2% of a profile's time): " + ", ".join(
        f"{c} {statistics.mean(v) * 100:.1f}% ({sum(x <= 0.10 for x in v)}/{len(v)} within 10%)"
        for c, v in sorted(by_class.items())))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
