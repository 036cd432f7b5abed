"""Probe of small-value tracking and parameter identity under phantora-prof."""
import weakref

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
before = list(model.parameters())
opt = torch.optim.AdamW(model.parameters())
names = {id(p): n for n, p in model.named_parameters()}
fin = [weakref.finalize(p, lambda: None) for p in before]
model.to("cuda")
after = list(model.parameters())
print("identity", all(a is b for a, b in zip(before, after)), all(p.is_cuda for p in opt.param_groups[0]["params"]),
      all(id(p) in names for p in after))
big = torch.randn(1024, 1024, device="cuda")
flag = torch.zeros(1, device="cuda")
flag += torch.isfinite(big.amax()).logical_and(torch.isfinite(big.amin())).logical_not()
overflow = flag.byte()
dist.all_reduce(overflow, op=dist.ReduceOp.MAX)
print("overflow", overflow.item())
n = torch.tensor([10 * (rank + 1)], device="cuda")
dist.all_reduce(n)
b = torch.tensor([rank + 5], device="cuda")
dist.broadcast(b, src=0)
g = torch.empty(2 * dist.get_world_size(), dtype=torch.int64, device="cuda")
dist.all_gather_into_tensor(g, torch.tensor([rank, rank * 7], device="cuda"))
print("sum", n.item(), "broadcast", b.item(), "gather", g.tolist(), "norm", torch.tensor([3.0, 4.0], device="cuda").norm().item())
dist.destroy_process_group()
