"""Which backend does F.scaled_dot_product_attention pick on this GPU? Ground truth for runtime/dispatch/sdpa.py.

Runs a grid of attention calls (dtype, head dim, sequence lengths, heads and GQA, masks,
dropout, causal, requires_grad, memory layout, sdpa_kernel contexts) on a real CUDA GPU and
records, per call, the aten op the forward ran (`_scaled_dot_product_cudnn_attention`,
`..._flash_attention`, `..._efficient_attention`, or the math path's ops) and the backward's,
read from torch.profiler's CPU events (no kernel timing: a few seconds in all).

    python -m phantora_prof.measure.sdpa_battery --out sdpa_cases.json      # on the GPU machine

Output (JSON): {"env": {torch, cuda, cudnn, device, capability}, "cases": [{params..., "fwd": op, "bwd": op}]}.
tests/test_sdpa_rules.py replays every case through the simulator's rules (runtime/dispatch/sdpa.py)
and expects the same choice.
"""
from __future__ import annotations

import argparse
import itertools
import json
import random

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

FUSED = ("_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu")


def cases(seed: int, n: int) -> list[dict]:
    grid = dict(
        dtype=["bf16", "fp16", "fp32"],
        head_dim=[32, 64, 72, 80, 96, 128, 160, 192, 256, 320],
        seq=[(128, 128), (197, 197), (512, 512), (1024, 1024), (2048, 2048), (4096, 4096), (1, 1024), (77, 1024)],
        heads=[(16, 16), (16, 4), (12, 12), (32, 8)],
        gqa_mode=["repeat", "enable_gqa"],  # how a kv-head count below the query's is handled
        mask=["none", "causal", "bool_full", "bool_pad", "float_full", "float_pad"],
        dropout=[0.0, 0.1],
        grad=[True, False],
        layout=["bhsd", "bshd_t"],  # contiguous [B,H,S,D] or a transposed view of [B,S,H,D]
        context=["default", "no_cudnn", "flash_only", "efficient_only", "math_only"],
    )
    rng = random.Random(seed)
    keys = list(grid)
    out = []
    # the defaults first: every dtype x head dim x mask x dropout with plain shapes
    for dt, hd, mask, dp in itertools.product(grid["dtype"], grid["head_dim"], grid["mask"], grid["dropout"]):
        out.append(dict(dtype=dt, head_dim=hd, seq=(1024, 1024), heads=(16, 16), gqa_mode="repeat", mask=mask,
                        dropout=dp, grad=True, layout="bhsd", context="default"))
    while len(out) < n:
        out.append({k: rng.choice(grid[k]) for k in keys})
    return out


def build(c: dict, batch: int = 2):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[c["dtype"]]
    sq, sk = c["seq"]
    h, kv = c["heads"]
    d = c["head_dim"]

    def make(s, heads):
        if c["layout"] == "bhsd":
            t = torch.randn(batch, heads, s, d, device="cuda", dtype=dt)
        else:
            t = torch.randn(batch, s, heads, d, device="cuda", dtype=dt).transpose(1, 2)
        return t.requires_grad_(c["grad"])

    q = make(sq, h)
    k, v = make(sk, kv), make(sk, kv)
    kw = {}
    if kv != h:
        if c["gqa_mode"] == "enable_gqa":
            kw["enable_gqa"] = True
        else:
            k = k.repeat_interleave(h // kv, dim=1)
            v = v.repeat_interleave(h // kv, dim=1)
    m = c["mask"]
    if m == "causal":
        kw["is_causal"] = True
    elif m == "bool_full":
        kw["attn_mask"] = torch.ones(sq, sk, device="cuda", dtype=torch.bool).tril()
    elif m == "bool_pad":
        kw["attn_mask"] = torch.ones(batch, 1, 1, sk, device="cuda", dtype=torch.bool)
    elif m == "float_full":
        kw["attn_mask"] = torch.zeros(batch, h, sq, sk, device="cuda", dtype=dt)
    elif m == "float_pad":
        kw["attn_mask"] = torch.zeros(batch, 1, 1, sk, device="cuda", dtype=dt)
    kw["dropout_p"] = c["dropout"]
    return q, k, v, kw


CONTEXTS = {
    "default": None,
    "no_cudnn": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH],
    "flash_only": [SDPBackend.FLASH_ATTENTION],
    "efficient_only": [SDPBackend.EFFICIENT_ATTENTION],
    "math_only": [SDPBackend.MATH],
}


def run_case(c: dict) -> dict:
    q, k, v, kw = build(c)
    ctx = CONTEXTS[c["context"]]
    res = dict(c, seq=list(c["seq"]), heads=list(c["heads"]))
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            if ctx is None:
                out = F.scaled_dot_product_attention(q, k, v, **kw)
            else:
                with sdpa_kernel(ctx):
                    out = F.scaled_dot_product_attention(q, k, v, **kw)
            if c["grad"]:
                out.sum().backward()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - "no backend" is an answer too
        res["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return res
    names = [e.name for e in prof.events()]
    fwd = next((n.split("::")[1] for n in names if any(n == "aten::" + f for f in FUSED)), None)
    bwd = next((n.split("::")[1] for n in names if n.startswith("aten::_scaled_dot_product") and
                n.endswith("_backward")), None)
    res["fwd"] = fwd or ("math" if "aten::_scaled_dot_product_attention_math" in names else "other")
    res["bwd"] = bwd
    res["math_ops"] = sorted({n for n in names if n.startswith("aten::")} & {"aten::bmm", "aten::matmul", "aten::_softmax",
                                                                           "aten::baddbmm"})
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=700, help="cases in all (the default grid first, then random)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "device": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability())}
    results = []
    for c in cases(a.seed, a.n):
        results.append(run_case(c))
        torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump({"env": env, "cases": results}, f)
    print(f"{len(results)} cases -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
