"""Simulated GPU memory seen from a script: views keep storage alive, in-place ops allocate
nothing, frees, caching, empty_cache, peaks, memory_stats; prints `RESULT {json}`, then (with
argv[1] == "oom") allocates more than the GPU has and dies with torch.OutOfMemoryError."""
import json
import sys

import torch

cuda = torch.cuda
out = {}


def mem():
    return cuda.memory_allocated()


a = torch.empty(1000, device="cuda")  # 4,000 B -> one 4,096 B block
out["small"] = mem()
v = a[10:20]
del a
out["view_keeps_storage"] = mem()
del v
out["view_freed"] = mem()

x = torch.zeros(256, 1024, device="cuda")  # 1 MiB, the largest small-pool block
before = mem()
x.add_(1)
x.mul_(2)
x.zero_()
out["inplace_delta"] = mem() - before
y = x * 2
out["outofplace_delta"] = mem() - before
del x, y

reserved = cuda.memory_reserved()
big = torch.empty(100 * 2**20, dtype=torch.uint8, device="cuda")
out["big_reserved_delta"] = cuda.memory_reserved() - reserved
del big
out["cached_after_free"] = cuda.memory_reserved() - reserved
cuda.empty_cache()
out["reserved_after_empty_cache"] = cuda.memory_reserved()

w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
base = mem()
loss = (w @ w).relu().sum()
out["forward_holds"] = mem() - base
loss.backward()
del loss
out["after_backward"] = mem() - base
cuda.reset_peak_memory_stats()
out["peak_after_reset"] = cuda.max_memory_allocated() - mem()
free, total = cuda.mem_get_info()
out["mem_get_info"] = [free, total]
out["stats_keys"] = sorted(cuda.memory_stats())
out["stats_allocated"] = cuda.memory_stats()["allocated_bytes.all.current"] == mem()
print("RESULT " + json.dumps(out), flush=True)

if len(sys.argv) > 1 and sys.argv[1] == "oom":
    keep = [torch.empty(30 * 2**30, dtype=torch.uint8, device="cuda") for _ in range(4)]
    print("not reached", len(keep))
