"""Does an op's host cost depend on what the host did just before it? (issue #15)

The host model prices an op by its name (and the Python between ops by its instructions), the
same wherever it runs. Measured here on this machine (2026-12-06, torch 2.13 CPU, a 2-core VM):
five small CPU ops took 8 us back to back, 20 us after 40 us of a plain arithmetic loop, 25 us
after 200 module calls and 51 us after 400: the same ops, 2.5-6x slower once the interpreter has
run for a while between them (predictors and caches then hold the interpreter's state, not the
ops'). If a GPU host shows the same, a training forward (module Python between ops) costs more
per op than the backward (ops back to back on autograd's thread in C++) and than ops timed
alone in a loop, as measured on the H200 and H100 leases (README, Host time).

For each kind of work between the ops (an arithmetic loop: instructions with no memory
footprint; nn.Module calls: framework objects; a walk over many dicts: memory footprint) and
each amount, it times one sequence of five small ops (add, mm, relu, view, layer_norm) after the
work, many times, and prints the median; the work's own time is printed beside it.

    python tools/holdout/op_warmth_probe.py --device cuda --json OUT.json

Plain PyTorch; nothing here is simulator-specific.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch
from torch import nn


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--repeats", type=int, default=2000)
    p.add_argument("--json", default=None, help="write the table as JSON here")
    return p


def main() -> None:
    args = _parser().parse_args()
    dev = torch.device(args.device)
    torch.set_num_threads(1)
    a, b = torch.randn(4, 4, device=dev), torch.randn(4, 4, device=dev)
    w, x = torch.randn(64, 64, device=dev), torch.randn(8, 64, device=dev)
    mods = [nn.Sequential(nn.Identity(), nn.Identity()) for _ in range(400)]
    objs = [{"name": f"p{i}", "shape": (i, i + 1), "meta": [i, str(i), (i,)]} for i in range(20000)]
    order = list(range(len(objs)))
    random.Random(0).shuffle(order)

    def arith(k: int) -> int:
        s = 0
        for i in range(k * 20):
            s += i * 3
        return s

    def modcalls(k: int) -> int:
        y = 0
        for m in mods[:k]:
            y = m(y)
        return y

    def walk(k: int) -> int:
        s = 0
        for i in order[:k * 20]:
            o = objs[i]
            s += len(o["name"]) + o["shape"][0]
        return s

    def ops() -> int:
        t0 = time.perf_counter_ns()
        torch.add(a, b)
        torch.mm(x, w)
        torch.relu(x)
        a.view(16)
        torch.layer_norm(x, (64,))
        return time.perf_counter_ns() - t0

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    rows = []
    for kind, work in (("arith", arith), ("modcalls", modcalls), ("walk", walk)):
        for k in (0, 2, 5, 10, 25, 50, 100, 200, 400):
            t_ops, t_work = [], []
            for r in range(args.repeats):
                if r % 200 == 0:
                    sync()  # keep the launch queue short: launches, not a full queue, are timed
                t0 = time.perf_counter_ns()
                work(k)
                t_work.append(time.perf_counter_ns() - t0)
                t_ops.append(ops())
            skip = args.repeats // 10
            row = {"kind": kind, "k": k, "work_us": round(statistics.median(t_work[skip:]) / 1e3, 2),
                   "ops_us": round(statistics.median(t_ops[skip:]) / 1e3, 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    sync()
    out = {"device": str(dev), "torch": torch.__version__, "rows": rows}
    if dev.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(0)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
