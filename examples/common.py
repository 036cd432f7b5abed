"""What the distributed examples share: the GPT's arguments, the rank's set-up, the timed steps.

Plain torch (nothing here knows about phantora-prof). The model is the single-GPU example's
(`examples/gpt/train.py`, imported as `train`), which stays a self-contained script.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt"))

PEAK_BF16_FLOPS = 989e12  # dense bf16 FLOP/s of one H100/H200 SXM


def gpt_parser(doc: str | None) -> argparse.ArgumentParser:
    """The GPT's size and the run's length (GPT-2 small, 6 steps by default)."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50304)
    return p


def local_device() -> torch.device:
    """This rank's GPU (torchrun's LOCAL_RANK), made current."""
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def gpt_flops_per_step(nparams: int, args: argparse.Namespace, tokens: int) -> float:
    """6N FLOPs per token for the weights, plus attention (12 x layers x dim x seq per token)."""
    return 6 * nparams * tokens + 12 * args.layers * args.dim * args.seq * tokens


def timed_steps(step: Callable[[], torch.Tensor | None], steps: int, rank: int,
                describe: Callable[[float, torch.Tensor | None], str] | None = None, barrier: bool = False) -> None:
    """Run `step` `steps` times, each timed the usual way (perf_counter around a synchronized
    step), and print `rank R step S ... time_ms T` (`describe(seconds, loss)` writes the line's
    middle and end when given)."""
    for i in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        if barrier:
            dist.barrier()
        dt = time.perf_counter() - t0
        text = describe(dt, loss) if describe is not None else f"time_ms {dt * 1e3:.3f}"
        print(f"rank {rank} step {i} {text}", flush=True)


def throughput(flops_per_step: float, tokens: int, world: int) -> Callable[[float, torch.Tensor | None], str]:
    """A `describe` for timed_steps: loss, time, tokens per second and MFU against bf16 peak."""
    peak = PEAK_BF16_FLOPS * world

    def describe(dt: float, loss: torch.Tensor | None) -> str:
        return (f"loss {loss.item():.4f} time_ms {dt * 1e3:.3f} tokens/s {tokens / dt:,.0f} "
                f"mfu {100 * flops_per_step / dt / peak:.1f}%")

    return describe


def tensor_parallel_gpt() -> type:
    """The GPT with blocks that also run on column/row-sharded linears (the local q/k/v
    projections hold heads/world heads each), for tensor parallelism."""
    import torch.nn.functional as F

    import train as gpt  # the single-GPU example's model

    class Block(gpt.Block):
        def forward(self, x):
            B, T, C = x.shape
            hd = C // self.heads
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=2)
            q, k, v = (t.view(B, T, -1, hd).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, -1))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    gpt.Block = Block  # GPT builds its blocks from its module's Block
    return gpt.GPT


def megatron_plan() -> dict:
    """Megatron-style tensor parallelism of one GPT block: q/k/v and the MLP's first linear
    split by columns, the attention output and the MLP's second linear by rows."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"qkv": ColwiseParallel(), "proj": RowwiseParallel(), "fc": ColwiseParallel(), "out": RowwiseParallel()}
