"""GPT (GPT-2 small by default) trained with FSDP2 (`fully_shard`, bf16 mixed precision).

Nothing here knows about phantora-prof: run it with
`torchrun --nproc-per-node 8 examples/fsdp/train.py` on a machine with GPUs, or with
`phantora-prof --nproc-per-node 8 python examples/fsdp/train.py` anywhere.
It prints, per step, the time measured the usual way (perf_counter around a synchronized
step), tokens per second and MFU, then the peak memory.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpt"))
from train import GPT  # noqa: E402  (the single-GPU example's model)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--lr", type=float, default=3e-4)
    args = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT(args.vocab, args.seq, args.dim, args.heads, args.layers).to(device)
    nparams = sum(p.numel() for p in model.parameters())
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)
    if rank == 0:
        print(f"model: {nparams:,} parameters on {world} x {torch.cuda.get_device_name()}", flush=True)

    tokens = args.batch * args.seq * world  # global batch
    # 6N FLOPs per token for the weights, plus attention (12 * layers * dim * seq per token).
    flops_per_step = 6 * nparams * tokens + 12 * args.layers * args.dim * args.seq * tokens
    peak = 989e12 * world  # dense bf16 FLOP/s of H100/H200 SXMs

    x = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    y = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        mfu = flops_per_step / dt / peak
        print(f"rank {rank} step {step} loss {loss.item():.4f} time_ms {dt * 1e3:.3f} tokens/s {tokens / dt:,.0f} "
              f"mfu {100 * mfu:.1f}%", flush=True)
    print(f"rank {rank} peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
