"""Host time of optimizer Python under simulation: fused step and zero_grad per parameter."""
import time

import torch

model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(10)]).cuda()  # 20 parameters
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
for _ in range(2):  # the first step also creates the optimizer state
    model(torch.randn(4, 32, device="cuda")).sum().backward()
    if _ == 0:
        opt.step()
t0 = time.perf_counter_ns()
opt.step()
t1 = time.perf_counter_ns()
opt.zero_grad()
t2 = time.perf_counter_ns()
print(f"step_ns {t1 - t0} zero_grad_ns {t2 - t1}")
