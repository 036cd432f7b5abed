"""Why does an optimizer step cost ~2x more host time inside a training loop than repeated on its
own? (issue #15; session 34: ResNet-50's SGD step 2.0-2.4 ms in-model against ~1.1 ms isolated.)

    python tools/holdout/optimizer_context.py --gpt-dir DIR [--rounds 20] [--out FILE]

For each case (torchvision ResNet-50 batch 2 channels-last with SGD + momentum + weight decay,
HF GPT-2 batch 1 / seq 128 with foreach AdamW, the reference gpt.py at batch 1 / seq 64 with
fused AdamW) and each round, the host time (wall and thread CPU) of `opt.step()` / the forward:

- `step_inmodel`: right after the forward and backward, as a training loop runs it;
- `step_repeat`: called again at once (everything it touches is warm);
- `step_sync`: after `torch.cuda.synchronize()` (no launch queue ahead of it);
- `step_trash`: after a synchronize and a pass over a 512 MiB CPU buffer (cold CPU caches);
- `step_idle`: after a synchronize and 20 ms asleep (a host core that idled);
- `fwd_inmodel` / `fwd_repeat` / `fwd_trash`: the forward after the previous step, right after
  another forward, and after a synchronize and the cache-trashing pass.

Cases run interleaved, one round of each in turn, so a lease's changes of speed hit them alike.
Prints `OPTCTX {case: {condition: [wall ms per round]}, "cpu": {...}}`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import host_interleaved  # noqa: E402  (this folder's: the reference gpt.py's anchor, built as there)
import zoo  # noqa: E402  (this folder's model zoo)


def _resnet50(_gpt_dir):
    model = zoo._vision_model("tv_resnet50").cuda().to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 224, 224, device="cuda").contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (2,), device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    return (lambda: F.cross_entropy(model(x), y)), opt


def _hf_gpt2(_gpt_dir):
    a = zoo.parser().parse_args(["--model", "hf_gpt2", "--batch", "1", "--seq", "128"])
    model = zoo._hf_causal_lm("hf_gpt2", a).cuda()
    ids = torch.randint(0, model.config.vocab_size, (1, 128), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return (lambda: model(input_ids=ids, labels=ids).loss), opt


CASES = {"tv_resnet50": _resnet50, "hf_gpt2": _hf_gpt2, "gpt_b1": host_interleaved.gpt_b1_parts}
_TRASH = torch.ones(512 * 2**20 // 4)  # float32, 512 MiB


def _trash() -> None:
    torch.cuda.synchronize()
    _TRASH.add_(1.0)


def _timed(fn, out: dict, name: str):
    w0, c0 = time.perf_counter(), time.thread_time()
    r = fn()
    out["wall"].setdefault(name, []).append((time.perf_counter() - w0) * 1e3)
    out["cpu"].setdefault(name, []).append((time.thread_time() - c0) * 1e3)
    return r


def _round(forward, opt, rec: dict) -> None:
    loss = _timed(_autocast(forward), rec, "fwd_inmodel")
    loss.backward()
    _timed(opt.step, rec, "step_inmodel")
    _timed(opt.step, rec, "step_repeat")
    torch.cuda.synchronize()
    _timed(opt.step, rec, "step_sync")
    _trash()
    _timed(opt.step, rec, "step_trash")
    torch.cuda.synchronize()
    time.sleep(0.02)
    _timed(opt.step, rec, "step_idle")
    opt.zero_grad(set_to_none=True)
    del loss
    _autocast(forward)()
    _timed(_autocast(forward), rec, "fwd_repeat")  # each forward in its own autocast region, as
    _trash()                                       # in-model: no cached weight casts carried over
    _timed(_autocast(forward), rec, "fwd_trash")
    torch.cuda.synchronize()


def _autocast(forward):
    def run():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return forward()

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpt-dir", required=True)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    built = {name: make(a.gpt_dir) for name, make in CASES.items()}
    recs = {name: {"wall": {}, "cpu": {}} for name in built}
    for r in range(a.warmup + a.rounds):
        for name, (forward, opt) in built.items():
            rec = recs[name] if r >= a.warmup else {"wall": {}, "cpu": {}}
            _round(forward, opt, rec)
    for name, rec in recs.items():
        print(name, {k: round(statistics.median(v), 3) for k, v in rec["wall"].items()})
    print("OPTCTX " + json.dumps(recs))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(recs, f)


if __name__ == "__main__":
    main()
