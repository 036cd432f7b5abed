"""Elementwise ops whose operands are each dense in different dim orders but share a unit-stride
innermost dim (RoPE's and per-head norms' adds and muls on `q.view(B, S, H, D).transpose(1, 2)`),
in every real profile kept under tools/holdout/real_h200: the real time against the model (with
its tables) and the roofline alone, per profile and dtype, and the element rate they ran at.

    python tools/holdout/strided_rows.py

Session 51 measured with it the profile's `strided_rows` class (cost/data/profiles/h200.json): a
median 255 G elements/s with 2-byte operands on the H200 and the H100 alike.
"""
from __future__ import annotations

import collections
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from phantora_prof.calibrate import trace_ops as X  # noqa: E402
from phantora_prof.calibrate.cost_report import to_opcall  # noqa: E402
from phantora_prof.calibrate.split_k_observed import trace_gpu  # noqa: E402
from phantora_prof.cost import estimate, get_gpu, op_class  # noqa: E402
from phantora_prof.cost.families import _operand_layout  # noqa: E402
from phantora_prof.cost.roofline import iter_tensors  # noqa: E402

sys.path.insert(0, str(HERE))
from cost_report_all import single_gpu_profiles  # noqa: E402


def main() -> None:
    files = single_gpu_profiles()
    per = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    rates = collections.defaultdict(list)
    for f in files:
        gpu_key = trace_gpu(f)
        gpu = get_gpu(gpu_key)
        for d in X.dispatch_ops(X.load_events(f)):
            if not d.acts:
                continue
            try:
                op = to_opcall(d, gpt_lists=False)
            except Exception:  # noqa: BLE001 - an op the report cannot rebuild is not this class
                continue
            if op_class(op) != "elementwise" or _operand_layout(op) != "rows":
                continue
            real = sum(a.dur_ns for a in d.acts)
            dtype = next(iter_tensors(op.args)).dtype
            row = per[(f.name.split(".")[0], gpu_key, dtype)]
            row[0] += 1
            row[1] += real
            row[2] += sum(k.duration_ns for k in estimate(op, gpu, use_table=True))
            row[3] += sum(k.duration_ns for k in estimate(op, gpu, use_table=False))
            rates[(gpu_key, dtype)].append(max(t.numel for t in iter_tensors(op.args)) / real)
    for (name, gpu_key, dtype), (n, real, model, roof) in sorted(per.items()):
        print(f"{name:<20} {gpu_key} {dtype:<9} {n:4d} calls  real {real / 1e3:8.1f} us  "
              f"model {model / real - 1:+.0%}  roofline {roof / real - 1:+.0%}")
    for (gpu_key, dtype), v in sorted(rates.items()):
        print(f"{gpu_key} {dtype}: {len(v)} calls, median {statistics.median(v):.0f} G elements/s")


if __name__ == "__main__":
    main()
