"""How long torch.save / torch.load of a state dict take, from GPU and from CPU tensors (issue #15).

    python tools/holdout/save_time.py            (real, on a GPU)
    phantora-prof python tools/holdout/save_time.py

torch.save of CUDA tensors copies each to the host, pickles the dict and writes every storage
into the zip file; the file goes to the page cache (a local /tmp). Prints `SAVE {json}`:
milliseconds per size (MiB), the median of three, GPU and CPU sources, and torch.load back
to the GPU (map_location="cuda").
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

import torch


def timed(fn, reps: int = 3) -> float:
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(out), 2)


def main() -> None:
    res: dict[str, float] = {}
    path = os.path.join(tempfile.gettempdir(), "save_time.pt")
    for mib in (64, 256, 512):
        n = mib * 2**20 // 4 // 8  # 8 tensors of fp32
        gpu = {f"w{i}": torch.randn(n, device="cuda") for i in range(8)}
        cpu = {k: v.cpu() for k, v in gpu.items()}
        res[f"save_gpu_{mib}"] = timed(lambda: torch.save(gpu, path))
        res[f"save_cpu_{mib}"] = timed(lambda: torch.save(cpu, path))
        res[f"load_to_gpu_{mib}"] = timed(lambda: torch.load(path, map_location="cuda"))
        res[f"d2h_{mib}"] = timed(lambda: [v.cpu() for v in gpu.values()])
        del gpu, cpu
    os.unlink(path)
    print("SAVE " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
