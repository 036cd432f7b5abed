"""Small point-to-point messages carry real values (tests/test_runtime_p2p_values.py).

What torch.distributed.pipelining does before its first step: a one-element vote passed from
stage to stage with send/recv, then activation metadata with send/recv_object_list (a size
tensor whose `.item()` sizes the receive buffer, then the pickled bytes); also `cat` of a
list of small tensors (send_object_list concatenates the sizes)."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
a = torch.tensor([3], dtype=torch.int64, device="cuda")
print("cat", torch.cat([a, a + 1]).tolist(), flush=True)
vote = torch.tensor([5 + rank], dtype=torch.int32, device="cuda")
if rank == 0:
    dist.send(vote, dst=1)
    back = torch.zeros(1, dtype=torch.int32, device="cuda")
    dist.recv(back, src=1)
    print("vote back", back.item(), flush=True)
else:
    got = torch.zeros(1, dtype=torch.int32, device="cuda")
    dist.recv(got, src=0)
    dist.send(got * vote, dst=0)
    print("vote got", got.item(), flush=True)
objs = [{"shape": (8, 2048, 256), "dtype": "bf16"}] if rank == 0 else [None]
if rank == 0:
    dist.send_object_list(objs, dst=1, device=torch.device("cuda", 0), use_batch=True)
else:
    dist.recv_object_list(objs, src=0, device=torch.device("cuda", 1), use_batch=True)
    print("object", objs[0], flush=True)
big = torch.ones(64 * 1024, device="cuda")  # above values.MAX_BYTES: timed, no values
if rank == 0:
    dist.send(big, dst=1)
else:
    dist.recv(big, src=0)
dist.destroy_process_group()
