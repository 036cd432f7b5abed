"""Checkpoint time of a real model, held out from save_time.py's fit (issue #15).

    python tools/holdout/save_model.py            (real, on a GPU)
    phantora-prof python tools/holdout/save_model.py

GPT-2 124M (examples/gpt's model) with AdamW's state after one step: torch.save of
{"model", "optim"} from the GPU (state dicts of ~150 tensors of every size), of the same moved to
the CPU first, and torch.load of the file back to the GPU; then 8 x 64 MiB D2H copies into fresh
host memory (`.cpu()`) and into host tensors made once (`copy_`). Prints `CKPT {json}`:
milliseconds, median of three, and the files' sizes in MiB.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gpt"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train as gpt  # noqa: E402
from save_time import timed  # noqa: E402  (median of three synchronized runs, in ms)


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
    # Why `.cpu()` of large tensors took 4x the simulated copy (session 42): into fresh pageable
    # memory (page faults) or the pageable copy itself? 8 x 64 MiB each way.
    big = [torch.randn(16 << 20, device="cuda") for _ in range(8)]
    reused = [torch.empty(16 << 20) for _ in range(8)]
    res["d2h_fresh_512mib"] = timed(lambda: [t.cpu() for t in big])
    res["d2h_reused_512mib"] = timed(lambda: [r.copy_(t) for r, t in zip(reused, big)])
    print("CKPT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
