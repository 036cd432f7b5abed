"""Runs until it is stopped: GEMMs, a sync and a line every 20 of them. Writes its pid to
DIR/pid.RANK first (so a test can check that no rank process is left)."""
import os
import sys

import torch

out = sys.argv[1]
with open(os.path.join(out, f"pid.{os.environ.get('RANK', '0')}"), "w") as f:
    f.write(str(os.getpid()))
x = torch.randn(2048, 2048, device="cuda")
i = 0
while True:
    y = x @ x
    if i % 20 == 0:
        torch.cuda.synchronize()
        print("iter", i, flush=True)
    i += 1
