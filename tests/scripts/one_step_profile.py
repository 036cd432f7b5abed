"""Shared by the op-tree test scripts: profile one step (after one warm-up step) into a Chrome
trace, with shapes, as torch.profiler writes it on a real GPU."""
from torch.profiler import ProfilerActivity, profile, schedule


def profile_one_step(step, path: str) -> None:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=schedule(wait=0, warmup=1, active=1),
                 record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(2):
            step()
            prof.step()
