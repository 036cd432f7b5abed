"""FSDP1 (FullyShardedDataParallel): a CPU-built model moved by `param.data = ...`, bf16 mixed precision,
no_sync accumulation, clipping, then a torch.distributed.checkpoint save and load of a sharded state dict."""
import os, torch, torch.nn as nn, torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
dist.init_process_group("nccl")
rank = dist.get_rank(); torch.cuda.set_device(rank % torch.cuda.device_count())
class Block(nn.Module):
    def __init__(self): super().__init__(); self.l1 = nn.Linear(64, 256); self.l2 = nn.Linear(256, 64)
    def forward(self, x): return x + self.l2(torch.relu(self.l1(x)))
model = nn.Sequential(*[Block() for _ in range(2)])
model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=torch.cuda.current_device(),
             mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
             sharding_strategy=ShardingStrategy.FULL_SHARD, use_orig_params=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    for micro in range(2):
        x = torch.randn(4, 16, 64, device="cuda")
        if micro == 0:
            with model.no_sync():
                model(x).pow(2).mean().backward()
        else:
            model(x).pow(2).mean().backward()
    model.clip_grad_norm_(1.0); opt.step(); opt.zero_grad()
    if rank == 0: print("step", step, flush=True)
msd, osd = get_state_dict(model, opt)
dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.environ["DCP_DIR"])
dcp.load({"model": msd, "optim": osd}, checkpoint_id=os.environ["DCP_DIR"])
set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
if rank == 0: print("fsdp1 ok", torch.cuda.max_memory_allocated() // 2**20, "MiB")
dist.destroy_process_group()
