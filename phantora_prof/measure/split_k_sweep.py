"""Where cuBLAS splits K: a dense sweep of 16-bit GEMMs on a GPU, kernel names only (issue #14).

    python -m phantora_prof.measure.split_k_sweep OUT.json [--dtypes bf16,fp16]

Runs `torch.mm` over a grid of (m, n, K, layout) whose outputs have fewer than 400 128x128
tiles (the H200 GEMM sweep never saw cuBLAS split a larger one), under torch.profiler, and
records for each call whether a `splitKreduce_kernel` followed its GEMM kernel, with the GEMM
kernel's name and grid. The times are not used: data/h200_measured.json has those.
cost/split_k.py reads the result (data/h200_split_k.json). Layouts as in measure_kernels: NN
(both operands row-major), TN (A transposed), NT (B transposed).
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import tempfile

DIMS = (128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
MAX_TILES = 400


def ks() -> list[int]:
    """K from 1,024 to 65,536 in quarter octaves, multiples of 64."""
    return sorted({int(round(2 ** (e / 4) / 64)) * 64 for e in range(40, 65)})


def grid(dtypes: list[str]) -> list[tuple[str, str, int, int, int]]:
    out = []
    for dt in dtypes:
        for layout in ("NN", "TN", "NT"):
            for m in DIMS:
                for n in DIMS:
                    if math.ceil(m / 128) * math.ceil(n / 128) >= MAX_TILES:
                        continue
                    for i, k in enumerate(ks()):
                        if dt != "bf16" and (i + DIMS.index(m) + DIMS.index(n)) % 4:
                            continue  # other dtypes: a quarter of the grid
                        out.append((dt, layout, m, n, k))
    return out


def run(out_path: str, dtypes: list[str]) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True  # torch's default, as training runs
    torch_dt = {"bf16": torch.bfloat16, "fp16": torch.float16}
    calls = grid(dtypes)

    def operands(dt, layout, m, n, k):
        t = torch_dt[dt]
        a = torch.randn(k, m, device="cuda", dtype=t).t() if layout == "TN" else torch.randn(m, k, device="cuda", dtype=t)
        b = torch.randn(n, k, device="cuda", dtype=t).t() if layout == "NT" else torch.randn(k, n, device="cuda", dtype=t)
        return a, b

    results = []
    chunk = 64
    for start in range(0, len(calls), chunk):
        part = calls[start:start + chunk]
        tensors = [operands(*c) for c in part]
        for a, b in tensors[:4]:
            torch.mm(a, b)  # warm-up: cuBLAS handles and workspaces
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for a, b in tensors:
                torch.mm(a, b)
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f)["traceEvents"]
        mm_ids = [e["args"]["External id"] for e in sorted(
            (e for e in events if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm"), key=lambda e: e["ts"])]
        kernels: dict[int, list[dict]] = {}
        for e in events:
            if e.get("cat") == "kernel":
                kernels.setdefault(e["args"].get("External id"), []).append(e)
        if len(mm_ids) != len(part):
            raise RuntimeError(f"{len(mm_ids)} aten::mm records for {len(part)} calls")
        for (dt, layout, m, n, k), ext in zip(part, mm_ids):
            ks_ = sorted(kernels.get(ext, []), key=lambda e: e["ts"])
            gemm = next((e for e in ks_ if "splitKreduce" not in e["name"]), None)
            results.append({"dtype": dt, "layout": layout, "m": m, "n": n, "k": k,
                            "split": any("splitKreduce" in e["name"] for e in ks_),
                            "kernel": gemm["name"] if gemm else None,
                            "grid": gemm["args"].get("grid") if gemm else None})
        del tensors
        torch.cuda.empty_cache()
    doc = {"schema": "phantora-split-k/1", "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "cuda": torch.version.cuda, "calls": results}
    opener = gzip.open if out_path.endswith(".gz") else open
    with opener(out_path, "wt") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"{len(results)} calls, {sum(r['split'] for r in results)} split -> {out_path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--dtypes", default="bf16,fp16")
    a = p.parse_args()
    run(a.out, a.dtypes.split(","))


if __name__ == "__main__":
    main()
