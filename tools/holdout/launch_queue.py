"""Does a kernel launch cost the host more when the GPU is idle than when work is queued? (issue #15)

Host time per launch (perf_counter around N launches, no sync inside) of small ops, three ways:
idle (the GPU finishes each kernel before the next launch), queued (behind a
torch.cuda._sleep kernel that keeps the GPU busy through all N launches), and with each
kernel itself long (the queue fills as the loop runs). N stays below the launch queue's depth.

    python tools/holdout/launch_queue.py [--n 200] [--reps 15]
"""
import argparse
import json
import statistics
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--reps", type=int, default=15)
    a = p.parse_args()
    x = torch.zeros(16, device="cuda")
    big = torch.zeros(64 << 20, device="cuda")  # 256 MiB: ~100 us per add_
    m = torch.randn(64, 64, device="cuda")
    ops = {
        "add_small": lambda: x.add_(1.0),
        "mm_small": lambda: torch.mm(m, m),
        "view": lambda: x.view(4, 4),
        "add_big": lambda: big.add_(1.0),
    }
    out = {}
    for name, fn in ops.items():
        for mode in ("idle", "queued"):
            ts = []
            for r in range(a.reps + 2):
                torch.cuda.synchronize()
                if mode == "queued":
                    torch.cuda._sleep(200_000_000)  # ~100 ms of GPU time ahead of the launches
                t0 = time.perf_counter()
                for _ in range(a.n):
                    fn()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                if r >= 2:
                    ts.append((t1 - t0) / a.n * 1e6)
            out[f"{name}/{mode}"] = round(statistics.median(ts), 3)
            print(f"{name:10s} {mode:7s} {out[f'{name}/{mode}']:8.2f} us per call", flush=True)
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
