"""Launches GPU work on the default stream and a side stream and exits without synchronizing.

The run's simulated time must still cover the queued GPU work (argv[1] = number of matmuls).
"""
import sys

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
for _ in range(n):
    b = a @ a
with torch.cuda.stream(side):
    for _ in range(2 * n):
        c = a @ a
print("launched", flush=True)
