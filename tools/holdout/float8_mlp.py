"""Float8 training of a LLaMA-sized feed-forward stack (issue #16 item 3): torchao's
`convert_to_float8_training` (tensorwise scaling, `torch._scaled_mm` GEMMs), eager or compiled,
against the same model in bf16.

    python tools/holdout/float8_mlp.py [--float8] [--compile] [--layers 2] [--tokens 16384]
    phantora-prof --gpu h200 python tools/holdout/float8_mlp.py --float8 --compile

Prints `step N time_ms T` per step and `RESULT {json}` (median of the steps after the third,
peak memory), like the reference workloads. `--profile-dir DIR` writes a torch.profiler trace
of steps 3-5. Needs torchao for --float8 (`pip install torchao`).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn


class FeedForward(nn.Module):
    """SwiGLU feed-forward of a LLaMA layer: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return x + self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--float8", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=14336)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--profile-dir", default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[FeedForward(a.dim, a.hidden) for _ in range(a.layers)]).cuda().to(torch.bfloat16)
    if a.float8:
        from torchao.float8 import convert_to_float8_training
        convert_to_float8_training(model)
    if a.compile:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(a.tokens, a.dim, device="cuda", dtype=torch.bfloat16)
    prof = None
    if a.profile_dir:
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                       schedule=schedule(wait=1, warmup=2, active=3, repeat=1),
                       on_trace_ready=tensorboard_trace_handler(a.profile_dir))
        prof.start()
    times = []
    for i in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        print(f"step {i} time_ms {times[-1]:.3f}", flush=True)
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()
    print("RESULT " + json.dumps({"workload": "float8_mlp", **vars(a), "step_ms": times,
                                  "median_steady_ms": statistics.median(times[3:]),
                                  "peak_mem_bytes": torch.cuda.max_memory_allocated()}), flush=True)


if __name__ == "__main__":
    main()
