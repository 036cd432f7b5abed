"""Collective outputs freed without anyone waiting for them or reading them must not make
later, unrelated work wait. Launches N all-reduces (their outputs dropped unread), then
allocates and reads new tensors on the default stream while the all-reduces still run on
the communicator's stream, and prints how long the default stream took: host time only
(~15 us per op), unless some new tensor was mistaken for an all-reduce's output."""
import sys
import time

import torch
import torch.distributed as dist

n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
dist.init_process_group("nccl")
torch.cuda.set_device(dist.get_rank())
xs = [torch.ones(1 << 23, device="cuda") for _ in range(n)]  # 32 MiB each: ~0.1 ms all-reduces
torch.cuda.synchronize()
for x in xs:
    dist.all_reduce(x, async_op=True)  # the work handle is dropped: never waited for
del xs, x  # never read
t0 = time.perf_counter()
for _ in range(n):
    y = torch.empty(1 << 10, device="cuda")
    y.add_(1.0)
torch.cuda.current_stream().synchronize()  # the default stream only
dt = time.perf_counter() - t0
torch.cuda.synchronize()
total = time.perf_counter() - t0
print(f"rank {dist.get_rank()} default_stream_us {dt * 1e6:.1f} all_us {total * 1e6:.1f}", flush=True)
dist.destroy_process_group()
