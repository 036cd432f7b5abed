"""GradScaler on the simulated GPU: its scale and growth tracker step by step.

A model with a large layer (gradients without values, assumed finite) and a small one
(gradients with real values). At step INF_STEP the small layer's gradient is set to inf
after backward, as an overflow would: that step is skipped and the scale backs off."""
import sys

import torch
import torch.nn as nn

steps, inf_step = int(sys.argv[1]), int(sys.argv[2])
model = nn.Sequential(nn.Linear(1024, 1024), nn.Linear(1024, 4), nn.Linear(4, 4)).cuda()
small = model[2]
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda", init_scale=1024.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
for step in range(steps):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(torch.randn(8, 1024, device="cuda")).float().sum()
    scaler.scale(loss).backward()
    if step == inf_step:
        small.weight.grad.fill_(float("inf"))
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
    print(f"step {step} scale {scaler.get_scale()} tracker {int(scaler._growth_tracker.item())}")
