"""One timed all-reduce of 64 MiB across every rank; prints the simulated time."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(16 << 20, device="cuda")
dist.all_reduce(x)  # warm-up: the communicator
torch.cuda.synchronize()
t0 = time.perf_counter()
dist.all_reduce(x)
torch.cuda.synchronize()
print(f"all_reduce_ms {(time.perf_counter() - t0) * 1e3:.4f}", flush=True)
dist.destroy_process_group()
