"""Host time per phase of the TP example's model with and without DTensor, one GPU (issue #15).

    torchrun --nproc-per-node 1 tools/holdout/dtensor_overhead.py --mode tp --layers 4
    phantora-prof --nproc-per-node 1 torchrun --nproc-per-node 1 tools/holdout/dtensor_overhead.py ...

The same GPT (examples/common.tensor_parallel_gpt, bf16 autocast, for-loop AdamW as
examples/tp/train.py) run plain (`--mode plain`) or with every block parallelized over a
one-GPU mesh (`--mode tp`). Host-bound at these sizes, so perf_counter read between the
phases (no synchronize inside a step) gives the host's time for the forward, the backward
call and the optimizer step; under phantora-prof it gives the simulated host clock's. The
difference tp - plain is what DTensor adds in context, per phase and (over --layers) per
block, without a profiler's inflation. Prints `OVERHEAD {json}`: medians over steps 3.. in ms.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gpt"))
import common


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("plain", "tp", "fsdp"), default="tp",
                   help="fsdp: fully_shard per block and the model (FSDP2, no mixed precision) over the mesh")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--no-autocast", action="store_true")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: the model and a gloo mesh on the CPU (no launches, no NCCL; no autocast): what DTensor's "
                        "own Python and C++ cost in context without CUDA, to hold against the cuda run (torch threads 1)")
    p.add_argument("--spy", metavar="FILE", help="sample steps 3.. with py-spy (Python frames, lines; raw output to FILE)")
    p.add_argument("--perf-ctl", metavar="FIFO",
                   help="perf stat's control fifo (perf stat -D -1 --control=fifo:FIFO): counters on from step 3 "
                        "to the end, so start-up stays out")
    p.add_argument("--time-ops", action="store_true",
                   help="time each forward layer_norm / SDPA / gelu call (perf_counter_ns around it): its cost in context")
    p.add_argument("--spy-native", action="store_true",
                   help="with --spy: native (C/C++) frames too; py-spy then stops the process per sample (blocking, 100 Hz)")
    p.add_argument("--counters", action="store_true",
                   help="CPU hardware counters per phase over steps 3.. (hwcounters.py, perf_event_open; all threads)")
    p.add_argument("--gc", choices=("on", "off"), default="on", help="off: gc.disable() after step 2")
    p.add_argument("--profile", metavar="FILE",
                   help="torch.profiler over steps 3 and 4 (CPU activity, and CUDA on the GPU), exported as a "
                        "Chrome trace to FILE: each aten op's range holds its DTensor dispatch, to hold a real "
                        "run's ops against a simulated one's (tools/holdout/op_ranges.py)")
    args = p.parse_args()
    on_cpu = args.device == "cpu"
    if on_cpu:
        torch.set_num_threads(1)
        dist.init_process_group("gloo")
        args.no_autocast = True
    else:
        common.local_device()
    op_ns: dict[str, list[int]] = {}
    if args.time_ops:  # before the model's module imports F's functions: they call F.<name> at run time
        import torch.nn.functional as F

        def timer(name, fn):
            def timed(*a, **kw):
                t0 = time.perf_counter_ns()
                r = fn(*a, **kw)
                op_ns.setdefault(name, []).append(time.perf_counter_ns() - t0)
                return r
            return timed
        for name in ("layer_norm", "scaled_dot_product_attention", "gelu", "linear"):
            setattr(F, name, timer(name, getattr(F, name)))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    mesh = init_device_mesh(args.device, (int(os.environ.get("WORLD_SIZE", "1")),))
    torch.manual_seed(0)
    GPT = common.tensor_parallel_gpt()
    model = GPT(args.vocab, args.seq, args.dim, args.heads, args.layers).to(args.device)
    if args.mode == "tp":
        for block in model.blocks:
            parallelize_module(block, mesh, common.megatron_plan())
    elif args.mode == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)
    x = torch.randint(0, args.vocab, (args.batch, args.seq), device=args.device)
    sync = (lambda: None) if on_cpu else torch.cuda.synchronize
    phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": [], "step": []}
    gc_ms = [0.0, 0.0, 0.0]
    gc_n = [0, 0, 0]
    gc_t0 = [0.0]
    counters = None
    phase_counts: dict[str, dict[str, float]] = {}

    def count(phase: str, before: dict[str, float], after: dict[str, float]) -> None:
        acc = phase_counts.setdefault(phase, {})
        for k, v in after.items():
            acc[k] = acc.get(k, 0.0) + v - before[k]

    def on_gc(phase: str, info: dict) -> None:  # time in the collector per generation
        if phase == "start":
            gc_t0[0] = time.perf_counter()
        else:
            gc_ms[info["generation"]] += (time.perf_counter() - gc_t0[0]) * 1e3
            gc_n[info["generation"]] += 1

    prof = None

    def phase(name: str):  # a named range per phase in the profile (nothing without --profile)
        return torch.profiler.record_function("phase_" + name) if args.profile else contextlib.nullcontext()

    for i in range(args.steps):
        if args.profile and i == 3:
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CPU] + ([] if on_cpu else [ProfilerActivity.CUDA])
            prof = profile(activities=acts)
            prof.__enter__()
        if args.profile and i == 5:
            prof.__exit__(None, None, None)
            prof.export_chrome_trace(args.profile)
        if i == 3:
            if args.perf_ctl:
                with open(args.perf_ctl, "w") as ctl:
                    ctl.write("enable\n")
            if args.spy:  # attached after the warm-up steps, so step 0's first calls stay out
                how = ["--rate", "100", "--native"] if args.spy_native else ["--rate", "250", "--nonblocking"]
                spy = subprocess.Popen(["py-spy", "record", "--pid", str(os.getpid()), *how,
                                        "--threads", "--format", "raw", "-o", args.spy])
                time.sleep(2.0)
            gc.callbacks.append(on_gc)
            if args.counters:
                sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
                from hwcounters import ThreadCounters
                counters = ThreadCounters.open()
                if counters is None:
                    print("COUNTERS unavailable: " + ThreadCounters.why_not, flush=True)
                else:
                    counters.enable()
            if args.gc == "off":
                gc.disable()
        sync()
        c0 = counters.read() if counters else None
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not args.no_autocast), phase("forward"):
            loss = model(x, x)
        t1 = time.perf_counter()
        c1 = counters.read() if counters else None
        with phase("backward"):
            loss.backward()
        t2 = time.perf_counter()
        c2 = counters.read() if counters else None
        with phase("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        if counters:
            c3 = counters.read()
            for name, a, b in (("forward", c0, c1), ("backward", c1, c2), ("optimizer", c2, c3)):
                count(name, a, b)
        sync()
        t4 = time.perf_counter()
        if i >= 3:
            for k, v in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t0)):
                phases[k].append(v * 1e3)
    if args.perf_ctl:
        with open(args.perf_ctl, "w") as ctl:
            ctl.write("disable\n")
    if args.spy:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    if dist.get_rank() == 0:
        med = {k: round(statistics.median(v), 3) for k, v in phases.items()}
        n = args.steps - 3
        print("OVERHEAD " + json.dumps({"mode": args.mode, "layers": args.layers, "device": args.device, "gc": args.gc, **med,
                                        "gc_ms_per_step": [round(v / n, 3) for v in gc_ms],
                                        "gc_collections_per_step": [round(v / n, 2) for v in gc_n],
                                        "gc_tracked": len(gc.get_objects()),
                                        "counters_per_step": {ph: {k: round(v / n) for k, v in cs.items()}
                                                              for ph, cs in phase_counts.items()},
                                        "op_us": {k: round(statistics.median(v[len(v) // 4:]) / 1e3, 2)
                                                  for k, v in op_ns.items()}}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
