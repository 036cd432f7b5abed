"""Measure GPU kernel times over a sweep of op shapes (plain torch: runs from a checkout).

Runs on a machine with one CUDA GPU (`python -m phantora_prof.measure.measure_kernels`,
no install needed: it imports torch and timing.py only). Every case (one op call with fixed
shapes) is run a few times for warm-up, then `--repeats` times under torch.profiler (CUPTI),
each call after a 256 MiB write that evicts L2 (as triton's do_bench; --warm-l2 keeps it);
the kernels of each call are matched by position and the median duration of each is kept,
with its name, grid and block; `total_ns` is the median over calls of the summed GPU time of
the call's kernels/memcpys/memsets (GPU busy time, not wall time). The timing is timing.py's,
the harness the measuring worker (replay.py) uses too.

Sweep (ordered by priority; `--budget-s` stops early and keeps what was measured):
GEMMs (bf16, fp16, fp32 with TF32 on and off; mm NN/NT/TN, addmm with bias, bmm) over
M, N, K log-spaced; scaled_dot_product_attention (cudnn / flash / efficient, fwd and
bwd, causal or not, head dim 64/128, seq 512-8192); layer_norm / rms_norm, softmax /
log_softmax fwd+bwd, cross_entropy, embedding fwd/bwd; elementwise (add, mul, gelu, silu,
casts) and sums by size 2^10..2^28 elements; fused and foreach AdamW; zero_; memcpy
H2D pinned/pageable, D2H pinned/pageable, D2D by size.

Output: one JSON (schema "phantora-measured/1"), compact: kernel names are interned in
a list and referenced by index. Records:
  {"cls": "gemm"|"attention"|"mem"|"memcpy", "op": label, "p": {params}, "bytes": io bytes,
   "flops": FLOPs (gemm/attention), "t": total_ns, "k": [[name_idx, dur_ns, grid, block], ...]}

Regenerate phantora_prof/cost/data/h200_measured.json (about 2 x 100 s on an H200; the
model fits the geometric mean of the cold- and warm-L2 times, see cost/measured.py):

    python -m phantora_prof.measure.measure_kernels --out cold.json
    python -m phantora_prof.measure.measure_kernels --warm-l2 --out warm.json
    python -m phantora_prof.measure.measure_kernels --merge cold.json warm.json \
        --out phantora_prof/cost/data/h200_measured.json

(--only gemm,attention,mem,memcpy limits the sweep, --quick shrinks it, --budget-s stops
early; an output path ending in .gz is written gzipped.)

FP8 GEMMs (`--only scaled_mm`: torch._scaled_mm, e4m3 / e5m2 A, e4m3 B, tensorwise or rowwise
scales, bf16 out; about 2 x 10 s) were measured on 2026-12-02
(tools/holdout/real_h200/session13/) and appended to the shipped file with --merge and --append
(below).

fp32 GEMMs at transformer training shapes (`--only gemm_fp32`: tokens 2048 / 8192 x hidden
768-4096, TF32 off and on, the three training layouts; 105 cases, about 2 x 15 s): measured in
session 45 when the only fp32 model with a real profile (the 2 x H200 pipeline example) ran its
GEMMs 12% faster (median of its 12 GEMM shapes; -14% to +38%) than the base sweep's random fp32
shapes implied; cold and warm runs merged
and appended as the FP8 ones were. `--only attention_fp32`: fp32 self-attention on the
memory-efficient backend (the one a CUDA build runs for fp32), forward and backward.

Wider shapes (batch*heads 384-3072, GEMM dimensions past 16384: vocabularies, 70B MLPs;
about 2 x 60 s). Measured on 2026-11-29 (tools/holdout/real_h200/h200_wide_sweep.json) and NOT in the
shipped file: timed in isolation these shapes ran above what the same shapes take inside
the reference training steps (gpt_b32 with the exact-shape table off: cuDNN attention at
batch*heads 384 +14% instead of -9% when extrapolated from the base sweep, GEMMs +8%
instead of +5%), so adding them made the in-training predictions worse. The base sweep
extrapolated to them with median errors of 7-13% (GEMMs biased -10%). To add them anyway:

    python -m phantora_prof.measure.measure_kernels --only attention_wide,gemm_wide --out wc.json
    python -m phantora_prof.measure.measure_kernels --only attention_wide,gemm_wide --warm-l2 --out ww.json
    python -m phantora_prof.measure.measure_kernels --merge wc.json ww.json --out wide.json
    python -m phantora_prof.measure.measure_kernels --append phantora_prof/cost/data/h200_measured.json wide.json \
        --out phantora_prof/cost/data/h200_measured.json
"""
from __future__ import annotations

import argparse
import bisect
import gzip
import json
import math
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from phantora_prof.calibrate.interning import Interner
from phantora_prof.measure import timing

SCHEMA = "phantora-measured/1"
DEV = "cuda"


def nbytes(*ts) -> int:
    n = 0
    for t in ts:
        if isinstance(t, (list, tuple)):
            n += nbytes(*t)
        elif isinstance(t, torch.Tensor):
            n += t.numel() * t.element_size()
    return n


DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


# ------------------------------------------------------------------ cases
# a case: (cls, op label, params, setup) where setup() -> (fn, io_bytes, flops)

def _random_gemm_op(rnd: random.Random, addmm_below: float) -> tuple[str, str]:
    """(op, layout) drawn as the random GEMM sweeps draw them: mm 45% in any layout, addmm up
    to `addmm_below` (NN or NT: a linear's layouts), bmm the rest."""
    u = rnd.random()
    if u < 0.45:
        return "mm", rnd.choice(["NN", "NT", "TN"])
    if u < addmm_below:
        return "addmm", rnd.choice(["NN", "NT"])
    return "bmm", rnd.choice(["NN", "NT", "TN"])


def gemm_cases(quick: bool):
    rnd = random.Random(1)
    sizes = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    if quick:
        sizes = [128, 1024, 4096]
    cases = []

    def add(op, dt, tf32, layout, m, n, k, b=1):
        fl = 2.0 * b * m * n * k
        cases.append(("gemm", op, dict(dtype=dt, tf32=tf32, layout=layout, m=m, n=n, k=k, b=b), fl))

    # bf16 mm NN: full power-of-two grid up to 2^40 M*N*K
    for m in sizes:
        for n in sizes:
            for k in sizes:
                if m * n * k <= 2 ** 40:
                    add("mm", "bf16", False, "NN", m, n, k)
    # random log-uniform shapes (multiples of 64 and a few odd), all dtypes / layouts / ops
    def r():
        e = rnd.uniform(7, 14)
        v = int(2 ** e)
        return max(64, v // 64 * 64) if rnd.random() < 0.8 else max(100, v | 1)
    specs = [("bf16", False, 420), ("fp16", False, 100), ("fp32", True, 110), ("fp32", False, 70)]
    if quick:
        specs = [(d, t, 4) for d, t, _ in specs]
    for dt, tf32, cnt in specs:
        made = 0
        while made < cnt:
            m, n, k = r(), r(), r()
            lim = 2 ** 40 if dt != "fp32" or tf32 else 2 ** 37
            if m * n * k > lim:
                continue
            op, layout = _random_gemm_op(rnd, addmm_below=0.8)
            b = 1
            if op == "bmm":
                b = rnd.choice([2, 4, 8, 16, 32, 64])
                while b * m * n * k > lim and b > 1:
                    b //= 2
            add(op, dt, tf32, layout, m, n, k, b)
            made += 1
    # GPT-like transformer shapes (tokens x hidden): bf16 mm in the 3 layouts
    for tok in ([512, 2048, 8192, 32768] if not quick else [2048]):
        for d in ([768, 1024, 2048, 4096] if not quick else [768]):
            for n in (d, 3 * d, 4 * d):
                if tok * d * n > 2 ** 40:
                    continue
                add("addmm", "bf16", False, "NT", tok, n, d)          # linear fwd
                add("mm", "bf16", False, "NN", tok, d, n)            # grad input (dY W)
                add("mm", "bf16", False, "TN", n, d, tok)            # grad weight (dY^T X)
    return cases


def setup_gemm(p):
    dt = DT[p["dtype"]]
    m, n, k, b = p["m"], p["n"], p["k"], p["b"]
    lay = p["layout"]
    op = p["_op"]

    def operand(r, c, t):
        if t:
            shape = (b, c, r) if op == "bmm" else (c, r)
            return torch.randn(shape, device=DEV, dtype=dt).transpose(-1, -2)
        shape = (b, r, c) if op == "bmm" else (r, c)
        return torch.randn(shape, device=DEV, dtype=dt)

    a = operand(m, k, lay == "TN")
    w = operand(k, n, lay == "NT")
    io = nbytes(a, w) + b * m * n * a.element_size()
    tf32 = bool(p["tf32"])

    def flags():  # at call time: cases are set up in a batch, then timed
        torch.backends.cuda.matmul.allow_tf32 = tf32

    if op == "mm":
        return (lambda: (flags(), torch.mm(a, w))), io
    if op == "bmm":
        return (lambda: (flags(), torch.bmm(a, w))), io
    bias = torch.randn(n, device=DEV, dtype=dt)
    return (lambda: (flags(), torch.addmm(bias, a, w))), io + nbytes(bias)


ATTN_BACKENDS = ("cudnn", "flash", "efficient")


def attn_cases(quick: bool):
    rnd = random.Random(2)
    cases = []
    seqs = [512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192] if not quick else [1024]
    for be in ATTN_BACKENDS:
        for d in (64, 128):
            for causal in (False, True):
                for s in seqs:
                    for b, h in _batch_heads(rnd, s, d, quick, 2 ** 37):
                        cases += _sdpa_pair(be, d, causal, s, b, h)
    return cases


def _batch_heads(rnd: random.Random, s: int, d: int, quick: bool, limit: float) -> list[tuple[int, int]]:
    """Up to three (batch, heads) pairs (one with --quick) drawn for sequence length `s` and head
    dim `d`, within 32768 tokens and `limit` b*h*s^2*d."""
    combos = set()
    tries = 0
    while len(combos) < (3 if not quick else 1) and tries < 80:
        tries += 1
        b = rnd.choice([1, 2, 4, 8])
        h = rnd.choice([8, 12, 16, 32])
        if b * s > 32768 or b * h * s * s * d > limit:
            continue
        combos.add((b, h))
    return sorted(combos)


def _sdpa_pair(be: str, d: int, causal: bool, s: int, b: int, h: int, dtype: str = "bf16") -> list:
    """The forward and backward cases of one self-attention shape, with their FLOPs
    (bwd = 2.5x fwd; causal counts the computed half of the score tiles)."""
    out = []
    for bwd in (False, True):
        f = 4.0 * b * h * s * s * d * (2.5 if bwd else 1.0)
        if causal:
            f *= (s + 1) / (2.0 * s)
        out.append(("attention", "sdpa_bwd" if bwd else "sdpa_fwd",
                    dict(backend=be, d=d, causal=causal, s=s, b=b, h=h, dtype=dtype), f))
    return out


def attn_fp32_cases(quick: bool):
    """fp32 self-attention on the memory-efficient backend, the one a CUDA build picks for fp32
    (flash and cuDNN take 16-bit inputs only): forward and backward over the base sweep's grid,
    within 2^35 b*h*s^2*d. A fp32 model (the 2 x H200 pipeline example) ran its attention there."""
    rnd = random.Random(5)
    cases = []
    for d in (64, 128):
        for causal in (False, True):
            for s in ([256, 512, 1024, 2048, 4096] if not quick else [1024]):
                for b, h in _batch_heads(rnd, s, d, quick, 2 ** 35):
                    cases += _sdpa_pair("efficient", d, causal, s, b, h, dtype="fp32")
    return cases


def attn_fp32_short_cases(quick: bool):
    """fp32 self-attention on the memory-efficient backend at the short sequences of vision and
    encoder transformers (ViT's 50 / 197 / 577 tokens, CLIP's 257, powers of two below 256) and
    the many batch*heads they run with (96-3072), non-causal, within 2^35 b*h*s^2*d: below
    attention_fp32's 256 tokens the model had no points (session 50: a ViT-B/16 in fp32 ran its
    attention 4x slower than the TF32 roofline had it). Each record carries the GPU it ran on
    (`gpu`), which the model carries to the H200 by the roofline."""
    gpu = _gpu_tag()
    cases = []
    for d in (64, 128):
        for s in ([50, 64, 128, 197, 257, 577] if not quick else [197]):
            for bh in ((96, 384, 768, 1536, 3072) if not quick else (768,)):
                if bh * s * s * d > 2 ** 35:
                    continue
                h = next(x for x in (16, 12, 8, 6) if bh % x == 0)
                for c in _sdpa_pair("efficient", d, False, s, bh // h, h, dtype="fp32"):
                    c[2]["gpu"] = gpu
                    cases.append(c)
    return cases


def _gpu_tag() -> str:
    """The GPU key of the device this runs on (measure.source's, as a kernel database names it;
    the device name lower-cased where it knows none)."""
    from phantora_prof.measure.gpu_names import gpu_key_for

    if not torch.cuda.is_available():
        return "h200"  # --list on a machine without a GPU
    name = torch.cuda.get_device_name()
    return gpu_key_for(name) or name.lower().replace(" ", "_")


def attn_wide_cases(quick: bool):
    """Batch*heads 384-3072 (larger batches and models than attn_cases), within 2^40 b*h*s^2*d."""
    cases = []
    for be in ATTN_BACKENDS:
        for d in (64, 128):
            for causal in (False, True):
                for s in ([512, 1024, 2048, 4096, 8192] if not quick else [1024]):
                    for bh in ((384, 768, 1536, 3072) if not quick else (384,)):
                        if bh * s * s * d > 2 ** 40:
                            continue
                        h = next(x for x in (64, 48, 32, 24, 16, 12, 8) if bh % x == 0)
                        b = bh // h
                        cases += _sdpa_pair(be, d, causal, s, b, h)
    return cases


def gemm_align_cases(quick: bool, seed: int = 7, scale: int = 1):
    """GEMMs whose leading dimensions are even but not multiples of 8 elements (BERT's 30522
    vocabulary, a 1e3-wide layer): 4- or 8-byte aligned rows in bf16, 8-byte in fp32. The base
    sweep has 16-byte-aligned and odd (2-byte bf16, 4-byte fp32) leading dimensions only, and
    cuBLAS's kernels for the ones between differ from both."""
    rnd = random.Random(seed)
    cases = []

    def dim(mod: int) -> int:
        v = int(2 ** rnd.uniform(7, 14.5))
        return max(mod + 64, v // 8 * 8 + mod)

    specs = [(dt, tf32, mod, cnt * scale) for dt, tf32, mod, cnt in
             [("bf16", False, 2, 45), ("bf16", False, 4, 45), ("bf16", False, 6, 20), ("fp32", True, 2, 20),
              ("fp32", False, 2, 10)]]
    if quick:
        specs = [(d, t, mod, 3) for d, t, mod, _ in specs]
    for dt, tf32, mod, cnt in specs:
        made = 0
        while made < cnt:
            op, layout = _random_gemm_op(rnd, addmm_below=0.85)
            m, n, k = (int(2 ** rnd.uniform(7, 14.5)) // 64 * 64 or 128 for _ in range(3))
            # the misaligned dimension is one that is a leading dimension in this layout
            which = rnd.choice(["n", "k"] if layout == "NN" else (["n"] if layout == "NT" else ["n", "m"]))
            if which == "n":
                n = dim(mod)
            elif which == "k":
                k = dim(mod)
            else:
                m = dim(mod)
            lim = 2 ** 40 if dt != "fp32" or tf32 else 2 ** 37
            b = rnd.choice([2, 4, 8, 16]) if op == "bmm" else 1
            while b * m * n * k > lim and b > 1:
                b //= 2
            if b * m * n * k > lim:
                continue
            cases.append(("gemm", op, dict(dtype=dt, tf32=tf32, layout=layout, m=m, n=n, k=k, b=b), 2.0 * b * m * n * k))
            made += 1
    return cases


def gemm_small_cases(quick: bool, seed: int = 13, count: int = 480):
    """GEMMs with small matrices: batched matmuls of many small matrices (window attention's
    49x49 scores, eager attention with head dim 32..128 and short sequences) and mm / addmm
    with one small dimension (classifier heads, squeeze-excite layers). The base sweeps draw
    every dimension from 64..16384 and batch from 1..64, so a bmm over 12288 49x32 matrices
    was extrapolated (2x too slow against tv_swin's real profile)."""
    rnd = random.Random(seed)
    common = [16, 24, 32, 49, 50, 64, 77, 96, 128, 144, 196, 197, 256, 384, 512]
    cases = []

    def small() -> int:
        return rnd.choice(common) if rnd.random() < 0.5 else int(2 ** rnd.uniform(3, 10))

    specs = [("bf16", False, 0.55), ("fp16", False, 0.15), ("fp32", True, 0.15), ("fp32", False, 0.15)]
    n_cases = 4 * len(specs) if quick else count
    made = 0
    while made < n_cases:
        u, acc = rnd.random(), 0.0
        for dt, tf32, share in specs:
            acc += share
            if u < acc:
                break
        lim = 2 ** 36 if dt != "fp32" or tf32 else 2 ** 34
        if rnd.random() < 0.7:
            op, layout = "bmm", rnd.choice(["NN", "NT", "TN"])
            m, n, k = small(), small(), small()
            b = int(2 ** rnd.uniform(3, 15))
        else:
            op, layout = _random_gemm_op(rnd, addmm_below=0.8)
            if op == "bmm":
                op = "mm"
            m = int(2 ** rnd.uniform(8, 17))
            n, k = (small(), small()) if rnd.random() < 0.3 else \
                ((small(), int(2 ** rnd.uniform(6, 12))) if rnd.random() < 0.5 else (int(2 ** rnd.uniform(6, 12)), small()))
            b = 1
        while b * m * n * k > lim and b > 1:
            b //= 2
        if b * m * n * k > lim or b * m * n * k < 2 ** 16:
            continue
        cases.append(("gemm", op, dict(dtype=dt, tf32=tf32, layout=layout, m=m, n=n, k=k, b=b), 2.0 * b * m * n * k))
        made += 1
    return cases


def gemm_wide_cases(quick: bool):
    """Dimensions past 16384 (vocabularies, Llama 70B MLPs) in the three training layouts."""
    cases = []

    def add(op, layout, m, n, k):
        cases.append(("gemm", op, dict(dtype="bf16", tf32=False, layout=layout, m=m, n=n, k=k, b=1),
                      2.0 * m * n * k))
    shapes = []
    for n in ((32000, 50304, 65536, 128256) if not quick else (50304,)):
        for tok in ((2048, 8192, 32768) if not quick else (2048,)):
            for d in ((768, 2048, 4096, 8192) if not quick else (768,)):
                shapes.append((tok, n, d))
    for tok in ((4096, 16384) if not quick else ()):
        for d in (4096, 8192):
            for n in (14336, 28672):
                shapes.append((tok, n, d))
    for tok, n, d in shapes:
        if tok * n * d > 2 ** 42:
            continue
        add("addmm", "NT", tok, n, d)  # linear fwd
        add("mm", "NN", tok, d, n)  # grad input
        add("mm", "TN", n, d, tok)  # grad weight
    return cases


def gemm_fp32_cases(quick: bool):
    """fp32 GEMMs at transformer training shapes (tokens x hidden), TF32 off and on, in the three
    training layouts, as the base sweep has them for bf16. The base sweep's fp32 points are random
    shapes (70 with TF32 off, most of them off the multiples of 128 that models use), and a
    fp32 model's GEMMs at such shapes ran 12% faster in training (median of 12 shapes; -14% to +38%)
    than the curve through those points said (the 2 x H200 pipeline example, tests/data/real/h200x2)."""
    cases = []

    def add(op, tf32, layout, m, n, k):
        cases.append(("gemm", op, dict(dtype="fp32", tf32=tf32, layout=layout, m=m, n=n, k=k, b=1),
                      2.0 * m * n * k))
    for tf32 in (False, True):
        lim = 2 ** 40 if tf32 else 2 ** 37
        for tok in ((2048, 8192) if not quick else (2048,)):
            for d in ((768, 1024, 2048, 4096) if not quick else (1024,)):
                for n in (d, 3 * d, 4 * d) if d == 1024 else (d, 4 * d):
                    if tok * d * n > lim:
                        continue
                    add("addmm", tf32, "NT", tok, n, d)  # linear fwd
                    add("mm", tf32, "NN", tok, d, n)  # grad input
                    add("mm", tf32, "TN", n, d, tok)  # grad weight
    return cases


def scaled_mm_cases(quick: bool, seed: int = 17, count: int = 160):
    """FP8 GEMMs as Float8 training runs them: `torch._scaled_mm` with bf16 output, A row-major
    and B column-major (the only layout cuBLASLt takes for FP8: "NT"), tensorwise scales (one
    fp32 scalar each) or rowwise ones ((M,1) and (1,N)); e4m3 x e4m3 (forward) and e5m2 x e4m3
    (gradients). Shapes: random log-uniform dimensions (multiples of 16, which FP8 needs) and the
    transformer shapes of tokens x hidden."""
    rnd = random.Random(seed)
    cases = []

    def add(dt, scaling, m, n, k):
        cases.append(("gemm", "scaled_mm" if scaling == "tensor" else "scaled_mm_rowwise",
                      dict(dtype=dt, tf32=False, layout="NT", m=m, n=n, k=k, b=1), 2.0 * m * n * k))

    def r() -> int:
        return max(16, int(2 ** rnd.uniform(8, 14.5)) // 16 * 16)

    n_rand = 8 if quick else count
    made = 0
    while made < n_rand:
        m, n, k = r(), r(), r()
        if m * n * k > 2 ** 41 or m * n * k < 2 ** 24:
            continue
        dt = "fp8e4m3" if rnd.random() < 0.7 else "fp8e5m2"
        add(dt, "tensor" if rnd.random() < 0.6 else "row", m, n, k)
        made += 1
    for tok in ((8192, 16384) if not quick else (8192,)):
        for d in ((2048, 4096, 8192) if not quick else (4096,)):
            for n in (d, 3 * d, int(3.5 * d)):
                add("fp8e4m3", "tensor", tok, n, d)   # linear forward
                add("fp8e5m2", "tensor", tok, d, n)   # grad input
                add("fp8e5m2", "tensor", n, d, tok)   # grad weight
                add("fp8e4m3", "row", tok, n, d)
    return cases


def setup_scaled_mm(p, op):
    """`torch._scaled_mm` of an (m, k) row-major A and a (k, n) column-major B, bf16 out."""
    m, n, k = p["m"], p["n"], p["k"]
    a_dt = torch.float8_e5m2 if p["dtype"] == "fp8e5m2" else torch.float8_e4m3fn
    a = torch.randn(m, k, device=DEV).to(a_dt)
    b = torch.randn(n, k, device=DEV).to(torch.float8_e4m3fn).t()
    if op == "scaled_mm":
        sa = torch.tensor(1.0, device=DEV)
        sb = torch.tensor(1.0, device=DEV)
    else:
        sa = torch.ones(m, 1, device=DEV)
        sb = torch.ones(1, n, device=DEV)
    io = nbytes(a, b) + m * n * 2
    return (lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)), io


def setup_attn(p):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
          "efficient": SDPBackend.EFFICIENT_ATTENTION}[p["backend"]]
    b, h, s, d = p["b"], p["h"], p["s"], p["d"]
    bwd = p["_op"] == "sdpa_bwd"
    dt = DT[p.get("dtype", "bf16")]
    q, k, v = (torch.randn(b, h, s, d, device=DEV, dtype=dt, requires_grad=bwd) for _ in range(3))
    io = nbytes(q, k, v) * 4 // 3
    if not bwd:
        def fn():
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"])
        return fn, io
    with sdpa_kernel([be]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"])
    g = torch.randn_like(out)

    def fnb():
        return torch.autograd.grad(out, (q, k, v), g, retain_graph=True)
    return fnb, io * 2


SIZES = sorted([2 ** e for e in range(10, 29)] + [3 * 2 ** e for e in range(9, 27, 2)])


def mem_cases(quick: bool):
    sizes = SIZES if not quick else [2 ** 12, 2 ** 20]
    c = []
    for n in sizes:
        for dt in ("bf16", "fp32"):
            for op in ("add", "mul", "add_", "gelu", "gelu_tanh", "silu", "zero_", "copy_", "gelu_bwd",
                       "silu_bwd", "mul_scalar", "div", "tanh", "exp"):
                c.append(("mem", op, dict(dtype=dt, n=n)))
            for h in (256, 1024, 4096, 32768):
                if n >= 2 * h:
                    c.append(("mem", "sum_last", dict(dtype=dt, n=n, h=h)))
            for h in (768, 3072, 8192):
                if n >= 2 * h:
                    c.append(("mem", "sum_dim0", dict(dtype=dt, n=n, h=h)))
        c.append(("mem", "cast", dict(src="fp32", dst="bf16", n=n)))
        c.append(("mem", "cast", dict(src="bf16", dst="fp32", n=n)))
        c.append(("mem", "add_mixed", dict(dtype="fp32", n=n)))
        for h in (768, 1024, 4096, 8192):
            if n >= 4 * h:
                for op in ("layer_norm_fwd", "layer_norm_bwd", "rms_norm_fwd", "rms_norm_bwd"):
                    for dt in ("bf16", "fp32"):
                        c.append(("mem", op, dict(dtype=dt, n=n, h=h)))
        for h in (1024, 4096, 32768, 50304):
            if n >= 2 * h and n <= 2 ** 28:
                rows = max(1, n // h)
                for op in ("softmax_fwd", "softmax_bwd", "log_softmax_fwd", "log_softmax_bwd",
                           "cross_entropy_fwd", "cross_entropy_bwd"):
                    dts = ("fp32",) if op.startswith("cross") else ("bf16", "fp32")
                    for dt in dts:
                        c.append(("mem", op, dict(dtype=dt, n=rows * h, h=h)))
        for dim in (768, 2048, 4096):
            tok = n // dim
            if 256 <= tok <= 65536:
                c.append(("mem", "embedding_fwd", dict(dtype="bf16", n=tok * dim, h=dim, vocab=50304)))
                c.append(("mem", "embedding_bwd", dict(dtype="fp32", n=tok * dim, h=dim, vocab=50304)))
    # optimizers: parameter sets of T tensors, total elements P
    for P in ([2 ** e for e in range(16, 31, 2)] if not quick else [2 ** 20]):
        for T in (16, 148, 512):
            if P // T < 64:
                continue
            for op in ("fused_adamw", "foreach_adamw"):
                c.append(("mem", op, dict(dtype="fp32", n=P, T=T)))
    return c


def memcpy_cases(quick: bool):
    sizes = [2 ** e for e in range(2, 31, 2)] if not quick else [2 ** 10, 2 ** 20]
    c = []
    for nb in sizes:
        for kind in ("h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "d2d"):
            if "pageable" in kind and nb > 2 ** 28:
                continue
            c.append(("memcpy", kind, dict(bytes=nb)))
    return c


def setup_mem(op, p):
    dt = DT[p.get("dtype", "fp32")]
    n = p["n"] if "n" in p else 0

    def r(*shape, dtype=dt, grad=False):
        return torch.randn(*shape, device=DEV, dtype=dtype, requires_grad=grad)

    if op in ("add", "mul", "div"):
        x, y = r(n), r(n)
        f = {"add": torch.add, "mul": torch.mul, "div": torch.div}[op]
        return (lambda: f(x, y)), 3 * nbytes(x)
    if op == "add_mixed":  # fp32 + bf16 -> fp32 (autocast residual streams)
        x, y = r(n), r(n, dtype=torch.bfloat16)
        return (lambda: torch.add(x, y)), 2 * nbytes(x) + nbytes(y)
    if op == "add_":
        x, y = r(n), r(n)
        return (lambda: x.add_(y)), 3 * nbytes(x)
    if op == "mul_scalar":
        x = r(n)
        return (lambda: x * 0.5), 2 * nbytes(x)
    if op in ("tanh", "exp"):
        x = r(n)
        f = torch.tanh if op == "tanh" else torch.exp
        return (lambda: f(x)), 2 * nbytes(x)
    if op in ("gelu", "gelu_tanh", "silu"):
        x = r(n)
        if op == "silu":
            return (lambda: F.silu(x)), 2 * nbytes(x)
        ap = "tanh" if op == "gelu_tanh" else "none"
        return (lambda: F.gelu(x, approximate=ap)), 2 * nbytes(x)
    if op == "gelu_bwd":
        x, g = r(n), r(n)
        return (lambda: torch.ops.aten.gelu_backward(g, x, approximate="tanh")), 3 * nbytes(x)
    if op == "silu_bwd":
        x, g = r(n), r(n)
        return (lambda: torch.ops.aten.silu_backward(g, x)), 3 * nbytes(x)
    if op == "sum_last":
        x = r(max(1, n // p["h"]), p["h"])
        return (lambda: x.sum(-1)), nbytes(x) + x.shape[0] * x.element_size()
    if op == "sum_dim0":
        x = r(max(1, n // p["h"]), p["h"])
        return (lambda: x.sum(0)), nbytes(x) + x.shape[1] * x.element_size()
    if op == "zero_":
        x = r(n)
        return (lambda: x.zero_()), nbytes(x)
    if op == "copy_":
        x, y = r(n), r(n)
        return (lambda: y.copy_(x)), 2 * nbytes(x)
    if op == "cast":
        x = torch.randn(n, device=DEV, dtype=DT[p["src"]])
        dd = DT[p["dst"]]
        return (lambda: x.to(dd)), nbytes(x) + n * torch.empty((), dtype=dd).element_size()
    h = p.get("h", 1)
    rows = max(1, n // h)
    if op.startswith("layer_norm") or op.startswith("rms_norm"):
        bwd = op.endswith("bwd")
        x = r(rows, h, grad=bwd)
        w = r(h, grad=bwd)
        b = r(h, grad=bwd)
        ln = op.startswith("layer")
        if not bwd:
            if ln:
                return (lambda: F.layer_norm(x, (h,), w, b)), 2 * nbytes(x) + 2 * nbytes(w) + rows * 8
            return (lambda: F.rms_norm(x, (h,), w)), 2 * nbytes(x) + nbytes(w) + rows * 4
        out = F.layer_norm(x, (h,), w, b) if ln else F.rms_norm(x, (h,), w)
        g = torch.randn_like(out)
        ins = (x, w, b) if ln else (x, w)
        return (lambda: torch.autograd.grad(out, ins, g, retain_graph=True)), \
            3 * nbytes(x) + 3 * nbytes(w) + rows * 8
    if op.startswith("softmax") or op.startswith("log_softmax"):
        bwd = op.endswith("bwd")
        x = r(rows, h, grad=bwd)
        f = F.softmax if op.startswith("softmax") else F.log_softmax
        if not bwd:
            return (lambda: f(x, -1)), 2 * nbytes(x)
        out = f(x, -1)
        g = torch.randn_like(out)
        return (lambda: torch.autograd.grad(out, (x,), g, retain_graph=True)), 3 * nbytes(x)
    if op.startswith("cross_entropy"):
        bwd = op.endswith("bwd")
        x = r(rows, h, grad=bwd)
        t = torch.randint(0, h, (rows,), device=DEV)
        if not bwd:
            return (lambda: F.cross_entropy(x, t)), 2 * nbytes(x) + nbytes(t)
        out = F.cross_entropy(x, t)
        return (lambda: torch.autograd.grad(out, (x,), retain_graph=True)), 3 * nbytes(x) + nbytes(t)
    if op.startswith("embedding"):
        V = p["vocab"]
        tok = rows
        idx = torch.randint(0, V, (tok,), device=DEV)
        if op == "embedding_fwd":
            w = r(V, h)
            return (lambda: F.embedding(idx, w)), 2 * tok * h * w.element_size() + nbytes(idx)
        g = r(tok, h)
        return (lambda: torch.ops.aten.embedding_dense_backward(g, idx, V, -1, False)), \
            nbytes(g) + nbytes(idx) + V * h * g.element_size()
    if op in ("fused_adamw", "foreach_adamw"):
        T = p["T"]
        sizes = _param_split(n, T)
        ps = [torch.randn(s, device=DEV) for s in sizes]
        gs = [torch.randn(s, device=DEV) for s in sizes]
        m1 = [torch.zeros(s, device=DEV) for s in sizes]
        m2 = [torch.zeros(s, device=DEV) for s in sizes]
        steps = [torch.zeros((), device=DEV) for _ in sizes]
        io = nbytes(ps) * 7  # read p, g, m, v; write p, m, v
        if op == "fused_adamw":
            def fa():
                torch._fused_adamw_(ps, gs, m1, m2, [], steps, lr=1e-4, beta1=0.9, beta2=0.95,
                                    weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=False)
            return fa, io
        params = [torch.nn.Parameter(x) for x in ps]
        for q, g in zip(params, gs):
            q.grad = g
        opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
        return opt.step, io
    raise ValueError(op)


def _param_split(P, T):
    """T tensor sizes summing to ~P, spread like a transformer's (a few large, many small)."""
    rnd = random.Random(P * 31 + T)
    w = [math.exp(rnd.uniform(0, 5)) for _ in range(T)]
    s = sum(w)
    return [max(16, int(P * x / s)) for x in w]


def setup_memcpy(op, p):
    nb = p["bytes"]
    n = max(1, nb // 4)
    if op.startswith("h2d"):
        src = torch.randn(n).pin_memory() if "pinned" in op else torch.randn(n)
        dst = torch.empty(n, device=DEV)
        return (lambda: dst.copy_(src, non_blocking=True)), nb
    if op.startswith("d2h"):
        src = torch.randn(n, device=DEV)
        dst = torch.empty(n).pin_memory() if "pinned" in op else torch.empty(n)
        return (lambda: dst.copy_(src, non_blocking=True)), nb
    src = torch.randn(n, device=DEV)
    dst = torch.empty(n, device=DEV)
    return (lambda: dst.copy_(src)), nb


def setup(case):
    cls, op, p = case[0], case[1], case[2]
    if cls == "gemm" and op.startswith("scaled_mm"):
        return setup_scaled_mm(p, op)
    if cls == "gemm":
        return setup_gemm(dict(p, _op=op))
    if cls == "attention":
        return setup_attn(dict(p, _op=op))
    if cls == "mem":
        return setup_mem(op, p)
    return setup_memcpy(op, p)


# ------------------------------------------------------------------ timing

COLD = True


def run_chunk(chunk, repeats, names, out):
    """Profile a list of (case, fn, io, flops) in one profiler session."""
    from torch.profiler import record_function
    prepared = []
    for case in chunk:
        try:
            fn, io = setup(case)
            for _ in range(2):
                fn()
            torch.cuda.synchronize()
            prepared.append((case, fn, io))
        except Exception as e:  # noqa: BLE001 - an unsupported config: skip it
            print(f"skip {case[:3]}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
            torch.cuda.synchronize()
    if not prepared:
        return
    flush = timing.flush_buffer() if COLD else None

    def body():
        for i, (case, fn, io) in enumerate(prepared):
            torch.cuda.synchronize()
            with record_function(f"case:{i}"):
                for _ in range(repeats):
                    if flush is not None:  # evict L2 (outside the "rep" range: not counted)
                        flush.zero_()
                    with record_function("rep"):
                        fn()
                torch.cuda.synchronize()

    evs = timing.profiled(body)
    # kernels belong to the call whose launch lies in a "rep" range (timing.calls), the call to
    # the case whose range holds it
    cases = timing.ranges(evs, lambda nm: nm.startswith("case:"))
    case_starts = [c[0] for c in cases]
    by_case: dict[int, list] = {}
    for call in timing.calls(evs, lambda nm: nm == "rep", unlaunched_at_own_start=True):
        if not call.acts:
            continue
        j = bisect.bisect_right(case_starts, call.start) - 1
        if j < 0 or call.start > cases[j][1]:
            continue
        by_case.setdefault(int(cases[j][2][5:]), []).append(call.acts)
    for i, (case, fn, io) in enumerate(prepared):
        calls = by_case.get(i, [])
        if not calls:
            continue
        tot = [timing.busy_ns(c) for c in calls]
        nk, same = timing.typical(calls)
        durs = timing.position_medians(same, nk, scale=1000.0)
        ks = []
        for pos in range(nk):
            e0 = same[0][pos][0]
            a = e0.get("args") or {}
            item = [names(e0["name"]), int(round(durs[pos]))]
            if "grid" in a:
                item += [a.get("grid"), a.get("block")]
            ks.append(item)
        rec = {"cls": case[0], "op": case[1], "p": case[2], "bytes": int(io), "t": int(round(statistics.median(tot))),
               "k": ks, "n": len(calls)}
        if len(case) > 3:
            rec["flops"] = case[3]
        out.append(rec)


def _load(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def _write(doc, path):
    data = json.dumps(doc, separators=(",", ":"))
    if path.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(data)
    else:
        with open(path, "w") as f:
            f.write(data)
    return len(data)


def merge(cold_path, warm_path, out):
    """The cold run's records, each with `tw`: the warm run's time for the same case."""
    cold, warm = _load(cold_path), _load(warm_path)

    def key(r):
        return r["cls"], r["op"], json.dumps(r["p"], sort_keys=True)
    tw = {key(r): r["t"] for r in warm["records"]}
    n = 0
    for r in cold["records"]:
        t = tw.get(key(r))
        if t is not None:
            r["tw"] = t
            n += 1
    cold["env"]["tw"] = (f"median GPU time of the same call with L2 left warm (--warm-l2 run, "
                         f"{warm['env'].get('date')}, {warm['env'].get('elapsed_s')}s)")
    size = _write(cold, out)
    print(f"merged {n}/{len(cold['records'])} warm times into {out} ({size / 1e6:.1f} MB)")
    return 0


def append(base_path, extra_path, out):
    """BASE's records plus EXTRA's (kernel names re-interned), EXTRA's run noted in env."""
    base, extra = _load(base_path), _load(extra_path)
    names = Interner()
    for n in base["names"]:
        names(n)

    def known(r):
        return r["cls"], r["op"], json.dumps(r["p"], sort_keys=True)
    have = {known(r) for r in base["records"]}
    added = 0
    for r in extra["records"]:
        if known(r) in have:
            continue
        for k in r.get("k", []):
            k[0] = names(extra["names"][k[0]])
        base["records"].append(r)
        added += 1
    base["names"] = names.values
    base["env"].setdefault("extra_runs", []).append({k: extra["env"].get(k) for k in ("date", "elapsed_s", "torch",
                                                                                   "cuda", "gpu")})
    size = _write(base, out)
    print(f"appended {added} records to {base_path} -> {out} ({size / 1e6:.1f} MB)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--merge", nargs=2, metavar=("COLD", "WARM"), help="merge two runs' JSON and exit")
    ap.add_argument("--append", nargs=2, metavar=("BASE", "EXTRA"),
                    help="add EXTRA's records (a merged cold+warm run) to BASE's and write --out")
    ap.add_argument("--budget-s", type=float, default=330.0)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="comma list of classes: gemm,attention,mem,memcpy")
    ap.add_argument("--warm-l2", action="store_true",
                    help="do not evict L2 before each timed call (default: cold, like triton's do_bench)")
    a = ap.parse_args(argv)
    if a.append:
        return append(a.append[0], a.append[1], a.out)
    if a.merge:
        return merge(a.merge[0], a.merge[1], a.out)
    global COLD
    COLD = not a.warm_l2
    t_start = time.time()
    torch.manual_seed(0)
    groups = [("gemm", gemm_cases(a.quick)), ("attention", attn_cases(a.quick)),
              ("mem", mem_cases(a.quick)), ("memcpy", memcpy_cases(a.quick)),
              ("attention_wide", attn_wide_cases(a.quick)), ("gemm_wide", gemm_wide_cases(a.quick)),
              ("gemm_align", gemm_align_cases(a.quick)),
              ("gemm_align2", gemm_align_cases(a.quick, seed=11, scale=3)),
              ("gemm_small", gemm_small_cases(a.quick)), ("gemm_fp32", gemm_fp32_cases(a.quick)),
              ("attention_fp32", attn_fp32_cases(a.quick)),
              ("attention_fp32_short", attn_fp32_short_cases(a.quick)),
              ("scaled_mm", scaled_mm_cases(a.quick))]
    if a.only:
        keep = set(a.only.split(","))
        groups = [g for g in groups if g[0] in keep]
    else:  # the wide and alignment groups extend a base sweep: ask for them with --only
        groups = [g for g in groups if not g[0].endswith(("_wide", "_align", "_align2", "_small", "_fp32", "_fp32_short",
                                                              "scaled_mm"))]
    # interleave so a budget stop loses a little of every class, not a whole class
    for _, cs in groups:
        random.Random(3).shuffle(cs)
    order = []
    iters = [iter(cs) for _, cs in groups]
    while iters:
        nxt = []
        for it in iters:
            for _ in range(4):
                x = next(it, None)
                if x is None:
                    break
                order.append(x)
            else:
                nxt.append(it)
        iters = nxt
    names = Interner()
    records: list = []
    print(f"{len(order)} cases: " + ", ".join(f"{g}={len(cs)}" for g, cs in groups), flush=True)
    CH = 24
    done = 0
    for s in range(0, len(order), CH):
        if time.time() - t_start > a.budget_s:
            print(f"budget reached after {done} cases", flush=True)
            break
        chunk = order[s:s + CH]
        try:
            run_chunk(chunk, a.repeats, names, records)
        except Exception as e:  # noqa: BLE001 - keep the rest of the sweep
            print(f"chunk {s // CH} failed: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr, flush=True)
            torch.cuda.synchronize()
        done += len(chunk)
        torch.cuda.empty_cache()
        if (s // CH) % 10 == 0:
            print(f"{done}/{len(order)} cases, {len(records)} records, {time.time() - t_start:.0f}s", flush=True)
    props = torch.cuda.get_device_properties(0)
    doc = {
        "schema": SCHEMA,
        "env": {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                "gpu": torch.cuda.get_device_name(0), "sms": props.multi_processor_count,
                "capability": list(torch.cuda.get_device_capability(0)),
                "repeats": a.repeats, "l2": "warm" if a.warm_l2 else "cold",
                "elapsed_s": round(time.time() - t_start, 1),
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "names": names.values,
        "records": records,
    }
    size = _write(doc, a.out)
    print(f"wrote {len(records)} records ({size / 1e6:.1f} MB) in {time.time() - t_start:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
