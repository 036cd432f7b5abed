"""Where the host's time goes inside the reference gpt.py's training forward (issue #15), unprofiled.

    python tools/holdout/forward_timeline.py [--batch 8 --seq 1024]        # real
    phantora-prof --no-trace python tools/holdout/forward_timeline.py ...   # simulated

Plain PyTorch. Forward pre-hooks on the embedding, each block, the final norm and the head read
the host clock (perf_counter) as the forward reaches them; the loss and the backward call too.
Per segment it prints the host's milliseconds (median of 8 steps after 3 warm-up steps) and, from
CUDA events recorded at the same points, when the GPU finished each segment relative to the host
reaching its end: a GPU that lags shows how far the host runs ahead. Run on a real GPU and under
the simulator, the two tables say which segments the per-op host table prices short or long.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=11)
    a = p.parse_args()
    sys.path.insert(0, os.path.join(HERE, "_wl"))
    from gpt import GPT

    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT(50304, a.seq, 768, 12, 12).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    x = torch.randint(0, 50304, (a.batch, a.seq), device="cuda")
    y = torch.randint(0, 50304, (a.batch, a.seq), device="cuda")
    marks: list[tuple[str, float, torch.cuda.Event]] = []

    def mark(name: str) -> None:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        marks.append((name, time.perf_counter(), ev))

    points = [("wte", model.wte)] + [(f"block{i}", b) for i, b in enumerate(model.blocks)] + [("lnf", model.lnf),
                                                                                             ("head", model.head)]
    for name, m in points:
        m.register_forward_pre_hook(lambda mod, args, name=name: mark(name))
    rows = []
    for step in range(a.steps):
        torch.cuda.synchronize()
        marks.clear()
        mark("start")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        mark("backward")
        loss.backward()
        mark("optimizer")
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark("end")
        torch.cuda.synchronize()
        if step >= 3:
            t0, e0 = marks[0][1], marks[0][2]
            rows.append([(n, (t - t0) * 1e3, e0.elapsed_time(ev)) for n, t, ev in marks])
    names = [n for n, _, _ in rows[0]]
    out = {}
    print(f"{'point':10s} {'host ms':>9s} {'GPU ms':>9s}  (median over {len(rows)} steps; from the step's start)")
    for i, n in enumerate(names):
        h = statistics.median(r[i][1] for r in rows)
        g = statistics.median(r[i][2] for r in rows)
        out[n] = {"host_ms": round(h, 3), "gpu_ms": round(g, 3)}
        print(f"{n:10s} {h:9.3f} {g:9.3f}")
    print("TIMELINE " + json.dumps({"batch": a.batch, "seq": a.seq, "points": out}))


if __name__ == "__main__":
    main()
