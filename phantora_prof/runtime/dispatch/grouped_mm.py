"""`torch._grouped_mm` as a CUDA build runs it: one CUTLASS grouped GEMM, or a loop of `mm`.

A CUDA build's `_grouped_mm` (mixture-of-experts layers: transformers' default "grouped_mm"
experts, torchtitan's MoE) takes its fast path, one grouped-GEMM kernel, only for bf16 inputs
and output on a GPU of compute capability 9.x or 10.x. Everything else (float32 or float16
experts, as an HF model trained in fp32 with autocast runs them: transformers casts the tokens
to the weights' dtype; an A100) runs ATen's fallback: the group ends `offs` copied to the host
(a D2H copy that waits for the GPU), then one `mm` per group into a slice of the output. The
real profile of an fp32 Mixtral step on an H100 (torch 2.11, session 33) shows exactly that:
`aten::to` of the 8 offsets (3.9 ms of it waiting for the GPU), then per expert `select`,
`item`, `slice` and `mm`, the GEMMs cuBLAS's fp32 kernels.

torch's Meta kernel accepts only bf16 (it checks what the fast path needs), so without this
module a CPU-only torch rejects an fp32 `_grouped_mm` that a CUDA build runs. Here the fast
path stays one captured op (its Meta output, costed by `cost.ops.grouped_mm`) and the fallback
runs under the capture mode as the CUDA kernel's body, so each part is captured, recorded and
costed as the real profile shows it. The group sizes come from `offs`'s values, which the
simulation knows when the router's counts were computed from known or synthesized (balanced)
values (values.py); where `offs` has no values (the routing read data that does not exist),
the groups are taken as equal, the balanced routing values.py assumes for a router's counts.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import _disable_current_modes

from phantora_prof.runtime.dispatch import values

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise RuntimeError(msg)


def _transposed_or_not(mat: torch.Tensor) -> None:
    """The layout check the CUDA kernel makes of each operand: one of its last two dims has
    stride 1 and the other a stride that is a multiple of 16 bytes."""
    st, sz = mat.stride(), mat.shape
    align = 16 // mat.element_size()
    if st[-2] == 1 and st[-1] >= max(1, sz[-2]):
        _check(st[-1] % align == 0, "strides should be multiple of 16 bytes")
    elif st[-1] == 1 and st[-2] >= max(1, sz[-1]):
        _check(st[-2] % align == 0, "strides should be multiple of 16 bytes")
    else:
        raise RuntimeError(f"Invalid strides/sizes, got {tuple(st)} for strides and {tuple(sz)} for sizes")


def validate(mat_a: torch.Tensor, mat_b: torch.Tensor, offs: torch.Tensor | None, bias: torch.Tensor | None,
             out_dtype: torch.dtype | None) -> torch.dtype:
    """The CUDA kernel's argument checks (its messages); returns the output dtype."""
    _check(mat_a.dtype in _FLOATS, f"Expected mat_a to be Float32, BFloat16 or Float16 matrix, got {mat_a.dtype}")
    _check(mat_b.dtype in _FLOATS, f"Expected mat_b to be Float32, BFloat16 or Float16 matrix, got {mat_b.dtype}")
    _check(mat_a.dim() in (2, 3), "mat_a has to be 2 or 3d")
    _check(mat_b.dim() in (2, 3), "mat_b has to be 2 or 3d")
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if not (a2 and b2):
        _check(mat_a.shape[-1] == mat_b.shape[-2], "contraction dimension of mat_a and mat_b must match")
    _transposed_or_not(mat_a)
    _transposed_or_not(mat_b)
    _check((offs is not None) == (a2 or b2),
           "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d")
    if offs is not None:
        _check(offs.dim() == 1, "offs has to be 1D")
        _check(offs.dtype == torch.int32, "Offsets have to be int32")
    _check(bias is None, "Bias not supported yet")
    dtype = out_dtype or mat_a.dtype
    _check(dtype == mat_a.dtype, "Grouped gemm output dtype must match `mat_a` dtype")
    return dtype


def takes_fast_path(mat_a: torch.Tensor, mat_b: torch.Tensor, out_dtype: torch.dtype | None,
                    capability: tuple[int, int]) -> bool:
    """Whether a CUDA build runs the one grouped-GEMM kernel (bf16 in and out, sm 9.x / 10.x)."""
    bf16 = mat_a.dtype == mat_b.dtype == torch.bfloat16 and (out_dtype or torch.bfloat16) == torch.bfloat16
    return bf16 and capability[0] in (9, 10)


def _output(mat_a: torch.Tensor, mat_b: torch.Tensor, offs: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """The output as the CUDA kernel allocates it: its last dim padded to 16 bytes in the
    strides (TMA's alignment), so an odd-width output is a strided view."""
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if a2 and b2:
        size = [offs.shape[0], mat_a.shape[0], mat_b.shape[1]]
    elif a2:
        _check(offs.shape[0] == mat_b.shape[0], "matrix batch sizes have to match")
        size = [mat_a.shape[0], mat_b.shape[-1]]
    elif b2:
        _check(offs.shape[0] == mat_a.shape[0], "matrix batch sizes have to match")
        size = [mat_a.shape[1], mat_b.shape[1]]
    else:
        _check(mat_a.shape[0] == mat_b.shape[0], "batched dimension has to match")
        size = [mat_a.shape[0], mat_a.shape[1], mat_b.shape[-1]]
    align = 16 // dtype.itemsize
    padded = -(-size[-1] // align) * align
    stride = [padded, 1] if a2 != b2 else [size[1] * padded, padded, 1]
    return torch.empty_strided(size, stride, dtype=dtype, device=mat_a.device)


def _group_ends(offs: torch.Tensor, total: int) -> list[int]:
    """The groups' ends: `offs`'s values where the simulation knows them, else equal groups."""
    with _disable_current_modes():
        known = values.shadow(offs)
        if known is not None:
            return [int(v) for v in known.tolist()]
    n = offs.shape[0]
    return [(g + 1) * total // n for g in range(n)]


def fallback(mat_a: torch.Tensor, mat_b: torch.Tensor, offs: torch.Tensor | None = None,
             bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """ATen's fallback, op for op: the output, `offs` to the host, one `mm` (out=) per group.

    Groups follow the 2-D operand's split: rows of A (2-D x 3-D, the experts' forward), columns
    of B (3-D x 2-D), the shared dim (2-D x 2-D, the weight gradient: one output per group);
    3-D x 3-D is one `bmm`."""
    dtype = validate(mat_a, mat_b, offs, bias, out_dtype)
    out = _output(mat_a, mat_b, offs, dtype)
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if not (a2 or b2):
        torch.bmm(mat_a, mat_b, out=out)
        return out
    host = offs.cpu()  # the D2H copy: waits for the GPU
    split = mat_b.shape[0] if a2 and b2 else mat_a.shape[0] if a2 else mat_b.shape[1]  # the dim the groups split
    ends = _group_ends(offs, split)
    start = 0
    for g in range(host.shape[0]):
        host[g].item()
        end = ends[g]
        if a2 and not b2:
            torch.mm(mat_a[start:end], mat_b[g], out=out[start:end])
        elif b2 and not a2:
            torch.mm(mat_a[g], mat_b[:, start:end], out=out[:, start:end])
        else:
            torch.mm(mat_a[:, start:end], mat_b[start:end], out=out[g])
        start = end
    return out
