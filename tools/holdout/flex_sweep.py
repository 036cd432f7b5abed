"""flex_attention kernel times: compiled forward and backward Triton templates (issue #16).

Runs the same on a GPU machine (`python tools/holdout/flex_sweep.py --out real.jsonl`) and under
the simulator (`phantora-prof --gpu h200 --no-trace python tools/holdout/flex_sweep.py --out
sim.jsonl`). Each case compiles `flex_attention` (as torchtitan and the PyTorch docs do), runs
forward + backward a few times, then profiles `--reps` more calls; one JSON line per case with
the median duration of each kernel whose name starts with `triton_tem_` (the templates).

Cases: causal and full block masks, head dim 64 and 128, sequences 1024-8192, batch x heads
16-128, grouped-query attention (8 KV heads for 32 query heads, as Llama 3 8B), bf16.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

CASES = [  # (B, H, KV heads, S, D, mask)
    (8, 16, 16, 1024, 64, "causal"), (4, 16, 16, 2048, 64, "causal"), (2, 16, 16, 4096, 64, "causal"),
    (4, 16, 16, 2048, 128, "causal"), (2, 16, 16, 4096, 128, "causal"), (1, 16, 16, 8192, 128, "causal"),
    (4, 16, 16, 2048, 128, "full"), (2, 8, 8, 4096, 128, "full"), (8, 8, 8, 1024, 128, "causal"),
    (1, 32, 8, 8192, 128, "causal"), (2, 32, 8, 4096, 128, "causal"), (1, 32, 8, 2048, 128, "causal"),
]


def causal(b, h, q, k):
    return q >= k


def full(b, h, q, k):
    return q >= 0


def run_case(case, reps: int) -> dict:
    from torch.profiler import ProfilerActivity, profile
    b, h, hkv, s, d, mask = case
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    bm = create_block_mask(causal if mask == "causal" else full, B=None, H=None, Q_LEN=s, KV_LEN=s, device="cuda")
    attend = torch.compile(flex_attention)
    g = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)

    def step():
        attend(q, k, v, block_mask=bm, enable_gqa=hkv != h).backward(g)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.name.startswith("triton_tem_"):
            times.setdefault(e.name, []).append(e.device_time if hasattr(e, "device_time") else e.cuda_time)
    return {"case": dict(b=b, h=h, hkv=hkv, s=s, d=d, mask=mask),
            "kernels": {n: statistics.median(t) for n, t in sorted(times.items())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    with open(a.out, "w") as f:
        for case in CASES:
            try:
                r = run_case(case, a.reps)
            except Exception as exc:  # noqa: BLE001 - keep the other cases
                r = {"case": case, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            f.write(json.dumps(r) + "\n")
            f.flush()
            print(json.dumps(r), flush=True)
            torch._dynamo.reset()


if __name__ == "__main__":
    main()
