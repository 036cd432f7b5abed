"""GPT (GPT-2 small by default) with tensor parallelism (`parallelize_module`,
ColwiseParallel / RowwiseParallel on attention and MLP, as Megatron-LM splits them).

Nothing here knows about phantora-prof: run it with
`torchrun --nproc-per-node 8 examples/tp/train.py` on a machine with GPUs, or with
`phantora-prof --nproc-per-node 8 python examples/tp/train.py` anywhere.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpt"))
import train as gpt  # noqa: E402


class Block(gpt.Block):
    """The GPT block, written so that it also runs on column/row-sharded linears: the local
    q/k/v projections hold heads/world heads each."""

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=2)
        q, k, v = (t.view(B, T, -1, hd).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, -1))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


gpt.Block = Block  # GPT builds its blocks from this module's Block
GPT = gpt.GPT


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50304)
    args = p.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    world = int(os.environ.get("WORLD_SIZE", 1))
    if args.heads % world:
        raise SystemExit(f"tensor parallel over {world} GPUs needs a head count divisible by {world} "
                         f"(got --heads {args.heads}); e.g. --heads 16 --dim 1024")
    mesh = init_device_mesh("cuda", (world,))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = GPT(args.vocab, args.seq, args.dim, args.heads, args.layers).cuda()
    for block in model.blocks:
        parallelize_module(block, mesh, {
            "qkv": ColwiseParallel(), "proj": RowwiseParallel(),
            "fc": ColwiseParallel(), "out": RowwiseParallel(),
        })
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)  # DTensor and plain parameters mix
    x = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")
    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        print(f"rank {rank} step {step} time_ms {(time.perf_counter() - t0) * 1e3:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
