"""Where a compiled step's peak memory comes from (issue #16): the slow test's two-block MLP
(tests/scripts/compiled.py), compiled or eager, its peak over the first step (which compiles,
and on a GPU autotunes Triton kernels) and over the steps after it (reset in between).

    python tools/holdout/compiled_peak.py [compiled|eager]        # real
    phantora-prof python tools/holdout/compiled_peak.py ...       # simulated

Prints `PEAK {json}`. Plain PyTorch; nothing here is simulator-specific.
"""
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d: int = 512):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.out(F.gelu(self.fc(self.ln(x)), approximate="tanh"))


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "compiled"
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block()).cuda()
    if mode == "compiled":
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(16, 256, 512, device="cuda")
    peaks = []
    for step in range(4):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        torch.cuda.reset_peak_memory_stats()
    print("PEAK " + json.dumps({"mode": mode, "per_step": peaks, "allocated_after": torch.cuda.memory_allocated()}))


if __name__ == "__main__":
    main()
