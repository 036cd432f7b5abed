"""Host time of one DTensor op when its sharding propagation hits the cache and when it misses
(the cache cleared before each call): `hit`/`miss` lines, us per op. One rank under torchrun,
or under phantora-prof. Plain PyTorch."""
import os, time, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import distribute_tensor, Shard
dist.init_process_group("nccl"); torch.cuda.set_device(0)
mesh = init_device_mesh("cuda", (1,))
a = distribute_tensor(torch.randn(256, 64, device="cuda"), mesh, [Shard(0)])
b = distribute_tensor(torch.randn(256, 64, device="cuda"), mesh, [Shard(0)])
prop = torch.distributed.tensor.DTensor._op_dispatcher.sharding_propagator
# its own miss counter, not dtensor_prop_misses.count_misses: that one names each op
# (str(schema.op)), Python the timed loop below would pay on every miss (~8 us per op simulated)
n = [0]; orig = prop.propagate_op_sharding_non_cached
def counted(s): n[0] += 1; return orig(s)
prop.propagate_op_sharding_non_cached = counted
cache = prop.propagate_op_sharding
if type(cache).__name__ == "LocalLRUCache": prop.propagate_op_sharding = type(cache)(counted)
def clear():
    c = prop.propagate_op_sharding
    (getattr(c, "cache_clear", None) or (lambda: None))()
    f = getattr(torch._C, "_clear_DTensor_sharding_propagator_cache", None)
    if f is not None: f()
for mode in ("hit", "miss"):
    for it in range(3):
        torch.cuda.synchronize(); n[0] = 0
        t = time.perf_counter()
        for i in range(50):
            if mode == "miss": clear()
            a.addcdiv_(a, b, value=0.5)
        torch.cuda.synchronize()
        print(f"{mode} {1e6 * (time.perf_counter() - t) / 50:.1f} us/op misses {n[0]}", flush=True)
