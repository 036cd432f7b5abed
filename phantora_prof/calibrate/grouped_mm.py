"""cost/data/grouped_mm_h200.json from a real profile of torch._grouped_mm (a MoE step).

    python -m phantora_prof.calibrate.grouped_mm TRACE.pt.trace.json.gz [-o OUT.json]

For each `aten::_grouped_mm` call of the trace, the kernels it launched (matched through the CUDA
runtime's correlation ids): a one-block prepare kernel, then CUTLASS's grouped GEMM, whose
instantiation follows the operands' layouts. The table keeps both names per layout class
(`weight_grad`: 2-D x 2-D; `b_row_major` / `b_col_major`: 2-D x 3-D by B's layout) and the
prepare kernel's median duration (cost/ops.py grouped_mm). Torch-free (tracing/ only).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from tracing.kineto import load_trace

ABOUT = ("Kernel names of torch._grouped_mm on the H200 (bf16, torch 2.11, CUTLASS sm90 grouped GEMM), from "
         "tools/holdout/real_h200/session20/moe/moe_e8k2.pt.trace.json.gz by `python -m "
         "phantora_prof.calibrate.grouped_mm`: per operand layout, the prepare_grouped_gemm_data kernel then the GEMM; "
         "prepare_ns: the prepare kernel's median duration there")


def layout_class(dims: list, strides: list) -> str:
    a, b = dims[0], dims[1]
    if len(a) == 2 and len(b) == 2:
        return "weight_grad"
    return "b_col_major" if len(strides[1]) >= 2 and strides[1][-2] == 1 else "b_row_major"


def table_from_trace(path: Path) -> dict:
    events = load_trace(path)["traceEvents"]
    runtime = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    kernels = {}
    for e in events:
        if e.get("cat") == "kernel":
            kernels.setdefault(e["args"].get("correlation"), []).append(e)
    out: dict = {}
    prepare_us = []
    for op in (e for e in events if e.get("cat") == "cpu_op" and e.get("name") == "aten::_grouped_mm"):
        end = op["ts"] + op["dur"]
        launched = sorted((k for r in runtime if r["tid"] == op["tid"] and op["ts"] <= r["ts"] <= end
                           for k in kernels.get(r["args"].get("correlation"), ())), key=lambda k: k["ts"])
        names = [k["name"] for k in launched]
        if len(names) != 2:
            continue
        out.setdefault(layout_class(op["args"]["Input Dims"], op["args"]["Input Strides"]), names)
        prepare_us.append(launched[0]["dur"])
    table = {"about": ABOUT}
    table.update(sorted(out.items()))
    table["prepare_ns"] = int(round(statistics.median(prepare_us) * 1000, -2)) if prepare_us else 0
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("-o", "--out", type=Path, default=Path(__file__).parent.parent / "cost" / "data" / "grouped_mm_h200.json")
    a = ap.parse_args()
    a.out.write_text(json.dumps(table_from_trace(a.trace), indent=1) + "\n")


if __name__ == "__main__":
    main()
