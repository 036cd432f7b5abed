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
    return p


def run_loop(args, step_fn, meta: dict) -> None:
    prof = None
    if args.profile_dir:
        os.makedirs(args.profile_dir, exist_ok=True)
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            schedule=torch.profiler.schedule(wait=1, warmup=2, active=3, repeat=1),
            record_shapes=True,
            on_trace_ready=torch.profiler.tensorboard_trace_handler(args.profile_dir))
        prof.start()
    times = []
    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step_fn(step)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) * 1e3
        times.append(dt)
        print(f"step {step} time_ms {dt:.3f}", flush=True)
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()
    steady = sorted(times[3:]) if len(times) > 4 else sorted(times)
    meta = dict(meta, step_ms=times, median_steady_ms=steady[len(steady) // 2],
                peak_mem_bytes=torch.cuda.max_memory_allocated())
    print("RESULT " + json.dumps(meta), flush=True)
