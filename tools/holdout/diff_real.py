"""Per-category GPU time and profiled step time, simulated against real profiles (issue #14).

For every case of compare.py that has a real torch.profiler trace (real_h200/traces/ and
real_h200/zoo/traces/, from `loop.py --profile-dir` on the H200), simulate it with the same
`--profile-dir` and hold the two profiles against each other with `phantora-prof diff`:
which side of a step-time error is the GPU's (a kernel family priced wrong) and which the
host's (a profiled step much longer than its GPU time is host-bound).

    python tools/holdout/diff_real.py [--only tv_mobilenet,hf_bert] [--json OUT] [--keep DIR]

CPU-only; about 20 s per case. The real profiled steps carry the profiler's own host overhead,
so compare GPU figures, not profiled step times, between the two sides.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from compare import CASES, HERE, REAL, REPO, _script, case_set

TRACE_DIRS = (REAL / "traces", REAL / "zoo" / "traces", REAL / "session10" / "traces", REAL / "session11" / "traces",
              REAL / "session21" / "traces", REAL / "session25" / "traces",
              REAL / "session29" / "traces", REAL / "session32" / "traces", REAL / "session33" / "traces",
              REAL / "session36" / "blind11" / "traces", REAL / "session37" / "blind12" / "traces",
              REAL / "session38" / "blind13" / "traces",
              # profiles kept out of the tracked tree (its 64 MiB device limit): this machine's copies
              *sorted((HERE / "_traces").glob("*")))
CATEGORIES = ("gemm", "attention", "elementwise", "reduction", "normalization", "optimizer", "memcpy", "memset")


@functools.cache
def _archived() -> dict[str, str]:
    """Kept profiles taken out of the tree (real_h200/archived.json): path -> the commit holding it."""
    return json.loads((REAL / "archived.json").read_text())["archived"]


def real_trace(case: str) -> Path | None:
    for d in TRACE_DIRS:
        p = d / f"{case}.pt.trace.json.gz"
        if p.exists():
            return p
    archived = _archived()
    for d in TRACE_DIRS:
        rel = str((d / f"{case}.pt.trace.json.gz").relative_to(REAL))
        if rel in archived:  # taken out of the tree (archived.json says why): say how to get it back
            print(f"{case}: its real profile is archived; restore it with "
                  f"`git checkout {archived[rel][:12]} -- tools/holdout/real_h200/{rel}`", file=sys.stderr)
    return None


def simulated_trace(case: str, workloads: Path, gpu: str, out: Path) -> Path | None:
    script, args = CASES[case]
    path = _script(script, workloads)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "phantora_prof", "--no-trace", "--gpu", gpu, "python", str(path), *args,
           "--steps", "4", "--profile-dir", str(out)]
    r = subprocess.run(cmd, cwd=path.parent, env=env, capture_output=True, text=True)
    found = sorted(out.glob("*.pt.trace.json*"))
    if r.returncode != 0 or not found:
        print(f"{case}: simulation failed\n{(r.stdout + r.stderr)[-1500:]}", file=sys.stderr)
        return None
    return found[-1]


def diff(real: Path, sim: Path) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([sys.executable, "-m", "phantora_prof", "diff", "-q", "--json", f.name, str(real), str(sim)],
                       check=True, cwd=REPO)
        return json.loads(Path(f.name).read_text())


def summarize(d: dict) -> dict:
    """(real, simulated) ms per step of the step, GPU time and each category, and kernel counts,
    from a `diff --json` document."""
    base, other = d["base"], d["other"]
    out = {k: (round(base[k], 3), round(other[k], 3)) for k in ("step_time_ms", "gpu_time_ms", "kernels")}
    for cat in CATEGORIES:
        b, o = base["categories"].get(cat, 0.0), other["categories"].get(cat, 0.0)
        if b or o:
            out[cat] = (round(b, 3), round(o, 3))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="")
    p.add_argument("--gpu", default="h200")
    p.add_argument("--workloads", type=Path, default=REPO.parent / "shared" / "reference" / "workloads")
    p.add_argument("--json", type=Path)
    p.add_argument("--keep", type=Path, help="keep each simulated trace here as CASE.pt.trace.json[.gz]")
    a = p.parse_args()
    cases = [c for c in a.only.split(",") if c] or [c for c in CASES if real_trace(c) is not None]
    rows = []
    for case in cases:
        real = real_trace(case)
        if real is None:
            print(f"{case}: no real trace", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            sim = simulated_trace(case, a.workloads, a.gpu, Path(tmp))
            if sim is None:
                continue
            doc = diff(real, sim)
            if a.keep is not None:
                a.keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(sim, a.keep / (case + ".pt.trace.json" + (".gz" if sim.name.endswith(".gz") else "")))
        rows.append({"case": case, "set": case_set(case), "diff": doc})
        print(json.dumps({"case": case, "set": case_set(case), "figures": summarize(doc)}), flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
