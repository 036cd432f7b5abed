"""Two ranks: groups named by new_group(group_desc=...) keep their names in the trace,
with and without a collective on them."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
g = dist.new_group([0, 1], group_desc="my_tp_group")
dist.new_group([0, 1], group_desc="my_idle_group")  # no collective ever runs on it
x = torch.ones(1024, device="cuda")
dist.all_reduce(x, group=g)
torch.cuda.synchronize()
dist.destroy_process_group()
