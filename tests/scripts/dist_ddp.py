"""A tiny GPT trained with DDP (imports the example's model); prints per-step times."""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gpt"))
from train import GPT  # noqa: E402

dist.init_process_group("nccl")
rank = dist.get_rank()
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
model = DDP(GPT(vocab=512, seq=64, dim=64, heads=4, layers=2).cuda(), device_ids=[local], bucket_cap_mb=0.05)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
x = torch.randint(0, 512, (2, 64), device="cuda")
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, x)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(f"step {step} time_ms {(time.perf_counter() - t0) * 1e3:.6f}", flush=True)
dist.destroy_process_group()
