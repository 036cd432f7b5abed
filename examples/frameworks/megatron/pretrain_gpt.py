"""GPT pretraining with Megatron-core's public API: tensor x pipeline x data parallelism.

The loop is the one `megatron/training/training.py` runs, cut down to what Megatron-core itself
provides: `parallel_state` builds the TP/PP/DP groups, `GPTModel` with the local (non
Transformer-Engine) layer spec, bf16 through `Float16Module`, Megatron's own
`DistributedDataParallel` with the distributed optimizer (gradients reduce-scattered, parameters
all-gathered over the data-parallel group), the pipeline schedule from
`get_forward_backward_func`, and synthetic token data. Each iteration prints its loss, its
elapsed time from Megatron's `Timers` (which synchronize the GPU) and the throughput.

Nothing here knows about phantora-prof: on a node with 8 GPUs run

    torchrun --nproc-per-node 8 pretrain_gpt.py --tp 2 --pp 2

and anywhere, CPU-only, simulated:

    phantora-prof --nproc-per-node 8 python pretrain_gpt.py --tp 2 --pp 2
"""
from __future__ import annotations

import argparse
import os
from functools import partial

import torch
import torch.distributed as dist

from megatron.core import parallel_state
from megatron.core.distributed import (
    DistributedDataParallel,
    DistributedDataParallelConfig,
    finalize_model_grads,
)
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.timers import Timers
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import TransformerConfig


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tp", type=int, default=2, help="tensor-model-parallel size")
    p.add_argument("--pp", type=int, default=2, help="pipeline-model-parallel size")
    p.add_argument("--steps", type=int, default=5, help="training iterations")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--ffn", type=int, default=None, help="FFN hidden size (default 4 x hidden)")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--global-batch-size", type=int, default=None,
                   help="sequences per iteration over all DP ranks (default micro x 4 x DP)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--sequence-parallel", action="store_true",
                   help="Megatron sequence parallelism (the local layer spec needs Apex's LayerNorm for it)")
    p.add_argument("--no-overlap", action="store_true",
                   help="do not overlap the DP grad reduce-scatter / param all-gather with compute")
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args()


def initialize(args: argparse.Namespace) -> None:
    """torchrun-style init, then Megatron's groups and its per-TP-rank CUDA RNG tracker."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp)
    model_parallel_cuda_manual_seed(args.seed)


def build_model(args: argparse.Namespace, config: TransformerConfig) -> DistributedDataParallel:
    """This rank's pipeline stage of the GPT, in bf16, wrapped in Megatron's DDP."""
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=args.vocab,
        max_sequence_length=args.seq,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
        share_embeddings_and_output_weights=True,
        position_embedding_type="rope",
    )
    model.cuda(torch.cuda.current_device())
    model = Float16Module(config, model)
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=not args.no_overlap,
        overlap_param_gather=not args.no_overlap,
        use_distributed_optimizer=True,
        bucket_size=40_000_000,
    )
    return DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)


class SyntheticTokens:
    """Random token sequences, identical on every rank of a TP group and a pipeline (the seed
    depends only on the DP rank and the sample index), as Megatron's mock dataset gives."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.generator = torch.Generator().manual_seed(args.seed + parallel_state.get_data_parallel_rank())
        self.position_ids = torch.arange(args.seq).unsqueeze(0).expand(args.micro_batch_size, -1)

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        a = self.args
        tokens = torch.randint(0, a.vocab, (a.micro_batch_size, a.seq + 1), generator=self.generator)
        device = torch.cuda.current_device()
        return {
            "tokens": tokens[:, :-1].contiguous().cuda(device, non_blocking=True),
            "labels": tokens[:, 1:].contiguous().cuda(device, non_blocking=True),
            "loss_mask": torch.ones(a.micro_batch_size, a.seq).cuda(device, non_blocking=True),
            "position_ids": self.position_ids.contiguous().cuda(device, non_blocking=True),
        }


def loss_func(loss_mask: torch.Tensor, output_tensor: torch.Tensor):
    """Token-averaged cross entropy; the schedule scales it by 1/num_microbatches."""
    losses = output_tensor.float().view(-1)
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask) / mask.sum()
    return loss, {"lm loss": loss.detach().clone().view(1)}


def forward_step(data_iterator, model):
    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
    return output, partial(loss_func, batch["loss_mask"])


def main() -> None:
    args = parse_args()
    initialize(args)
    world = dist.get_world_size()
    dp = parallel_state.get_data_parallel_world_size()
    if args.global_batch_size is None:
        args.global_batch_size = args.micro_batch_size * 4 * dp
    if args.global_batch_size % (args.micro_batch_size * dp):
        raise SystemExit(f"--global-batch-size {args.global_batch_size} is not a multiple of "
                         f"micro-batch-size x DP = {args.micro_batch_size * dp}")
    num_microbatches = args.global_batch_size // (args.micro_batch_size * dp)

    config = TransformerConfig(
        num_layers=args.layers,
        hidden_size=args.hidden,
        num_attention_heads=args.heads,
        ffn_hidden_size=args.ffn or 4 * args.hidden,
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        sequence_parallel=args.tp > 1 and args.sequence_parallel,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        autocast_dtype=torch.bfloat16,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        use_cpu_initialization=False,
        perform_initialization=True,
    )
    model = build_model(args, config)
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=args.lr, weight_decay=0.1, bf16=True,
                        use_distributed_optimizer=True, clip_grad=1.0),
        [model])
    # What megatron/training/training.py wires into the config before training.
    config.no_sync_func = model.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    if not args.no_overlap:
        config.param_sync_func = model.start_param_sync
        config.grad_sync_func = model.start_grad_sync

    n_params = sum(p.numel() for p in model.parameters())
    if dist.get_rank() == 0:
        print(f"megatron-core GPT: world {world} = TP {args.tp} x PP {args.pp} x DP {dp}, "
              f"{args.layers} layers, hidden {args.hidden}, seq {args.seq}, "
              f"{n_params:,} parameters on rank 0, {num_microbatches} micro-batches "
              f"of {args.micro_batch_size}, on {torch.cuda.get_device_name()}", flush=True)

    forward_backward = get_forward_backward_func()
    data = SyntheticTokens(args)
    timers = Timers(log_level=0, log_option="minmax")
    report = (parallel_state.is_pipeline_last_stage() and parallel_state.get_tensor_model_parallel_rank() == 0
              and parallel_state.get_data_parallel_rank() == 0)
    model.train()
    for iteration in range(1, args.steps + 1):
        timers("iteration", log_level=0).start(barrier=True)
        model.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(
            forward_step_func=forward_step,
            data_iterator=data,
            model=[model],
            num_microbatches=num_microbatches,
            seq_length=args.seq,
            micro_batch_size=args.micro_batch_size,
            forward_only=False,
        )
        update_successful, grad_norm, _ = optimizer.step()
        timers("iteration").stop(barrier=True)
        elapsed = timers("iteration").elapsed(reset=True)
        if parallel_state.is_pipeline_last_stage():
            loss = torch.cat([x["lm loss"] for x in losses]).mean()
            dist.all_reduce(loss, group=parallel_state.get_data_parallel_group())
            loss = loss.item() / dp
            if report:
                tokens_per_s = args.global_batch_size * args.seq / elapsed
                print(f"iteration {iteration:4d}/{args.steps} | lm loss {loss:.4E} | "
                      f"elapsed time per iteration (ms): {elapsed * 1000:.1f} | "
                      f"tokens/s: {tokens_per_s:,.0f} | grad norm: {grad_norm or 0.0:.3f} | "
                      f"update ok: {bool(update_successful)}", flush=True)
    if dist.get_rank() == 0:
        mem = torch.cuda.max_memory_allocated() / 2**30
        print(f"done: {args.steps} iterations, peak memory on rank 0 {mem:.2f} GiB", flush=True)
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
