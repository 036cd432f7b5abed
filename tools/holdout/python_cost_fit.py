"""Which counts explain the host's Python time? (issue #15; session 29's diagnosis)

The host model charges Python as `opcode_ns` per bytecode instruction (runtime/host/pyhost.py).
This counts, on this interpreter, the instructions (by opcode), Python-level calls and C calls
of each of the host probe's Python benchmarks (phantora_prof/measure/host_probe.py), and fits
linear models of those counts to the benchmarks' times in real host probes
(`host_probe*.json` from the H200 machine), printing each model's per-benchmark error.

    python tools/holdout/python_cost_fit.py tools/holdout/real_h200/session29/phases/host_probe_s29b.json ...

Session 29's finding (Python 3.11 counts against the H200 host's 3.12 times, three probes):
instructions alone leave errors of +69% (plain Python calls) to -80% (tensor metadata calls),
-86% (string formatting) and -70% (nn.Module calls), RMS 0.62 on the fast lease; adding C
calls, Python calls and attribute loads brings the RMS to 0.35 but leaves nn.Module calls
-48%, tensor metadata -33% and strings -60%, and wants a negative cost per Python call. nn.Module's `__getattr__` keeps CPython from specialising
attribute loads on modules, so the same instruction costs several times more there: the
per-instruction cost depends on the objects, which counts alone do not see.
"""
from __future__ import annotations

import collections
import json
import opcode
import sys
from pathlib import Path

import numpy as np

from phantora_prof.measure import host_probe

MODELS = (("ops",), ("ops", "c_calls", "py_calls"), ("ops", "c_calls", "py_calls", "attr"))
SKIP = ("torch_small_ops",)  # CPU tensor ops, not interpreter work


def count(fn) -> dict:
    ops: collections.Counter = collections.Counter()
    calls = c_calls = 0

    def tracer(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1
            frame.f_trace_opcodes, frame.f_trace_lines = True, False
        elif event == "opcode":
            ops[opcode.opname[frame.f_code.co_code[frame.f_lasti]]] += 1
        return tracer

    def profiler(frame, event, arg):
        nonlocal c_calls
        c_calls += event == "c_call"

    sys.settrace(tracer)
    sys.setprofile(profiler)
    try:
        fn()
    finally:
        sys.settrace(None)
        sys.setprofile(None)
    attr = ops["LOAD_ATTR"] + ops["LOAD_METHOD"] + ops["STORE_ATTR"]
    return {"ops": sum(ops.values()), "py_calls": calls, "c_calls": c_calls, "attr": attr}


def main(argv: list[str]) -> int:
    counts = {n: count(f) for n, f in host_probe.PY_WORKLOADS.items() if n not in SKIP}
    for n, c in counts.items():
        print(f"{n:18s} " + " ".join(f"{k} {v}" for k, v in c.items()))
    for path in argv:
        real = json.loads(Path(path).read_text())["python"]
        names = [n for n in counts if n in real]
        t = np.array([real[n]["ns"] for n in names], float)
        for model in MODELS:
            x = np.array([[counts[n][f] for f in model] for n in names], float)
            coef, *_ = np.linalg.lstsq(x / t[:, None], np.ones_like(t), rcond=None)  # relative error
            err = x @ coef / t - 1
            print(f"{Path(path).name:24s} {'+'.join(model):30s} ns {np.round(coef, 1)} rms {np.sqrt(np.mean(err ** 2)):.2f} "
                  + " ".join(f"{n}:{e:+.2f}" for n, e in zip(names, err)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
