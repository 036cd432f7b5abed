"""GPT (GPT-2 small by default) with pipeline parallelism (`torch.distributed.pipelining`):
the blocks are split evenly over the ranks (stage 0 also holds the embeddings, the last stage
the head and the loss) and run with a GPipe or 1F1B schedule over micro-batches.
With `--dp N`, the ranks form a (pipeline x data-parallel) device mesh: WORLD/N stages, each
replicated N times, the replicas' gradients averaged with one all-reduce per parameter.

Nothing here knows about phantora-prof: run it with
`torchrun --nproc-per-node 4 examples/pp/train.py` on a machine with GPUs, or with
`phantora-prof --nproc-per-node 4 python examples/pp/train.py` anywhere.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import common  # noqa: E402  (the examples' shared scaffolding)
from train import Block  # noqa: E402  (the single-GPU example's block)


class Stage(nn.Module):
    def __init__(self, args, first: bool, last: bool, layers: int):
        super().__init__()
        self.first, self.last = first, last
        if first:
            self.wte = nn.Embedding(args.vocab, args.dim)
            self.wpe = nn.Embedding(args.seq, args.dim)
        self.blocks = nn.ModuleList(Block(args.dim, args.heads) for _ in range(layers))
        if last:
            self.lnf = nn.LayerNorm(args.dim)
            self.head = nn.Linear(args.dim, args.vocab, bias=False)

    def forward(self, x):
        if self.first:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            x = block(x)
        if self.last:
            x = self.head(self.lnf(x))
        return x


def main() -> None:
    p = common.gpt_parser(__doc__)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--schedule", choices=["gpipe", "1f1b"], default="1f1b")
    p.add_argument("--dp", type=int, default=1, help="data-parallel replicas of the pipeline")
    args = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = common.local_device()
    torch.manual_seed(0)
    dp_group = pp_group = None
    stages, stage_idx = world, rank
    if args.dp > 1:
        from torch.distributed.device_mesh import init_device_mesh

        stages = world // args.dp
        mesh = init_device_mesh("cuda", (stages, args.dp), mesh_dim_names=("pp", "dp"))
        stage_idx = mesh["pp"].get_local_rank()
        pp_group, dp_group = mesh["pp"].get_group(), mesh["dp"].get_group()
    first, last = stage_idx == 0, stage_idx == stages - 1
    per_stage = args.layers // stages
    model = Stage(args, first, last, per_stage).to(device)
    # Static shapes of one micro-batch at this stage's boundaries (no shape-inference round).
    mb = args.batch // args.microbatches
    inp = (torch.empty(mb, args.seq, dtype=torch.long, device=device) if first
           else torch.empty(mb, args.seq, args.dim, device=device, requires_grad=True))
    out = torch.empty(mb, args.seq, args.vocab if last else args.dim, device=device, requires_grad=True)
    stage = PipelineStage(model, stage_idx, stages, device, input_args=(inp,), output_args=(out,), group=pp_group)

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))

    cls = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
    schedule = cls(stage, n_microbatches=args.microbatches, loss_fn=loss_fn)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    x = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)

    def step():
        if first:
            schedule.step(x)
        elif last:
            schedule.step(target=x)
        else:
            schedule.step()
        if dp_group is not None:
            for prm in model.parameters():
                dist.all_reduce(prm.grad, op=dist.ReduceOp.AVG, group=dp_group)
        opt.step()
        opt.zero_grad(set_to_none=True)

    common.timed_steps(step, args.steps, rank, barrier=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
