"""GPT (GPT-2 small by default) with FSDP2 x tensor parallel on a 2-D DeviceMesh
(dp, tp): blocks are split Megatron-style over `tp`, then sharded with `fully_shard` over `dp`.

Nothing here knows about phantora-prof: run it with
`torchrun --nproc-per-node 8 examples/fsdp_tp/train.py --tp 2` on a machine with GPUs, or with
`phantora-prof --nproc-per-node 8 python examples/fsdp_tp/train.py --tp 2` anywhere.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import parallelize_module

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import common  # noqa: E402  (the examples' shared scaffolding)


GPT = common.tensor_parallel_gpt()


def main() -> None:
    p = common.gpt_parser(__doc__)
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel degree (the rest is data parallel)")
    args = p.parse_args()

    common.local_device()
    world = int(os.environ.get("WORLD_SIZE", 1))
    mesh = init_device_mesh("cuda", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = GPT(args.vocab, args.seq, args.dim, args.heads, args.layers).cuda()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], common.megatron_plan())
        fully_shard(block, mesh=mesh["dp"], mp_policy=mp)
    fully_shard(model, mesh=mesh["dp"], mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)  # DTensor and plain parameters mix
    x = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")

    def step():
        loss = model(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    common.timed_steps(step, args.steps, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
