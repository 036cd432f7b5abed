"""Python calls, C calls and aten ops of one training forward of each host-bound zoo case (compare.py
HOST_BOUND), counted on this machine's CPU (sys.setprofile; a dispatch mode counts the ops): the
Python path is the GPU run's but for device checks, and CUDA autocast's casts are not there.

    python tools/holdout/forward_counts.py [CASE,CASE...]     # writes /tmp/fwdcounts.json

Session 33 set these counts beside the host-bound runs' per-phase times (real_h200/session33/
host/): no count, nor two together, explains the simulated forward's shortfall (leave-one-out
mean |error| of the forward 24-31%).
"""
import json, sys, time
import torch
from torch.utils._python_dispatch import TorchDispatchMode
sys.path.insert(0, "tools/holdout")
import zoo, compare
captured = {}
def fake_train_step(forward, opt, loss_of=lambda o: o):
    captured["f"] = forward
    return lambda i: None
zoo._train_step = fake_train_step
zoo.run_loop = lambda a, step, meta: None

class Ops(TorchDispatchMode):
    n = 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        Ops.n += 1
        return func(*args, **(kwargs or {}))

out = {}
for case in (sys.argv[1].split(",") if len(sys.argv) > 1 else compare.HOST_BOUND):
    sys.argv = ["zoo.py"] + compare.CASES[case][1] + ["--device", "cpu"]
    torch.manual_seed(0)
    zoo.main()
    f = captured["f"]
    f(); f()
    counts = {"call": 0, "c_call": 0}
    def prof(frame, event, arg):
        if event in counts:
            counts[event] += 1
    t0 = time.perf_counter()
    sys.setprofile(prof)
    f()
    sys.setprofile(None)
    Ops.n = 0
    with Ops():
        f()
    out[case] = {"py_calls": counts["call"], "c_calls": counts["c_call"], "aten_ops": Ops.n}
    print(case, out[case], flush=True)
json.dump(out, open("/tmp/fwdcounts.json", "w"), indent=1)
