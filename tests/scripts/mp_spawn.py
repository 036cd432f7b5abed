"""A script that starts its own ranks with torch.multiprocessing.spawn (torch's DDP tutorial
pattern): `python mp_spawn.py [fail]`."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank: int, world: int, fail: bool) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64).cuda(), device_ids=[rank])
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    t = torch.tensor([rank + 1], device="cuda")
    dist.all_reduce(t)
    print(f"worker {rank} of {world} on {torch.cuda.current_device()}: sum {t.item()}", flush=True)
    if fail and rank == 1:
        raise ValueError("worker 1 failed on purpose")
    dist.destroy_process_group()


if __name__ == "__main__":
    print("parent starts", flush=True)
    mp.spawn(worker, args=(3, sys.argv[1:] == ["fail"]), nprocs=3, join=True)
    print("parent done", flush=True)
