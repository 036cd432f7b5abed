"""FSDP1 (FullyShardedDataParallel): a CPU-built model moved by `param.data = ...`, bf16 mixed precision,
no_sync accumulation, clipping, then a torch.distributed.checkpoint save and load of a sharded state dict."""
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(64, 256)
        self.l2 = nn.Linear(256, 64)

    def forward(self, x):
        return x + self.l2(torch.relu(self.l1(x)))


dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank % torch.cuda.device_count())
model = FSDP(nn.Sequential(Block(), Block()), auto_wrap_policy=ModuleWrapPolicy({Block}),
             device_id=torch.cuda.current_device(),
             mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
             sharding_strategy=ShardingStrategy.FULL_SHARD, use_orig_params=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    with model.no_sync():  # first micro-batch: gradients kept local
        model(torch.randn(4, 16, 64, device="cuda")).pow(2).mean().backward()
    model(torch.randn(4, 16, 64, device="cuda")).pow(2).mean().backward()
    model.clip_grad_norm_(1.0)
    opt.step()
    opt.zero_grad()
    if rank == 0:
        print("step", step, flush=True)
msd, osd = get_state_dict(model, opt)
dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.environ["DCP_DIR"])
dcp.load({"model": msd, "optim": osd}, checkpoint_id=os.environ["DCP_DIR"])
set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
# a full state dict gathered to rank 0's CPU (`flat_param.data = flat_param.to("cpu")` and back),
# then training goes on
from torch.distributed.fsdp import FullStateDictConfig, StateDictType  # noqa: E402

with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=True,
                                                                                    rank0_only=True)):
    full = model.state_dict()
model(torch.randn(4, 16, 64, device="cuda")).pow(2).mean().backward()
opt.step()
if rank == 0:
    print("full state dict", len(full), sorted({str(v.device) for v in full.values()}), flush=True)
if rank == 0:
    print("fsdp1 ok", torch.cuda.max_memory_allocated() // 2**20, "MiB")
dist.destroy_process_group()
