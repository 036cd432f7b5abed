"""The memory-efficient attention with and without an additive bias, at a GPT-2 shape (issue #14).

Session 56 priced a bias per score from CoAtNet's profile (head dim 32, 49-196 tokens on an H100:
255 bias elements per ns forward, 94 with its gradient). Whether that rate holds where the kernel
has more work per score (head dim 64, 1,024 tokens, a causal mask materialised as a float bias, as
transformers 5.17 passes it under torch.compile) was not measured. This times both, forward and
backward, under `sdpa_kernel(EFFICIENT_ATTENTION)`, with CUDA events (cuda_timing.median_us: median of 20
after 3 warm-ups).

    python tools/holdout/attn_bias_probe.py
"""
from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from cuda_timing import median_us


def main() -> None:
    for b, h, s, d, bias_grad in ((8, 12, 1024, 64, False), (8, 12, 1024, 64, True), (128, 12, 196, 32, True)):
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        table = torch.randn(b, 1, s, s, device="cuda", dtype=torch.bfloat16, requires_grad=bias_grad)
        row = {"shape": [b, h, s, d], "bias_grad": bias_grad}
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            for name, mask in (("plain", None), ("bias", table.expand(b, h, s, s))):
                row[f"{name}_fwd_us"] = round(median_us(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)), 1)
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                g = torch.randn_like(out)
                row[f"{name}_fwd_bwd_us"] = round(median_us(lambda: torch.autograd.grad(
                    F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v), g)), 1)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
