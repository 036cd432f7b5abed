"""Reductions a CUDA build runs on a cast of their input (cost/ops.py reduction_input_dtype), and
ones it does not: a bool mask summed over a dim (read as int64), an int32 tensor summed whole (into
int64), a bf16 tensor summed into float32 (read as it is), a float32 mean (no cast)."""
import torch

x = torch.randn(64, 8, 4, 49, 96, device="cuda", dtype=torch.bfloat16)
mask = x > 0
counts = mask.sum(2, keepdim=True)
ints = torch.ones(4096, dtype=torch.int32, device="cuda").sum()
wide = x.sum(dtype=torch.float32)
mean = x.float().mean(1)
torch.cuda.synchronize()
print("dtypes", counts.dtype, ints.dtype, wide.dtype, mean.dtype)
