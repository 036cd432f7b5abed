"""A tiny GPT step loop used by the end-to-end tests (imports the example's model)."""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gpt"))
from train import GPT  # noqa: E402

model = GPT(vocab=512, seq=64, dim=64, heads=4, layers=2).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
print("params", sum(p.numel() for p in model.parameters()))
x = torch.randint(0, 512, (2, 64), device="cuda")
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, x)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(f"step {step} time_ms {(time.perf_counter() - t0) * 1e3:.3f} loss {loss.item():.3f}")
print("peak", torch.cuda.max_memory_allocated())
