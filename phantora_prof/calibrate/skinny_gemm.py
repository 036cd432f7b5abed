"""cost/data/skinny_gemm_h100.json from tools/holdout/skinny_gemm_sweep.py's output.

    python -m phantora_prof.calibrate.skinny_gemm SWEEP.json [-o OUT.json]

Per swept case (m rows, n, k, the weight's layout): the GPU time of the profiled call's kernels
with memsets left out, the longest kernel's name and the number of launches (cost/skinny_gemm.py
prices matmuls of the same (n, k, layout) from them).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "cost" / "data" / "skinny_gemm_h100.json"
SWEEP = "tools/holdout/real_h200/session56/skinny_gemm_h100.json"


def table_from_sweep(doc: dict) -> dict:
    rows = []
    for r in doc["rows"]:
        main = [k for k in r["kernels"] if not k[0].startswith("Memset")]
        if not main:
            continue
        big = max(main, key=lambda k: k[2])
        rows.append({"m": r["m"], "n": r["n"], "k": r["k"], "layout": r["layout"],
                     "kernel_us": round(sum(k[2] for k in main), 1), "kernel": big[0], "launches": sum(k[1] for k in main)})
    return {"comment": (f"bf16 GEMMs with a small inner or output dim on an {doc['device']} (torch {doc['torch']}), "
                        f"tools/holdout/skinny_gemm_sweep.py ({SWEEP}) through `python -m phantora_prof.calibrate."
                        "skinny_gemm`: torch.mm of a contiguous [m, k] activation and a [k, n] weight, contiguous ('nn') "
                        "or a transposed [n, k] ('tn', as F.linear passes it); per case the GPU time of one profiled "
                        "call's kernels (memsets left out), the longest kernel's name (truncated) and the number of "
                        "launches (cuBLAS splits m into pieces of up to 2^20 rows). Read by cost/skinny_gemm.py."),
            "gpu": "h100", "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", type=Path)
    p.add_argument("-o", "--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    a.out.write_text(json.dumps(table_from_sweep(json.loads(a.sweep.read_text())), indent=0) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
