"""A GPU-bound loop that never synchronizes until the end: its host runs ahead of the GPU
until CUDA's launch queue is full, then at the GPU's pace (runtime/device/launch_queue.py)."""
import sys
import time

import torch

m = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)]).cuda()
x = torch.randn(8192, 4096, device="cuda")
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 30):
    t0 = time.perf_counter()
    for _ in range(4):
        m(x).sum().backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} time_ms {(time.perf_counter() - t0) * 1e3:.3f}")
t0 = time.perf_counter()
torch.cuda.synchronize()
print(f"final_sync_ms {(time.perf_counter() - t0) * 1e3:.3f}")
