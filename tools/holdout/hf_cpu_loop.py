"""A tiny HF transformers GPT-2's training step on the CPU (issue #15): third-party model code
(transformers' modules, not torch's) for tools/holdout/python_rates.py's cost per instruction.

    python tools/holdout/hf_cpu_loop.py --steps 40               # prints HFLOOP {"step_ms": ...}
    python tools/holdout/hf_cpu_loop.py --steps 300 --spy FILE   # py-spy (native frames, 100 Hz) from step 3
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--spy", metavar="FILE")
    a = p.parse_args()
    torch.set_num_threads(1)
    if os.environ.get("HF_NO_TORCHVISION"):  # a broken torchvision install (this repository's CI venv)
        import sys
        sys.modules["torchvision"] = None
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=4, n_embd=64, n_head=4, vocab_size=512, n_positions=64,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    x = torch.randint(0, 512, (2, 16))
    spy = None
    times = []
    for i in range(a.steps):
        if i == 3 and a.spy:
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(os.getpid()), "--rate", "100", "--native",
                                    "--format", "raw", "-o", a.spy])
            time.sleep(2.0)
        t0 = time.perf_counter()
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    print("HFLOOP " + json.dumps({"step_ms": round(statistics.median(times), 3)}), flush=True)


if __name__ == "__main__":
    main()
