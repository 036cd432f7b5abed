"""Skinny GEMMs: matmuls with a small inner or output dim over many rows, priced from a sweep.

Which kernel cuBLAS runs for `[m, k] @ [k, n]` with n or k in the single digits is not the one
the GEMM model's curves assume: on Hopper it falls back to CUTLASS's sm80 kernels
(`cutlass_80_wmma_tensorop_..._32x32`, `cutlass_80_tensorop_...`) for n or k of 4, and to narrow
nvjet tiles for 8-32, and it splits m into pieces of up to 2^20 rows. Their time is set by rows,
not by FLOPs or bytes: CaiT's talking-heads projection, `[4917248, 4] @ [4, 4]`, ran five wmma
launches, 483 us, where the curves said one nvjet launch of 79 us; `[1048576, 64] @ [64, 4]`-like
shapes came out 1.6x too slow instead. The measured points (data/skinny_gemm_h100.json, one H100,
bf16, contiguous activations, the weight contiguous or transposed as F.linear passes it) answer
exactly those (n, k, layout) triples from 2^16 rows on, by linear interpolation in m between the
swept row counts and by the last segment's rate beyond them; anything else goes to the usual sources. Measured
on an H100 only: the kernels are latency- and instruction-bound (a tile's few MMAs, unvectorised
loads), so the H200, the same SMs at the same clocks, is priced the same (approximate); other GPUs
are not answered here.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

from phantora_prof.cost import kernels as K
from phantora_prof.protocol import TensorArg

_GPUS = ("h100", "h200")  # the sweep's GPU and the one assumed to run these kernels alike
_DTYPES = ("bfloat16",)
PIECE_ROWS = 1 << 20  # cuBLAS's largest piece of m for these kernels (the sweep's launch counts)


@lru_cache(maxsize=1)
def _points() -> dict[tuple[int, int, str], list[tuple[int, float, str]]]:
    """(n, k, layout) -> [(m, kernel us, longest kernel's name)], m ascending."""
    doc = json.loads(resources.files("phantora_prof").joinpath("cost/data/skinny_gemm_h100.json").read_text())
    out: dict[tuple[int, int, str], list[tuple[int, float, str]]] = {}
    for r in doc["rows"]:
        out.setdefault((r["n"], r["k"], r["layout"]), []).append((r["m"], r["kernel_us"], r["kernel"]))
    for pts in out.values():
        pts.sort()
    return out


def _layout(a: TensorArg, b: TensorArg) -> str | None:
    """'nn' / 'tn' for a contiguous [m, k] activation and a contiguous or transposed [k, n] weight."""
    if len(a.shape) != 2 or len(b.shape) != 2 or a.stride != (a.shape[1], 1):
        return None
    if b.stride == (b.shape[1], 1):
        return "nn"
    if b.stride == (1, b.shape[0]):
        return "tn"
    return None


def _interpolate(pts: list[tuple[int, float, str]], m: int) -> float:
    for (m0, t0, _), (m1, t1, _) in zip(pts, pts[1:]):
        if m <= m1:
            return t0 + (t1 - t0) * (m - m0) / (m1 - m0)
    (m0, t0, _), (m1, t1, _) = pts[-2], pts[-1]
    return t1 + (t1 - t0) * (m - m1) / (m1 - m0)


def estimate(op, base: str, gpu) -> list[K.Kernel] | None:
    """The kernels of an `mm` whose (n, k, layout) the sweep measured on a GPU it answers for;
    None otherwise."""
    if base != "mm" or getattr(gpu, "key", None) not in _GPUS or len(op.args) < 2:
        return None
    a, b = op.args[0], op.args[1]
    if not (isinstance(a, TensorArg) and isinstance(b, TensorArg)) or a.dtype not in _DTYPES or b.dtype != a.dtype:
        return None
    layout = _layout(a, b)
    if layout is None:
        return None
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    pts = _points().get((n, k, layout))
    if not pts or m < pts[0][0]:
        return None  # fewer rows than the sweep's smallest case: the usual sources answer
    total_ns = _interpolate(pts, m) * 1e3
    name = min(pts, key=lambda p: abs(math.log(max(m, 1) / p[0])))[2]
    pieces = max(1, -(-m // PIECE_ROWS))
    out = []
    for i in range(pieces):
        rows = min(PIECE_ROWS, m - i * PIECE_ROWS)
        out.append(K.Kernel(K.KIND_KERNEL, name, int(total_ns * rows / m), (max(1, -(-rows // 32)), 1, 1),
                            (128, 1, 1), flops=2.0 * rows * n * k, source="family"))
    return out
