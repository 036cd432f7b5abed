"""Issue #16: Inductor's GEMM padding decisions (shape_padding, fx_passes/pad_mm.py), real vs simulated.

Compiles a linear layer's forward and backward over misaligned widths (vocabularies, odd hidden
sizes) at several token counts, and prints one line per padding decision Inductor made:
`PAD {"case", "op", "m", "k", "n", "pad"}`. On a GPU the decision is Inductor's own (it times
both GEMMs); under phantora-prof it is the cost model's (runtime/compile/shape_padding.py),
read from the simulator's debug log (`--log-level debug`, lines `pad_mm aten::mm m=... -> pad`).

    python tools/holdout/pad_probe.py                                        # on the H200
    phantora-prof --no-trace --log-level debug python tools/holdout/pad_probe.py 2>&1 | grep pad_mm
"""
from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F

CASES = [(tokens, d_in, d_out) for tokens in (128, 1024, 8192, 32768)
         for d_in, d_out in ((768, 50257), (768, 30522), (4096, 32001), (1001, 4096), (4096, 11001))]


def _record(case: str):
    """Wrap Inductor's decision to print it (real GPU only: the simulator replaces it while compiling)."""
    from torch._inductor.fx_passes import pad_mm

    original = pad_mm._should_pad

    def wrapped(match, mat1, mat2, op, input=None):
        result = original(match, mat1, mat2, op, input)
        bmm = op is torch.ops.aten.bmm
        m, k = (mat1.shape[1], mat1.shape[2]) if bmm else (mat1.shape[0], mat1.shape[1])
        print("PAD " + json.dumps({"case": case, "op": str(op).split(".")[-1], "m": int(m), "k": int(k),
                                   "n": int(mat2.shape[-1]), "pad": bool(result)}), flush=True)
        return result

    pad_mm._should_pad = wrapped
    return lambda: setattr(pad_mm, "_should_pad", original)


def main() -> None:
    simulated = "phantora_prof" in sys.modules
    for tokens, d_in, d_out in CASES:
        case = f"{tokens}x{d_in}x{d_out}"
        torch._dynamo.reset()
        w = torch.randn(d_out, d_in, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        x = torch.randn(tokens, d_in, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        restore = None if simulated else _record(case)
        try:
            f = torch.compile(lambda x, w: F.linear(x, w).float().sum())
            f(x, w).backward()
            torch.cuda.synchronize()
        finally:
            if restore:
                restore()
        print("CASE", case, flush=True)


if __name__ == "__main__":
    main()
