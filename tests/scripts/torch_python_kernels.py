"""Non-ATen ops whose CUDA kernel is torch's own Python (runtime/dispatch/cuda_dispatch.py,
python_cuda_kernel): FSDP2's copy-in / copy-out / chunk-cat ops, called as FSDP2 calls them,
profiled one step: test_op_tree reads what each ran."""
import sys

import torch
import torch.distributed.fsdp._fully_shard._fsdp_collectives  # noqa: F401  (defines the fsdp ops)
from torch.profiler import ProfilerActivity, profile, schedule

dev = "cuda"
inputs = [torch.randn(n, device=dev) for n in (1024, 3072, 4096)]
sizes = [t.numel() for t in inputs]
out = torch.empty(2 * sum(sizes), device=dev)
grads = [torch.randn(64, 32, device=dev), torch.randn(64, device=dev)]
chunked = torch.empty(2, (64 * 32 + 64) // 2, device=dev)


def step():
    inp, full = torch.ops.fsdp.all_gather_copy_in(inputs, out, sizes, sum(sizes), 1)
    parts = [torch.empty(2, n, device=dev) for n in sizes]
    torch.ops.fsdp.split_with_sizes_copy(full.view(2, -1), sizes, dim=1, out=parts)
    torch.ops.fsdp.chunk_cat(grads, 0, 2, out=chunked)
    torch.cuda.synchronize()


with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=schedule(wait=0, warmup=1, active=1),
             record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(2):
        step()
        prof.step()
