"""A profiler stepped from inside a range, as capture_real.py steps it from an optimizer
post-hook: the window ends while `Optimizer.step#...` and an enclosing record_function are open."""
import sys

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.profiler import ProfilerActivity, profile, record_function, schedule

model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.AdamW(model.parameters(), fused=True)
x = torch.randn(32, 64, device="cuda")
prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
               on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1]))
register_optimizer_step_post_hook(lambda *_: prof.step())
prof.start()
for _ in range(4):
    with record_function("train_step"):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
prof.stop()
torch.cuda.synchronize()
