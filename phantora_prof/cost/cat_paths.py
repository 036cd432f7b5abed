"""Which way a CUDA build's `torch.cat` copies its inputs (ATen's cat_out_cuda, torch 2.5-2.11).

The CUDA kernel has three ways (Shape.cu, with the flags cat's meta function computes in
TensorShape.cpp):
1. every input contiguous in the output's memory format, all of the output's dtype, more than
   one input, at most 4 dims, 32-bit indexable: the batched copy kernels (CatArrayBatchedCopy*,
   128 inputs a launch);
2. the same but with strided inputs, when the output is in the contiguous memory format: the
   batched copy kernels that read strides (64 inputs a launch);
3. otherwise (inputs of another dtype than the output, one input, more than 4 dims, ...): per
   input, `result.narrow(dim, offset, size)` and a copy into it. The narrow is a dispatcher
   call (a profile shows aten::narrow > aten::slice > aten::as_strided inside aten::cat); the
   copy is ATen's `copy_` called directly, so a profile shows its kernel launch inside
   aten::cat with no aten::copy_ record.

Way 3 is common in Hugging Face decoders under autocast: the rotary embedding makes the keys fp32
while the values stay bf16, so the key/value cache's `cat([empty fp32, values bf16])` promotes
to fp32 and copies with a casting kernel (HF Phi-3 on the H100: 16 such cats per step, one
elementwise copy each, 38 us, where the batched kernel was priced at 56 us; its partial-rotary
`cat([q_embed fp32, q_pass bf16])` 30 us against 107). Ways 1 and 2 are priced from the cat
sweeps (cost/families.py); way 3 as its copies (cost/__init__.py `_cat_copy_split`).

An input is skipped (no narrow, no copy) when it is 1-D and empty, the legacy placeholder HF's
caches start from (`cat_should_skip_tensor`).

`torch.stack` on CUDA is a cat (ATen's `stack`, TensorShape.cpp): along a dim the inputs have, a
cat of the inputs themselves viewed to the stacked shape (a profile shows aten::stack >
aten::cat, aten::view); along a new last dim, a cat of the inputs unsqueezed there. So a stack
of 5-D tensors takes way 3 (timm Hiera's `UnbindBackward0` stacks its three 5-D gradients: two
device-to-device memcpys and a strided copy per call on an H100, where the batched kernel was
priced at half their time); `as_cat` gives the cat it runs.
"""
from __future__ import annotations

from collections.abc import Sequence

from phantora_prof.cost.memory_format import dense_in, dense_strides, suggested_format
from phantora_prof.protocol import TensorArg

MAX_BATCHED_DIMS = 4  # CAT_ARRAY_MAX_INPUT_DIMS
_INT32_MAX = 2**31 - 1


def skipped(t: TensorArg) -> bool:
    """cat_should_skip_tensor: a 1-D tensor of no elements."""
    return len(t.shape) == 1 and t.shape[0] == 0


def wrap_dim(dim: int, inputs: Sequence[TensorArg]) -> int:
    """legacy_cat_wrap_dim: a negative dim counts from the first input that is not skipped."""
    ref = next((t for t in inputs if not skipped(t)), None)
    ndim = len(ref.shape) if ref is not None else 1
    return dim % ndim if ndim else 0


def _indexable_32bit(t: TensorArg) -> bool:
    """canUse32BitIndexMath: the elements and the furthest offset fit in int32."""
    if t.numel > _INT32_MAX:
        return False
    return sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride) if n > 0) < _INT32_MAX


def _contiguous_in(t: TensorArg, fmt: str) -> bool:
    """`t.is_contiguous(memory_format)`: no elements, or dense in that format."""
    return t.numel == 0 or dense_in(t.shape, t.stride, fmt)


def output_format(inputs: Sequence[TensorArg]) -> str:
    """cat_compute_output_memory_format: "c" as soon as one input suggests contiguous or two
    inputs suggest different formats, else the format they all suggest ("cl")."""
    fmt = None
    for t in inputs:
        f = suggested_format(t.shape, t.stride)
        if f == "c" or (fmt is not None and fmt != f):
            return "c"
        fmt = f
    return fmt or "c"


def copies_per_input(inputs: Sequence[TensorArg], out: TensorArg) -> bool:
    """Whether a CUDA build's cat of `inputs` into `out` takes way 3 (a narrow and a copy per
    input) rather than the batched copy kernels."""
    if out.numel == 0:
        return False  # nothing runs
    valid = [t for t in inputs if not skipped(t)]
    if not valid:
        return False
    fmt = output_format(inputs)
    same_dtype = all(t.dtype == out.dtype for t in inputs)
    all_contiguous = len(valid) == len(inputs) and all(_contiguous_in(t, fmt) for t in valid)
    common = (len(inputs) > 1 and len(out.shape) <= MAX_BATCHED_DIMS and _indexable_32bit(out)
              and all(_indexable_32bit(t) for t in inputs) and same_dtype)
    if common and all_contiguous:
        return False
    if common and len(valid[0].shape) <= MAX_BATCHED_DIMS and fmt == "c":
        return False
    return True


def as_cat(inputs: Sequence[TensorArg], out: TensorArg, dim: int) -> tuple[list[TensorArg], TensorArg, int] | None:
    """The cat a CUDA build's `stack(inputs, dim)` runs: (its inputs, its output, its dim), or
    None when the stack is not one cat of dense inputs this model knows (inputs of unequal
    shapes, an output in another memory format than the contiguous one)."""
    if not inputs or any(t.shape != inputs[0].shape for t in inputs):
        return None
    ndim = len(inputs[0].shape)
    dim = dim % (ndim + 1)
    if output_format(inputs) != "c" or out.numel == 0:
        return None
    if dim < ndim:  # cat along dim, viewed to the stacked shape
        shape = list(inputs[0].shape)
        shape[dim] *= len(inputs)
        return list(inputs), TensorArg(tuple(shape), dense_strides(tuple(shape)), out.dtype, out.device), dim
    # a new last dim: each input unsqueezed there (unsqueeze's stride for a trailing dim is 1)
    cat_in = [TensorArg(tuple(t.shape) + (1,), tuple(t.stride) + (1,), t.dtype, t.device) for t in inputs]
    return cat_in, TensorArg(tuple(out.shape), dense_strides(out.shape), out.dtype, out.device), dim


def copied_slices(inputs: Sequence[TensorArg], out: TensorArg, dim: int) -> list[tuple[TensorArg, TensorArg]]:
    """(input, the output's slice it is copied into) for each input way 3 copies: every input
    not skipped, in order (an input of no elements is narrowed and copies nothing)."""
    dim = wrap_dim(dim, inputs)
    pairs = []
    for t in inputs:
        if skipped(t):
            continue
        shape = tuple(out.shape[:dim]) + (t.shape[dim],) + tuple(out.shape[dim + 1:])
        pairs.append((t, TensorArg(shape, out.stride, out.dtype, out.device)))
    return pairs
