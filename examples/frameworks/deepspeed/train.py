"""GPT (examples/gpt's model) trained with DeepSpeed ZeRO stage 1, 2 or 3, bf16.

An ordinary DeepSpeed script; nothing here knows about phantora-prof. On GPUs:
    deepspeed --num_gpus 8 examples/frameworks/deepspeed/train.py --zero-stage 3
    torchrun --nproc-per-node 8 examples/frameworks/deepspeed/train.py --zero-stage 3
Simulated, CPU-only:
    phantora-prof --nproc-per-node 8 python examples/frameworks/deepspeed/train.py --zero-stage 3

The optimizer is torch's AdamW (passed to `deepspeed.initialize`), not DeepSpeed's
FusedAdam: that one is a CUDA extension DeepSpeed JIT-compiles on first use, which needs
nvcc. `zero_allow_untested_optimizer` lets ZeRO take a torch optimizer.
DeepSpeed prints its own progress every `--print-every` steps (`steps_per_print`); the
script prints the step time measured the usual way (perf_counter around a synchronized step).
"""
import argparse
import os
import sys
import time

import torch
import deepspeed

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "gpt"))
from train import GPT  # noqa: E402  (the single-GPU example's model)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--zero-stage", type=int, default=2, choices=(0, 1, 2, 3))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8, help="micro batch per GPU")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--print-every", type=int, default=1, help="DeepSpeed's steps_per_print")
    p.add_argument("--breakdown", action="store_true", help="DeepSpeed's wall_clock_breakdown timers")
    p.add_argument("--comms-logger", action="store_true",
                   help="DeepSpeed's communication logger (a table of collectives at the end)")
    p.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")
    args = p.parse_args()

    deepspeed.init_distributed(dist_backend="nccl")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    torch.manual_seed(0)

    ds_config = {
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_accumulation_steps": args.grad_accum,
        "steps_per_print": args.print_every,
        "bf16": {"enabled": True},
        "gradient_clipping": 1.0,
        "zero_optimization": {
            "stage": args.zero_stage,
            "overlap_comm": True,
            "contiguous_gradients": True,
            "reduce_bucket_size": 50_000_000,
            "allgather_bucket_size": 50_000_000,
            "stage3_prefetch_bucket_size": 50_000_000,
            "stage3_param_persistence_threshold": 100_000,
        },
        "zero_allow_untested_optimizer": True,
        "wall_clock_breakdown": args.breakdown,
        "log_level": "info",
    }
    if args.comms_logger:  # (DeepSpeed turns the logger on whenever the key is present)
        ds_config["comms_logger"] = {"enabled": True, "verbose": False, "prof_all": True}

    if args.zero_stage == 3:
        # parameters are partitioned as they are created: no rank ever holds the whole model
        with deepspeed.zero.Init(config_dict_or_path=ds_config):
            model = GPT(args.vocab, args.seq, args.dim, args.heads, args.layers)
    else:
        model = GPT(args.vocab, args.seq, args.dim, args.heads, args.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config)
    nparams = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    if rank == 0:
        print(f"model: {nparams:,} parameters, ZeRO stage {args.zero_stage} on {world} x "
              f"{torch.cuda.get_device_name()}", flush=True)

    tokens = args.batch * args.seq * world * args.grad_accum  # global batch
    # 6N FLOPs per token for the weights, plus attention (12 * layers * dim * seq per token).
    flops_per_step = 6 * nparams * tokens + 12 * args.layers * args.dim * args.seq * tokens
    peak = 989e12 * world  # dense bf16 FLOP/s of H100/H200 SXMs

    device = engine.device
    x = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    y = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.grad_accum):
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} time_ms {dt * 1e3:.3f} tokens/s {tokens / dt:,.0f} "
                  f"mfu {100 * flops_per_step / dt / peak:.1f}%", flush=True)
    if args.comms_logger:
        deepspeed.comm.log_summary()
    if rank == 0:
        print(f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
