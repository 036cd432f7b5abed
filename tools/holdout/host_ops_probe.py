"""Host time of single eager ops on the GPU, unprofiled, in one process (issue #15).

    python tools/holdout/host_ops_probe.py [--out FILE.json]        # on the GPU machine
    phantora-prof --no-trace python tools/holdout/host_ops_probe.py  # the same, simulated

Plain PyTorch. Each case calls one op (or a short module, an optimizer step, a small training step) in a loop of 100 calls at shapes
small enough that the GPU never holds the host back, and reports the host's microseconds per
call (perf_counter around the loop, then a synchronize outside it; median of 7 rounds). Run the
same script under the simulator to read off, case by case, how the per-op host model prices
what the real host spends: the profiled traces the model was fitted on inflate every op, and
a real run's unprofiled ops can only be compared as whole phases otherwise. The reference
`gpt.py`'s own layers (bf16 autocast, batch 1 x 64) are cases too, so the small-model ops can
be held against the workload the host profile was fitted to on the same host.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


def cases(dev: str) -> dict:
    g = torch.Generator(device="cpu").manual_seed(0)

    def r(*shape, grad=False, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dev, dtype).requires_grad_(grad)

    x = r(64, 256)
    w, b = r(1024, 256, grad=True), r(1024, grad=True)
    wn, bn = r(1024, 256), r(1024)
    img = r(32, 3, 64, 64)
    cw, cb = r(32, 3, 3, 3, grad=True), r(32, grad=True)
    ln = nn.LayerNorm(256).to(dev)
    emb = nn.Embedding(8192, 256).to(dev)
    ids = torch.randint(0, 8192, (16, 64), device=dev)
    logits, tgt = r(64, 1000, grad=True), torch.randint(0, 1000, (64,), device=dev)
    h = r(64, 768)
    qkv = nn.Linear(768, 2304).to(dev)
    big = r(64, 1024)
    out = {
        "linear_fp32_grad": lambda: F.linear(x, w, b),
        "linear_fp32_nograd": lambda: F.linear(x, wn, bn),
        "mm_fp32": lambda: x @ wn.t(),
        "conv2d_fp32_grad": lambda: F.conv2d(img, cw, cb, 2, 1),
        "relu": lambda: F.relu(big),
        "add": lambda: big + big,
        "mul_scalar": lambda: big * 0.5,
        "add_inplace": lambda: big.add_(1e-9),
        "layer_norm_grad": lambda: ln(x),
        "embedding_grad": lambda: emb(ids),
        "cross_entropy_grad": lambda: F.cross_entropy(logits, tgt),
        "to_half": lambda: big.to(torch.float16),
        "view": lambda: big.view(-1),
        "transpose": lambda: big.t(),
        "empty": lambda: torch.empty(64, 1024, device=dev),
        "linear_bf16_autocast_gpt": lambda: _autocast(lambda: qkv(h)),
        "linear_fp32_gpt_shape": lambda: qkv(h),
    }
    # backward of one small op chain: forward + backward, minus the forward alone (same case names + _bwd)
    out["linear_fwd_bwd"] = lambda: F.linear(x, w, b).sum().backward()
    out["sum_only"] = lambda: F.linear(x, w, b).sum()
    out.update(step_cases(dev, r))
    out.update(copy_cases(dev))
    out.update(sequence_cases(dev, r))
    out.update(gpt_cases(dev))
    return out


# cases whose one call launches hundreds of kernels: fewer calls per round, so that a busy round
# stays within CUDA's launch queue (1,022 launches) and behind the GPU sleep
CALLS = {"gpt_b1_forward": 2, "gpt_b8_forward": 2, "gpt_b1_forward_nograd": 2}


def gpt_cases(dev: str) -> dict:
    """The reference gpt.py's training forward at batch 1 x 64 (bf16 autocast), where its
    folder (the device scripts' tools/holdout/_wl) is present."""
    import os
    import sys

    wl = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_wl")
    if not os.path.exists(os.path.join(wl, "gpt.py")):
        return {}
    sys.path.insert(0, wl)
    from gpt import GPT

    model = GPT(50304, 1024, 768, 12, 12).to(dev)
    x = torch.randint(0, 50304, (1, 64), device=dev)
    y = torch.randint(0, 50304, (1, 64), device=dev)
    x8 = torch.randint(0, 50304, (8, 1024), device=dev)
    y8 = torch.randint(0, 50304, (8, 1024), device=dev)

    def nograd():
        with torch.no_grad():
            return _autocast(lambda: model(x, y))
    # batch 8 x 1024: the host's time for the same ops at the reference step's sizes (its GPU work
    # per forward, ~7.5 ms, runs behind it; two calls stay within the launch queue)
    return {"gpt_b1_forward": lambda: _autocast(lambda: model(x, y)),
            "gpt_b8_forward": lambda: _autocast(lambda: model(x8, y8)),
            "gpt_b1_forward_nograd": nograd}


def copy_cases(dev: str) -> dict:
    """Host-to-device copies from pageable and pinned memory, small to large (a batch's `.cuda()`)."""
    out = {}
    for kib in (8, 64, 1024, 8192):
        src = torch.randn(kib * 256)
        out[f"h2d_pageable_{kib}k"] = lambda src=src: src.to(dev)
        pinned = src.pin_memory()
        out[f"h2d_pinned_{kib}k"] = lambda pinned=pinned: pinned.to(dev, non_blocking=True)
    return out


UNARY = ("relu", "sigmoid", "tanh", "exp", "log1p", "sqrt", "neg", "abs", "sin", "cos", "floor", "ceil",
         "round", "trunc", "reciprocal", "rsqrt")


def sequence_cases(dev: str, r) -> dict:
    """One op repeated against sixteen different ops in turn (per op): how much more an op costs
    when the ops around it differ, as in a model's step, than in a loop of itself."""
    x = r(64, 64).abs() + 1
    fns = [getattr(torch, name) for name in UNARY]

    def varied():
        for fn in fns:
            fn(x)

    def same():
        for _ in fns:
            torch.relu(x)
    return {"sequence_same_x16": same, "sequence_varied_x16": varied}


def step_cases(dev: str, r) -> dict:
    """The per-step work of a small training loop beside its model's ops: the backward call
    (handing the graph to autograd's device thread and waiting for it), reading a value (a sync),
    optimizer steps and their helpers over a few parameters, and a whole small step."""
    s = r(1, grad=True)
    small = r(64, 64)
    out = {
        "backward_scalar": lambda: (s * 2).sum().backward(),
        "item": lambda: small.sum().item(),
        "synchronize": torch.cuda.synchronize,
    }
    for n in (4, 16):
        params = [r(256, 256, grad=True) for _ in range(n)]
        for p in params:
            p.grad = torch.ones_like(p)
        sgd = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
        adamw = torch.optim.AdamW(params, lr=1e-6)
        out[f"sgd_momentum_step_{n}"] = sgd.step
        out[f"adamw_foreach_step_{n}"] = adamw.step
        out[f"clip_grad_norm_{n}"] = lambda params=params: torch.nn.utils.clip_grad_norm_(params, 1e9)

        def zero(params=params, opt=sgd):
            opt.zero_grad(set_to_none=True)
            for p in params:
                p.grad = None
        out[f"zero_grad_{n}"] = zero
    mlp = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev)
    opt = torch.optim.SGD(mlp.parameters(), lr=1e-3, momentum=0.9)
    xb, yb = r(64, 256), torch.randint(0, 10, (64,), device=dev)

    def mlp_step(read: bool = False):
        loss = F.cross_entropy(mlp(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if read:
            loss.item()
    out["mlp_step"] = mlp_step
    out["mlp_step_item"] = lambda: mlp_step(True)
    return out


def _autocast(fn):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return fn()


def measure(fn, calls: int = 100, rounds: int = 7, busy: bool = False) -> float:
    """Host us per call, median over rounds. `busy`: each round's launches queue behind a long
    GPU sleep (as in a GPU-bound step, where the host runs ahead of a busy GPU), instead of
    reaching an idle GPU (a host-bound step)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(rounds):
        if busy:
            torch.cuda._sleep(BUSY_CYCLES)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) * 1e6 / calls)
        torch.cuda.synchronize()
    return statistics.median(per)


BUSY_CYCLES = 200_000_000  # ~0.1 s of GPU sleep: longer than any round here


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    p.add_argument("--busy", action="store_true", help="also time each case behind a busy GPU (not under the simulator)")
    a = p.parse_args()
    res, busy = {}, {}
    for name, fn in cases("cuda").items():
        calls = CALLS.get(name, 100)
        res[name] = round(measure(fn, calls), 2)
        line = f"{name:28s} {res[name]:8.2f} us"
        if a.busy and name not in ("item", "synchronize", "mlp_step_item"):  # these wait for the GPU
            busy[name] = round(measure(fn, calls, busy=True), 2)
            line += f"  busy GPU {busy[name]:8.2f} us"
        print(line, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"us_per_call": res, "us_per_call_busy_gpu": busy, "torch": torch.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
