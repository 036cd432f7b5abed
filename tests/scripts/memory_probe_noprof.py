"""shared/reference/workloads/memory_probe.py without torch.profiler (which is slow on fake
CUDA): the GPT of gpt.py, `PHASE name allocated reserved max_allocated` after each phase of
three steps, then a MEMSTATS json line.  argv[1]: the reference workloads folder (gpt.py)."""
import json
import os
import sys

import torch

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "/work/shared/reference/workloads")
from gpt import GPT  # noqa: E402


def phase(name):
    torch.cuda.synchronize()
    print(f"PHASE {name} {torch.cuda.memory_allocated()} {torch.cuda.memory_reserved()} "
          f"{torch.cuda.max_memory_allocated()}", flush=True)


def main():
    steps = int(os.environ.get("PROBE_STEPS", "3"))
    dev = torch.device("cuda")
    phase("start")
    model = GPT(50304, 1024, 768, 12, 12).to(dev)
    phase("model")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    x = torch.randint(0, 50304, (8, 1024), device=dev)
    y = torch.randint(0, 50304, (8, 1024), device=dev)
    phase("data")
    for step in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        phase(f"forward{step}")
        loss.backward()
        phase(f"backward{step}")
        opt.step()
        phase(f"optimizer{step}")
        opt.zero_grad(set_to_none=True)
        phase(f"zero_grad{step}")
    print("MEMSTATS " + json.dumps(torch.cuda.memory_stats()), flush=True)


if __name__ == "__main__":
    main()
