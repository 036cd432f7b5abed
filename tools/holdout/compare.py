"""Held-out accuracy: simulated vs real H200 step times on workloads the models were never fitted to.

    python tools/holdout/compare.py                 # simulate every case, print the table
    python tools/holdout/compare.py --only llama,cnn --gpu h200
    python tools/holdout/compare.py --real-gpu      # on a GPU machine: run the real cases and write their logs

The real logs (steady-state medians printed by loop.py / the reference workloads' common.py)
are in tools/holdout/real_h200/; they came from one H200 (torch 2.11, CUDA 13.0) with
`--real-gpu`. The gpt.py cases use ../shared/reference/workloads/gpt.py (--workloads).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REAL = HERE / "real_h200"

# name -> (script, args); scripts without a directory are in tools/holdout/, gpt.py in --workloads.
CASES: dict[str, tuple[str, list[str]]] = {
    "gpt_medium": ("gpt.py", ["--layers", "24", "--dim", "1024", "--heads", "16", "--batch", "8"]),
    "gpt_seq2k": ("gpt.py", ["--seq", "2048", "--batch", "4"]),
    "gpt_seq4k": ("gpt.py", ["--seq", "4096", "--batch", "2"]),
    "gpt_hd128": ("gpt.py", ["--dim", "1536", "--heads", "12", "--layers", "8", "--batch", "8"]),
    "gpt_tiny": ("gpt.py", ["--layers", "4", "--dim", "256", "--heads", "4", "--seq", "256", "--batch", "8"]),
    "gpt_b4": ("gpt.py", ["--batch", "4"]),
    "llama": ("llama.py", []),
    "llama_big": ("llama.py", ["--seq", "4096", "--batch", "2", "--dim", "2048", "--heads", "16", "--kv-heads", "8",
                               "--ffn", "5632", "--layers", "4"]),
    "cnn": ("cnn.py", []),
    "cnn_cl": ("cnn.py", ["--channels-last"]),
    "cnn_narrow": ("cnn.py", ["--batch", "128", "--width", "32", "--image", "128"]),
    "mlp": ("mlp.py", []),
    "mlp_tf32": ("mlp.py", ["--tf32"]),
    "mlp_small": ("mlp.py", ["--batch", "256", "--width", "1024"]),
    "vit": ("vit.py", []),
    "vit_b16": ("vit.py", ["--batch", "16"]),
}


def _script(name: str, workloads: Path) -> Path:
    return (workloads if name == "gpt.py" else HERE) / name


def _result(text: str) -> dict | None:
    for line in text.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return None


def real_median(case: str, real_dir: Path = REAL) -> float | None:
    log = real_dir / f"{case}.log"
    if not log.exists():
        return None
    res = _result(log.read_text())
    return None if res is None else res["median_steady_ms"]


def simulate(case: str, workloads: Path, gpu: str, extra: list[str]) -> tuple[float | None, str]:
    script, args = CASES[case]
    path = _script(script, workloads)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "phantora_prof", "--no-trace", "--gpu", gpu, *extra,
           "python", str(path), *args, "--steps", "6"]
    r = subprocess.run(cmd, cwd=path.parent, env=env, capture_output=True, text=True)
    res = _result(r.stdout)
    return (None if res is None else res["median_steady_ms"]), (r.stdout + r.stderr)[-2000:]


def run_real(cases: list[str], workloads: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for case in cases:
        script, args = CASES[case]
        path = _script(script, workloads)
        r = subprocess.run([sys.executable, str(path), *args, "--steps", "10"], cwd=path.parent,
                           capture_output=True, text=True)
        (out / f"{case}.log").write_text(r.stdout + r.stderr)
        print(case, "ok" if r.returncode == 0 else f"FAILED ({r.returncode})", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="", help="comma-separated case names (default: all)")
    p.add_argument("--gpu", default="h200")
    p.add_argument("--workloads", type=Path, default=REPO.parent / "shared" / "reference" / "workloads")
    p.add_argument("--real-dir", type=Path, default=REAL)
    p.add_argument("--real-gpu", action="store_true", help="run the cases on this machine's GPU into --real-dir")
    p.add_argument("--json", type=Path, help="also write the table as JSON")
    p.add_argument("extra", nargs="*", help="extra phantora-prof options, after --")
    a = p.parse_args(argv)
    cases = [c for c in a.only.split(",") if c] or list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    if a.real_gpu:
        run_real(cases, a.workloads, a.real_dir)  # needs the workloads folder for the gpt.py cases
        return 0
    rows = []
    if not (a.workloads / "gpt.py").exists():
        skipped = [c for c in cases if CASES[c][0] == "gpt.py"]
        if skipped:
            print(f"skipping {', '.join(skipped)}: no gpt.py in {a.workloads} (pass --workloads DIR, the "
                  f"reference workloads folder)", file=sys.stderr)
        cases = [c for c in cases if c not in skipped]
    print(f"{'case':12s} {'real ms':>9s} {'sim ms':>9s} {'error':>7s}")
    for case in cases:
        real = real_median(case, a.real_dir)
        sim, tail = simulate(case, a.workloads, a.gpu, a.extra)
        if sim is None:
            print(f"{case:12s} simulation failed:\n{tail}")
            rows.append({"case": case, "real_ms": real, "sim_ms": None})
            continue
        err = None if real is None else (sim - real) / real
        print(f"{case:12s} {real or float('nan'):9.2f} {sim:9.2f} {'' if err is None else f'{err:+.1%}':>7s}", flush=True)
        rows.append({"case": case, "real_ms": real, "sim_ms": round(sim, 3), "error": None if err is None else round(err, 4)})
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    errs = [abs(r["error"]) for r in rows if r.get("error") is not None]
    if errs:
        errs.sort()
        print(f"|error| median {errs[len(errs) // 2]:.1%}, max {errs[-1]:.1%} over {len(errs)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
