"""Skinny GEMMs on the GPU: times and kernels of `x @ w` with a tiny inner or output dim (issue #14).

CaiT's talking-heads projections (`[4917248, 4] @ [4, 4]` in bf16) ran as five cutlass wmma launches of
~100 us each on an H100 (cuBLAS splits M into 2^20-row pieces), 6x what the simulator's GEMM model
said (blind set 23, tools/holdout/real_h200/session56/README.md). This sweep measures where cuBLAS
takes such kernels and how their time grows: M rows of a [M, K] activation times a [K, N] weight,
as `F.linear` runs it (the weight a transposed [N, K], "tn") and as a plain matmul ("nn"), bf16.

    python tools/holdout/skinny_gemm_sweep.py OUT.json

Per case: the median of 20 timed calls (CUDA events, after 3 warm-up calls) and the kernels one
profiled call launched (name, count, total us).
"""
from __future__ import annotations

import json
import sys

import torch

from cuda_timing import median_us

MS = (1 << 16, 1 << 18, 1 << 20, 3 << 20, 4917248)
NK = ((4, 4), (8, 8), (16, 16), (32, 32), (4, 64), (64, 4), (2, 512), (512, 2), (24, 512), (8, 256))


def kernels(fn) -> list:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    seen: dict = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            n, c, t = seen.get(e.name, (e.name, 0, 0.0))
            seen[e.name] = (n, c + 1, t + e.device_time_total)
    return [[n[:160], c, round(t, 1)] for n, c, t in seen.values()]


def main() -> int:
    rows = []
    for m in MS:
        for n, k in NK:
            if m * max(n, k) > 1 << 28:  # keep the sweep short: the big-M rows are for tiny n and k
                continue
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            for layout in ("tn", "nn"):
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() if layout == "tn" else \
                    torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
                fn = lambda: torch.mm(x, w)  # noqa: E731
                rows.append({"m": m, "n": n, "k": k, "layout": layout, "us": round(median_us(fn), 2), "kernels": kernels(fn)})
                print(json.dumps(rows[-1])[:200], flush=True)
            del x
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
              open(sys.argv[1], "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
