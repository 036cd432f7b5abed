"""Does a training step's host work cost more when the GPU is idle? (issue #15)

The host-bound reference gpt.py at batch 1 spends 9.8-10.5 ms of host time in its forward on
the H200 machine, at batch 8 (GPU-bound) 5.2 ms: the same ops, the same Python. This runs
the reference GPT and this directory's ViT, each step as gpt.py does (sync, forward under
autocast, backward, fused AdamW, zero_grad, sync), and times the host's forward, backward
and optimizer, two ways: idle (as the scripts run) and queued (a torch.cuda._sleep kernel
launched right after the sync keeps the GPU busy through the whole step's launches).

    python tools/holdout/idle_forward.py --workloads DIR_OF_gpt.py [--steps 12] [--modes alternate]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch


def build(name: str, workloads: str):
    sys.path.insert(0, workloads)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if name.startswith("gpt"):
        from gpt import GPT
        batch, seq = {"gpt_b1": (1, 64), "gpt_b8": (8, 1024)}[name]
        model = GPT(50304, seq, 768, 12, 12).cuda()
        x = torch.randint(0, 50304, (batch, seq), device="cuda")
        y = torch.randint(0, 50304, (batch, seq), device="cuda")
        return model, (lambda: model(x, y)), torch.bfloat16
    from vit import ViT
    batch = {"vit_b16": 16, "vit_b64": 64}[name]
    model = ViT(224, 16, 768, 12, 12, 1000).cuda()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    return model, (lambda: torch.nn.functional.cross_entropy(model(x), y)), torch.float16


def run(name: str, workloads: str, steps: int, mode: str) -> dict:
    """Median host ms per phase; mode "idle", "queued" or "alternate" (odd steps queued, even
    ones idle, reported apart: the host's drift within a run cancels out)."""
    model, loss_fn, dt = build(name, workloads)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    ph: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
    alt: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
    for i in range(steps):
        torch.cuda.synchronize()
        queued = mode == "queued" or (mode == "alternate" and i % 2 == 1)
        if queued:
            torch.cuda._sleep(100_000_000)  # ~50-70 ms of GPU time ahead of the step's launches
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=dt):
            loss = loss_fn()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        torch.cuda.synchronize()
        if i >= 3:
            into = alt if (mode == "alternate" and queued) else ph
            into["forward"].append((t1 - t0) * 1e3)
            into["backward"].append((t2 - t1) * 1e3)
            into["optimizer"].append((t3 - t2) * 1e3)
    out = {k: round(statistics.median(v), 3) for k, v in ph.items()}
    if mode == "alternate":
        out.update({f"{k}_queued": round(statistics.median(v), 3) for k, v in alt.items()})
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workloads", required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--modes", default="idle,queued,idle")
    p.add_argument("--models", default="gpt_b1,gpt_b8,vit_b16,vit_b64")
    a = p.parse_args()
    out = {}
    for name in a.models.split(","):
        for mode in a.modes.split(","):
            r = run(name, a.workloads, a.steps, mode)
            out.setdefault(f"{name}/{mode}", []).append(r)
            print(name, mode, json.dumps(r), flush=True)
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
