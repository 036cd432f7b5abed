"""`.cpu()` of a 64 MiB CUDA tensor (new host memory: fresh pages) against copy_ into a host tensor
made and touched earlier, a 4 MiB `.cpu()`, and a non-blocking `.to("cpu")` (pinned output, as a
CUDA build's _to_copy makes it); simulated times (tests/test_e2e.py)."""
import time

import torch

x = torch.randn(16 << 20, device="cuda")  # 64 MiB
dst = torch.empty(16 << 20)
dst.copy_(x)
torch.cuda.synchronize()
t0 = time.perf_counter()
x.cpu()
t1 = time.perf_counter()
dst.copy_(x)
t2 = time.perf_counter()
x[: 1 << 20].cpu()
t3 = time.perf_counter()
dst[: 1 << 20].copy_(x[: 1 << 20])
t4 = time.perf_counter()
y = x.to("cpu", non_blocking=True)
t5 = time.perf_counter()
torch.cuda.synchronize()
t6 = time.perf_counter()
print(f"TIMES_NS {int((t1 - t0) * 1e9)} {int((t2 - t1) * 1e9)} {int((t3 - t2) * 1e9)} {int((t4 - t3) * 1e9)} "
      f"{int((t5 - t4) * 1e9)} {int((t6 - t4) * 1e9)}")
print(f"NONBLOCKING_PINNED {y.is_pinned()}")
