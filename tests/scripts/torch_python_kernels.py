"""Non-ATen ops whose CUDA kernel is torch's own Python (runtime/dispatch/cuda_dispatch.py,
python_cuda_kernel): FSDP2's copy-in / copy-out / chunk-cat ops, called as FSDP2 calls them,
profiled one step: test_op_tree reads what each ran."""
import sys

import torch
import torch.distributed.fsdp._fully_shard._fsdp_collectives  # noqa: F401  (defines the fsdp ops)
from one_step_profile import profile_one_step

dev = "cuda"
inputs = [torch.randn(n, device=dev) for n in (1024, 3072, 4096)]
sizes = [t.numel() for t in inputs]
out = torch.empty(2 * sum(sizes), device=dev)
grads = [torch.randn(64, 32, device=dev), torch.randn(64, device=dev)]
chunked = torch.empty(2, (64 * 32 + 64) // 2, device=dev)


def step():
    _, full = torch.ops.fsdp.all_gather_copy_in(inputs, out, sizes, sum(sizes), 1)
    parts = [torch.empty(2, n, device=dev) for n in sizes]
    torch.ops.fsdp.split_with_sizes_copy(full.view(2, -1), sizes, dim=1, out=parts)
    torch.ops.fsdp.chunk_cat(grads, 0, 2, out=chunked)
    torch.cuda.synchronize()


profile_one_step(step, sys.argv[1])
