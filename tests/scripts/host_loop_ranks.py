"""Every rank runs 200 small in-place ops (host-bound) and prints the simulated time they took."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(64, device="cuda")
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(200):
    x.add_(1)
torch.cuda.synchronize()
print(f"rank {dist.get_rank()} loop_ms {(time.perf_counter() - t0) * 1e3:.4f}", flush=True)
dist.destroy_process_group()
