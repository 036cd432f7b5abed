"""Host (CPU) collectives with real values, for runs where some ranks are mirrored: objects,
a CPU all-reduce, a CPU all-gather, and a small device all-reduce whose value is read."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
objs = [None] * world
dist.all_gather_object(objs, {"rank": rank, "name": f"r{rank}"})
print("all_gather_object", objs, flush=True)
box = [f"from{rank}", rank * 10] if rank == 0 else [None, None]
dist.broadcast_object_list(box, src=0)
print("broadcast_object_list", box, flush=True)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print("cpu_all_reduce", t.item(), flush=True)
parts = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
dist.all_gather(parts, torch.tensor([rank, 7]))
print("cpu_all_gather", [p.tolist() for p in parts], flush=True)
g = torch.ones(1, device="cuda") * (rank + 1)
dist.all_reduce(g)
print("device_all_reduce", g.item(), flush=True)
dist.destroy_process_group()
