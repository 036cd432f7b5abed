"""GPU time of torch.roll on CUDA by size, dtype and rolled dims (issue #14).

CUDA's roll (aten/src/ATen/native/cuda/Roll.cu) rolls one dimension per kernel, one thread
per element, and rolls several dimensions one after another (roll_common); the kernel does
index arithmetic per element and is not vectorized. Swin-style models roll every shifted
window block's activations twice per step. Times from CUDA events around 20 back-to-back
calls (GPU busy time per call; launch overhead hidden behind the queue).

    python tools/holdout/roll_sweep.py --out roll.json
"""
from __future__ import annotations

import argparse
import json

import torch


def gpu_us(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / reps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    rows = []
    for dtype in (torch.bfloat16, torch.float32, torch.float16):
        for e in range(14, 27, 2):
            n = 1 << e
            c = 64 if e >= 12 else 16
            hw = int((n // (c * 16)) ** 0.5) or 1
            shape = (16, hw, max(1, n // (16 * hw * c)), c)
            x = torch.randn(shape, device="cuda").to(dtype)
            for dims in ((1,), (1, 2)):
                shifts = tuple(3 for _ in dims)
                t = gpu_us(lambda: torch.roll(x, shifts, dims))
                rows.append({"dtype": str(dtype).split(".")[-1], "shape": list(shape), "numel": x.numel(),
                             "dims": list(dims), "us": round(t, 3)})
                print(rows[-1], flush=True)
    with open(a.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=0)


if __name__ == "__main__":
    main()
