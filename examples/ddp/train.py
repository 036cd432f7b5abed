"""GPT (GPT-2 small by default) trained with DistributedDataParallel.

Nothing here knows about phantora-prof: run it with
`torchrun --nproc-per-node 8 examples/ddp/train.py` on a machine with GPUs, or with
`phantora-prof --nproc-per-node 8 python examples/ddp/train.py` anywhere.
It prints, per step, the time measured the usual way (perf_counter around a synchronized
step), tokens per second and MFU, then the peak memory.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import common  # noqa: E402  (the examples' shared scaffolding)
from train import GPT  # noqa: E402  (the single-GPU example's model)


def main() -> None:
    p = common.gpt_parser(__doc__)
    p.add_argument("--lr", type=float, default=3e-4)
    args = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = common.local_device()
    local_rank = device.index
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT(args.vocab, args.seq, args.dim, args.heads, args.layers).to(device)
    nparams = sum(p.numel() for p in model.parameters())
    model = DDP(model, device_ids=[local_rank])
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)
    if rank == 0:
        print(f"model: {nparams:,} parameters on {world} x {torch.cuda.get_device_name()}", flush=True)

    tokens = args.batch * args.seq * world  # global batch
    flops_per_step = common.gpt_flops_per_step(nparams, args, tokens)
    x = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    y = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    common.timed_steps(step, args.steps, rank, common.throughput(flops_per_step, tokens, world))
    print(f"rank {rank} peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
