"""Failure cases, picked by argv[1]: mismatch (different sizes), missing (rank 1 skips a
collective), crash (rank 1 raises while rank 0 hangs)."""
import sys
import threading

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
case = sys.argv[1]
x = torch.empty(1024 if rank == 0 or case != "mismatch" else 2048, device="cuda")
dist.all_reduce(x)
if case == "missing" and rank == 0:
    dist.all_reduce(x)
if case == "crash":
    if rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    threading.Event().wait()  # hangs (really) until the launcher stops it
torch.cuda.synchronize()
print("done", rank, flush=True)
dist.destroy_process_group()
