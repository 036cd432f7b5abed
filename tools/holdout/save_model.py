"""Checkpoint time of a real model, held out from save_time.py's fit (issue #15).

    python tools/holdout/save_model.py            (real, on a GPU)
    phantora-prof python tools/holdout/save_model.py

GPT-2 124M (examples/gpt's model) with AdamW's state after one step: torch.save of
{"model", "optim"} from the GPU (state dicts of ~150 tensors of every size), of the same moved to
the CPU first, and torch.load of the file back to the GPU. Prints `CKPT {json}`: milliseconds,
median of three, and the file's size in MiB.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gpt"))
import train as gpt  # noqa: E402


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
    torch.manual_seed(0)
    model = gpt.GPT(50304, 1024, 768, 12, 12).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 50304, (2, 64), device="cuda")
    model(x, x).backward()
    opt.step()
    path = os.path.join(tempfile.gettempdir(), "save_model.pt")
    ckpt = {"model": model.state_dict(), "optim": opt.state_dict()}
    res = {"save_gpu": timed(lambda: torch.save(ckpt, path)), "file_mib": round(os.path.getsize(path) / 2**20, 1)}
    cpu = {"model": {k: v.cpu() for k, v in ckpt["model"].items()}}
    res["save_cpu_model"] = timed(lambda: torch.save(cpu, path))
    res["cpu_file_mib"] = round(os.path.getsize(path) / 2**20, 1)
    torch.save(ckpt, path)
    res["load_to_gpu"] = timed(lambda: torch.load(path, map_location="cuda"))
    os.unlink(path)
    print("CKPT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
