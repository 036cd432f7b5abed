"""Collectives' semantics under phantora-prof: object/CPU collectives carry real values,
CUDA collectives give outputs of the right shapes, sub-groups know their members.

`host-only`: stop after the collectives whose values are read (objects, CPU tensors, a small
device all-reduce), before the point-to-point part: for runs where some ranks are mirrored."""
import os
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dev = torch.device("cuda", torch.cuda.current_device())
print(f"backend {dist.get_backend()} rank {rank} world {world} device {dev}", flush=True)

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
g = torch.ones(1, device=dev) * (rank + 1)
dist.all_reduce(g)
print("device_all_reduce", g.item(), flush=True)
if "host-only" in sys.argv[1:]:
    dist.destroy_process_group()
    sys.exit(0)

x = torch.empty(1024, device=dev)
out = torch.empty(1024 * world, device=dev)
dist.all_gather_into_tensor(out, x)
rs = torch.empty(1024 // world, device=dev)
dist.reduce_scatter_tensor(rs, x)
gathered = [torch.empty(1024, device=dev) for _ in range(world)]
dist.all_gather(gathered, x)
a2a = torch.empty(1024, device=dev)
dist.all_to_all_single(a2a, x)
dist.broadcast(x, src=0)
work = dist.all_reduce(x, async_op=True)
work.wait()
print("shapes", tuple(out.shape), tuple(rs.shape), len(gathered), tuple(a2a.shape), work.is_completed(), flush=True)
if world >= 2:
    if rank == 0:
        dist.send(x, dst=1)
    elif rank == 1:
        dist.recv(x, src=0)
    sub = dist.new_group([0, 1])
    if rank in (0, 1):
        dist.all_reduce(x, group=sub)
        print("subgroup", dist.get_process_group_ranks(sub), dist.get_rank(sub), flush=True)
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(2):
    y = x * 2
    dist.all_reduce(y)
torch.cuda.synchronize()
print(f"timed_ms {(time.perf_counter() - t0) * 1e3:.6f}", flush=True)
dist.barrier()
dist.destroy_process_group()
