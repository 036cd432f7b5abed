"""Small collectives of every kind carry real values between two ranks (tests/test_runtime_values.py)."""
import torch, torch.distributed as dist
import warnings
warnings.simplefilter("ignore", FutureWarning)
dist.init_process_group("nccl"); r = dist.get_rank(); n = dist.get_world_size(); torch.cuda.set_device(r)
inp = torch.arange(4.0, device="cuda") + 10 * r
out = torch.empty(2, device="cuda"); dist.reduce_scatter_tensor(out, inp); print("rs", out.tolist())
outs = [torch.empty(2, device="cuda") for _ in range(1)]
dist.reduce_scatter(outs[0], list(inp.chunk(n))); print("rs_list", outs[0].tolist())
ao = torch.empty(4, device="cuda"); dist.all_to_all_single(ao, inp); print("a2a", ao.tolist())
ao2 = torch.empty(4 if r == 0 else 4, device="cuda")
insz = [1, 3] if r == 0 else [3, 1]; outsz = [1, 3] if r == 0 else [3, 1]
ao2 = torch.empty(sum(outsz), device="cuda"); dist.all_to_all_single(ao2, inp, outsz, insz); print("a2a_uneven", ao2.tolist())
ol = [torch.empty(2, device="cuda") for _ in range(n)]; dist.all_to_all(ol, list(inp.chunk(n))); print("a2a_list", [t.tolist() for t in ol])
g = [torch.empty(4, device="cuda") for _ in range(n)] if r == 0 else None
dist.gather(inp, g, dst=0); print("gather", [t.tolist() for t in g] if g else None)
sc = torch.empty(2, device="cuda"); dist.scatter(sc, list(torch.arange(4.0, device="cuda").chunk(n)) if r == 0 else None, src=0); print("scatter", sc.tolist())
red = inp.clone(); dist.reduce(red, dst=0); print("reduce", red.tolist())
ag = [torch.empty(4, device="cuda") for _ in range(n)]; dist.all_gather(ag, inp); print("ag", [t.tolist() for t in ag])
agt = torch.empty(8, device="cuda"); dist.all_gather_into_tensor(agt, inp); print("agt", agt.tolist())
ar = inp.clone(); dist.all_reduce(ar, op=dist.ReduceOp.MAX); print("ar", ar.tolist())
b = inp.clone(); dist.broadcast(b, src=1); print("bc", b.tolist())
dist.destroy_process_group()
