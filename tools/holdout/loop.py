"""Step loop shared by the held-out workloads: plain PyTorch, nothing simulator-specific.

Prints `step N time_ms X` per step (perf_counter around a synchronized step, as training
scripts time themselves) and a final `RESULT {json}` with the steady-state median, like the
reference workloads in ../shared/reference/workloads, so real and simulated runs are read
the same way.
"""
import argparse
import json
import os
import time

import torch


def base_parser(desc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=desc)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--profile-dir", default=None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--host-probe", action="store_true",
                   help="also print the host (CPU) time of each phase: forward, backward, optimizer")
    return p


class HostProbe:
    """Host-side phase times without synchronizing: perf_counter at the entry and exit of
    Tensor.backward and Optimizer.step. The host runs ahead of the GPU, so these are the
    times the CPU spends issuing work (plus any wait the phase itself forces)."""

    def __init__(self):
        self.marks: dict[str, float] = {}
        backward = torch.Tensor.backward
        probe = self

        def timed_backward(t, *a, **k):
            probe.marks.setdefault("bwd0", time.perf_counter())
            r = backward(t, *a, **k)
            probe.marks["bwd1"] = time.perf_counter()
            return r

        torch.Tensor.backward = timed_backward
        # Optimizer.step is wrapped per subclass: the global step hooks see every optimizer
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        def pre(*_):
            probe.marks.setdefault("opt0", time.perf_counter())

        def post(*_):
            probe.marks["opt1"] = time.perf_counter()

        register_optimizer_step_pre_hook(pre)
        register_optimizer_step_post_hook(post)

    def phases(self, t0: float, t1: float) -> str:
        m = self.marks
        b0, b1 = m.get("bwd0", t0), m.get("bwd1", t0)
        o0, o1 = m.get("opt0", b1), m.get("opt1", b1)
        self.marks = {}
        return (f"host_ms fwd {(b0 - t0) * 1e3:.3f} bwd {(b1 - b0) * 1e3:.3f} mid {(o0 - b1) * 1e3:.3f} "
                f"opt {(o1 - o0) * 1e3:.3f} rest {(t1 - o1) * 1e3:.3f} total {(t1 - t0) * 1e3:.3f}")


def run_loop(args, step_fn, meta: dict) -> None:
    """Time `args.steps` steps, print them and the RESULT line; with --profile-dir, then profile
    three more steps (one warm-up, two recorded) into DIR. The profiled steps come after the
    timed ones so that the profiler's host overhead never enters the step times."""
    probe = HostProbe() if getattr(args, "host_probe", False) else None
    times = []
    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step_fn(step)
        t_host = time.perf_counter()
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) * 1e3
        times.append(dt)
        print(f"step {step} time_ms {dt:.3f}", flush=True)
        if probe is not None:
            print(f"step {step} {probe.phases(t0, t_host)}", flush=True)
    steady = sorted(times[3:]) if len(times) > 4 else sorted(times)
    meta = dict(meta, step_ms=times, median_steady_ms=steady[len(steady) // 2],
                peak_mem_bytes=torch.cuda.max_memory_allocated())
    print("RESULT " + json.dumps(meta), flush=True)
    if args.profile_dir:
        os.makedirs(args.profile_dir, exist_ok=True)
        with torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                schedule=torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1),
                record_shapes=True,
                on_trace_ready=torch.profiler.tensorboard_trace_handler(args.profile_dir, use_gzip=True)) as prof:
            for step in range(args.steps, args.steps + 3):
                step_fn(step)
                prof.step()
        torch.cuda.synchronize()
