"""GPT (GPT-2 small by default) with tensor parallelism (`parallelize_module`,
ColwiseParallel / RowwiseParallel on attention and MLP, as Megatron-LM splits them).

Nothing here knows about phantora-prof: run it with
`torchrun --nproc-per-node 8 examples/tp/train.py` on a machine with GPUs, or with
`phantora-prof --nproc-per-node 8 python examples/tp/train.py` anywhere.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import parallelize_module

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import common  # noqa: E402  (the examples' shared scaffolding)


GPT = common.tensor_parallel_gpt()


def main() -> None:
    p = common.gpt_parser(__doc__)
    args = p.parse_args()

    common.local_device()
    world = int(os.environ.get("WORLD_SIZE", 1))
    if args.heads % world:
        raise SystemExit(f"tensor parallel over {world} GPUs needs a head count divisible by {world} "
                         f"(got --heads {args.heads}); e.g. --heads 16 --dim 1024")
    mesh = init_device_mesh("cuda", (world,))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = GPT(args.vocab, args.seq, args.dim, args.heads, args.layers).cuda()
    for block in model.blocks:
        parallelize_module(block, mesh, common.megatron_plan())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)  # DTensor and plain parameters mix
    x = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    common.timed_steps(step, args.steps, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
