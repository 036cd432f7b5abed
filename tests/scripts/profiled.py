"""A script that profiles itself with torch.profiler, as many training scripts do."""
import os
import sys

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

out = sys.argv[1]
model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
x = torch.randn(64, 256, device="cuda")


@record_function("decorated_loss")
def loss_fn(y):
    return y.float().pow(2).mean()


def step():
    with record_function("forward"):
        with record_function("inner"):
            y = model(x)
        loss = loss_fn(y)
    with record_function("backward"):
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
             schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
             on_trace_ready=tensorboard_trace_handler(out, worker_name="worker0"),
             record_shapes=True) as prof:
    for i in range(10):
        step()
        prof.step()
table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=8)
print(table)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p2:
    step()
    torch.cuda.synchronize()
p2.export_chrome_trace(os.path.join(out, "plain.json"))
print("files", sorted(os.listdir(out)))
