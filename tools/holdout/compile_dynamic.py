"""Compiled training with changing shapes and a compiled optimizer step, for the H200 (issue #16).

What real torch does here (recompiles with a symbolic length on the second length, Inductor's
foreach combo kernels for the optimizer) is simulated (runtime/compile/dynamic.py, lowering's
foreach plan) but was never measured: run this on the GPU machine and under the simulator and
compare the per-length step times and peak memory.

    python tools/holdout/compile_dynamic.py [--lens 1024,512,768,1024,640,768] [--opt-compiled]
    phantora-prof --no-trace python tools/holdout/compile_dynamic.py ...

Each length runs `--reps` timed steps (synchronized, perf_counter) after one untimed step, so
the first step of a new length (its compile or its plan) is not in the figures.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(a)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lens", default="1024,512,768,1024,640,768")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--opt-compiled", action="store_true", help="compile the optimizer step as well")
    args = p.parse_args()
    torch.manual_seed(0)
    model = torch.compile(nn.Sequential(*[Block(args.dim, args.heads) for _ in range(args.layers)]).cuda())
    opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-4), capturable=args.opt_compiled,
                            fused=not args.opt_compiled)
    step_opt = torch.compile(opt.step) if args.opt_compiled else opt.step

    def step(x: torch.Tensor) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        step_opt()
        opt.zero_grad(set_to_none=True)

    for seq in (int(s) for s in args.lens.split(",")):
        x = torch.randn(args.batch, seq, args.dim, device="cuda")
        step(x)  # the new length's compile (or its plan)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            step(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        print(f"seq {seq} ms {min(times):.3f} median {sorted(times)[len(times) // 2]:.3f} "
              f"peak {torch.cuda.max_memory_allocated()}", flush=True)


if __name__ == "__main__":
    main()
