"""Cost per Python instruction, per file, in context, from sampled real runs (issue #15).

    python tools/holdout/python_rates.py DIR/plain=8.36 DIR/tp=38.1 DIR/loader=5.12 ... [--weights OUT]

For each workload DIR/NAME=MS, DIR holds `cnt_NAME_12.json` and `cnt_NAME_24.json` (count_python.py's
per-code-object counts of the same run with 12 and 24 steps, or batches: their difference is 12
steps' Python) and `spyn_NAME.txt[.gz]` (py-spy's raw output with native frames over many steps);
MS is the workload's unperturbed time per step. Each sample is put on the innermost Python frame
of its stack and called "op" when a native frame under that Python frame is an aten op's (the
dispatcher, a kernel, the autograd engine, a tensor method's binding), "py" otherwise (the
interpreter, and C functions that run no op: isinstance, dict lookups, an autograd Function's
C++ node creation, ...). A file's cost per instruction is its share of "py" samples times the step
time, over its instructions per step: what the simulator charges per counted instruction
(runtime/host/pyhost.py), since it charges ops separately. py-spy's native sampling stops the
process per sample; the shares are of the program's own time, the step time is measured
without it.

Prints per workload and per file ns per instruction on its host. Several DIRs (hosts) are pooled,
each in units of its own base (--base: a user's dataset loop). --weights writes the per-file and
per-package weights of phantora_prof/cost/data/host_model.json's python_files; --json the pooled
numbers.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
from pathlib import Path

PY_FRAME = re.compile(r"^(.*) \((.+\.py|<[^>]+>):(\d+)\)$")
# native frames of aten ops and what the simulator prices as ops (cost/host_costs.json,
# autograd_engine, subclass_dispatch): below a Python frame they make the sample an op's
OP_MARKS = ("at::_ops::", "c10::Dispatcher", "at::native", "c10::impl::", "VariableType", "torch::autograd::Engine",
            "at::(anonymous", "at::cpu", "at::detail", "libgomp", "mkl", "dnnl", "THPVariable_", "torch::autograd::THPVariable",
            "TensorBase", "at::Tensor", "c10d::", "gloo", "cuda", "libcudart", "libcuda")


def classify(stack: str) -> tuple[str | None, str]:
    """(file of the innermost Python frame, "py" or "op") of one sampled stack."""
    frames = stack.split(";")
    last = None
    for i, fr in enumerate(frames):
        if PY_FRAME.match(fr):
            last = i
    if last is None:
        return None, "op"
    file = PY_FRAME.match(frames[last]).group(2)
    tail = frames[last + 1:]
    return file, ("op" if any(m in t for m in OP_MARKS for t in tail) else "py")


def file_key(path: str) -> str:
    """A file's name as the rates table keys it: below its site-packages; other files (the
    program's, the standard library's) as given, marked "<user>:"."""
    return path.split("-packages/", 1)[1].split("-packages/")[-1] if "-packages/" in path else "<user>:" + path


def counts_per_step(d: Path, name: str, steps: int = 12) -> dict[str, float]:
    out: collections.Counter = collections.Counter()
    for n, sign in ((24, 1), (12, -1)):
        for f, _line, _q, _calls, instr in json.loads((d / f"cnt_{name}_{n}.json").read_text()):
            out[file_key(f)] += sign * instr
    return {k: v / steps for k, v in out.items() if v > 0}


def samples(d: Path, name: str) -> tuple[collections.Counter, collections.Counter, int]:
    p = d / f"spyn_{name}.txt"
    text = gzip.open(p.with_suffix(".txt.gz"), "rt").read() if not p.exists() else p.read_text()
    py: collections.Counter = collections.Counter()
    op: collections.Counter = collections.Counter()
    for line in text.splitlines():
        if not line.strip():
            continue
        stack, n = line.rsplit(" ", 1)
        f, kind = classify(stack)
        (py if kind == "py" else op)[f or "<native>"] += int(n)
    return py, op, sum(py.values()) + sum(op.values())


def match(spy_file: str, instr: dict[str, float]) -> str | None:
    """The counted file a py-spy file name stands for (py-spy shortens paths under sys.path)."""
    key = spy_file.split("-packages/")[-1]
    if key in instr:
        return key
    cands = [k for k in instr if k.endswith("/" + key) or k == key or k == "<user>:" + key]
    return max(cands, key=lambda k: instr[k]) if cands else None


def workload(d: Path, name: str, step_ms: float) -> dict[str, dict[str, float]]:
    """Per file: instructions per step, py ms per step, py samples."""
    instr = counts_per_step(d, name)
    py, _op, total = samples(d, name)
    rows: dict[str, dict[str, float]] = {k: {"instr": v, "ms": 0.0, "samples": 0} for k, v in instr.items()}
    for f, n in py.items():
        k = match(f, instr)
        if k is None:
            continue
        rows[k]["ms"] += n / total * step_ms
        rows[k]["samples"] += n
    return rows


def package(key: str) -> str:
    return "<user>" if key.startswith("<user>:") or "/" not in key else key.split("/", 1)[0] + "/"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="+", metavar="DIR/NAME=MS",
                   help="a workload's files in DIR (cnt_NAME_12.json, cnt_NAME_24.json, spyn_NAME.txt[.gz]) and its "
                        "unperturbed ms per step; several DIRs (hosts) are pooled, each relative to its own --base")
    p.add_argument("--json", type=Path)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--weights", type=Path, help="write per-file / per-package weights (cost per instruction "
                   "over --base's) for phantora_prof/cost/data/host_model.json's python_files")
    p.add_argument("--base", default="loader", help="the workload (in each DIR) whose own (non-site-packages) files "
                   "set the cost per instruction a weight of 1 stands for: a user's Python, as the profile's opcode_ns")
    p.add_argument("--prior-samples", type=float, default=20.0,
                   help="a file's rate is shrunk toward its package's by n / (n + this), n its py samples")
    a = p.parse_args()
    by_dir: dict[Path, dict[str, dict]] = collections.defaultdict(dict)
    for spec in a.workloads:
        path, ms = spec.rsplit("=", 1)
        d, name = Path(path).parent, Path(path).name
        rows = workload(d, name, float(ms))
        by_dir[d][name] = rows
        I = sum(r["instr"] for r in rows.values())
        T = sum(r["ms"] for r in rows.values())
        print(f"== {d}/{name}: {float(ms):.3f} ms per step, {I:,.0f} instructions, Python {T:.3f} ms: "
              f"{1e6 * T / I:.1f} ns/instr")
        for k, r in sorted(rows.items(), key=lambda kv: -kv[1]["ms"])[:a.top]:
            print(f"   {r['ms']:7.3f} ms {r['instr']:9.0f} instr {r['samples']:5d} smp "
                  f"{1e6 * r['ms'] / max(r['instr'], 1):7.1f} ns/instr  {k}")
    # pooled in units of each host's base (a user's cost per instruction there)
    total: dict[str, dict[str, float]] = collections.defaultdict(lambda: {"instr": 0.0, "base": 0.0, "samples": 0})
    for d, works in by_dir.items():
        if a.base not in works:
            raise SystemExit(f"{d}: no {a.base} workload to set the base cost per instruction")
        user = [r for k, r in works[a.base].items() if package(k) == "<user>"]
        r_base = sum(r["ms"] for r in user) / sum(r["instr"] for r in user)
        print(f"== {d}: base {1e6 * r_base:.2f} ns per instruction ({a.base}'s own files)")
        for rows in works.values():
            for k, r in rows.items():
                total[k]["instr"] += r["instr"]
                total[k]["base"] += r["ms"] / r_base  # instructions' worth at the base cost
                total[k]["samples"] += r["samples"]
    pk: dict[str, dict[str, float]] = collections.defaultdict(lambda: {"instr": 0.0, "base": 0.0, "samples": 0})
    for k, r in total.items():
        for f in ("instr", "base", "samples"):
            pk[package(k)][f] += r[f]
    print("== per package, pooled: cost per instruction over the base")
    for k, r in sorted(pk.items(), key=lambda kv: -kv[1]["instr"]):
        if r["instr"] > 1000:
            print(f"   {r['instr']:10.0f} instr {r['samples']:6d} smp  x{r['base'] / r['instr']:6.2f}  {k}")
    if a.weights:
        out: dict[str, float] = {}
        for k, r in pk.items():
            if k != "<user>" and r["samples"] >= 20:
                out[k] = r["base"] / r["instr"]
        for k, r in total.items():
            pkg = package(k)
            if pkg not in out or r["instr"] <= 0:
                continue
            w = r["samples"] / (r["samples"] + a.prior_samples)
            out[k] = w * r["base"] / r["instr"] + (1 - w) * out[pkg]
        out = {k: round(min(max(v, 0.5), 25.0), 3) for k, v in sorted(out.items())}
        print(f"== weights: {len(out)}; packages " + ", ".join(f"{k} {v}" for k, v in out.items() if k.count("/") == 1
                                                                 and k.endswith("/")))
        a.weights.write_text(json.dumps({"weights": out}, indent=0))
    if a.json:
        a.json.write_text(json.dumps({"files": dict(sorted(total.items())), "packages": dict(sorted(pk.items()))},
                                     indent=0))


if __name__ == "__main__":
    main()
