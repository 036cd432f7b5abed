"""Two process groups' all-reduces in flight at once on the same two GPUs, and a GEMM beside
them (tests/test_contention.py)."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
other = dist.new_group([0, 1])
x = torch.empty(64 << 18, device="cuda")  # 64 MiB
y = torch.empty(64 << 18, device="cuda")
a = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)
a @ a  # alone
torch.cuda.synchronize()
for _ in range(2):
    w1 = dist.all_reduce(x, async_op=True)
    w2 = dist.all_reduce(y, group=other, async_op=True)
    a @ a  # beside the NCCL kernels
    w1.wait()
    w2.wait()
    torch.cuda.synchronize()
dist.destroy_process_group()
