"""How many kernel launches can the host queue before cudaLaunchKernel blocks? (issue #15)

Behind a long torch.cuda._sleep kernel (~1 s of GPU time) the host launches small kernels and
times each launch; the first launch that takes longer than --block-us is the one the full queue
held up: its index is the queue's depth for that kind of launch. Several kinds (an elementwise
kernel with few arguments, a 64x64 GEMM, a copy) and two streams, each in a fresh queue.

    python tools/holdout/launch_depth.py [--out depth.json]
"""
import argparse
import json
import time

import torch


def depth(launch, n: int, block_us: float, stream=None) -> dict:
    torch.cuda.synchronize()
    with torch.cuda.stream(stream) if stream is not None else torch.cuda.stream(torch.cuda.current_stream()):
        torch.cuda._sleep(int(2e9))
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            launch()
            times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    first = next((i for i, t in enumerate(times) if t > block_us), None)
    steady = sorted(times[:max(1, (first or n) - 1)])
    return {"blocked_at": first, "launch_us_median": steady[len(steady) // 2],
            "blocked_us": times[first] if first is not None else None,
            "after_block_us_median": (sorted(times[first + 1:first + 201])[100] if first is not None
                                      and len(times) > first + 201 else None)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=6000)
    p.add_argument("--block-us", type=float, default=200.0)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    x = torch.zeros(16, device="cuda")
    m = torch.randn(64, 64, device="cuda")
    src, dst = torch.zeros(1 << 16, device="cuda"), torch.zeros(1 << 16, device="cuda")
    kinds = {"add_": lambda: x.add_(1.0), "mm": lambda: torch.mm(m, m), "copy_": lambda: dst.copy_(src)}
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "n": a.n}
    for name, f in kinds.items():
        f()
        out[name] = depth(f, a.n, a.block_us)
        print(name, out[name], flush=True)
    side = torch.cuda.Stream()
    out["add_side_stream"] = depth(kinds["add_"], a.n, a.block_us, side)
    print("add_side_stream", out["add_side_stream"], flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
