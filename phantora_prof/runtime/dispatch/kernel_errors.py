"""The error a CUDA build raises for an op it rejects, in place of the meta kernel's.

An op on the simulated GPU runs as a fake tensor op: torch's meta kernels and Python
decompositions compute its output's shape, and check its inputs in their own words. A CUDA
build checks them in C++ with other words: `nn.Linear(10, 5)` on a (4, 8) input says
"mat1 and mat2 shapes cannot be multiplied (4x8 and 10x5)" on a GPU and "a and b must have same
reduction dim, but got [4, 8] X [10, 5]." here; a broadcast mismatch says "The size of tensor
a (8) must match the size of tensor b (9) at non-singleton dimension 1" on a GPU and
"Attempting to broadcast a dimension of length 9 at -1! ..." here. A user searches the web
for the first.

The CPU kernels check shapes with the CUDA ones' words (the same ATen checks), so the op is
run again on CPU stand-ins of its inputs: zero-strided expansions of one zero (no memory, the
right shapes and dtypes). A kernel that rejects them raises the message to show; one that
accepts them (the meta kernel rejected something else) is discarded and the original error
stands. Ops that write into their inputs are not re-run (an expanded tensor cannot be
written), nor ops over very large inputs (a kernel that accepts would compute for real).
"""
from __future__ import annotations

import logging
import re
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

log = logging.getLogger(__name__)

# Ops whose meta kernels take inputs of mixed dtypes that the CUDA kernels reject (the CPU
# ones reject them too): `bf16_activations @ fp32_weight` ran here and crashed on the GPU.
aten = torch.ops.aten
DTYPE_CHECKED = frozenset({aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
                           aten.mv.default, aten.addmv.default, aten.convolution.default})
# The CPU kernel's words -> the CUDA kernel's, where they differ (Blas.cpp's addmm_out_cuda_impl;
# Convolution.cpp's check_input_same_type_as_parameters, which names CUDA tensor types)
_CUDA_WORDS = (("expected m1 and m2 to have the same dtype", "expected mat1 and mat2 to have the same dtype"),
               (" or input should be a MKLDNN tensor and weight is a dense tensor", ""))
_CPU_TYPE = re.compile(r"\btorch\.(\w+Tensor)\b")

# the largest input (elements) re-run on the CPU: should the kernel accept its stand-ins, it
# computes on them (a copy of 16M zeros: tens of ms, once, on the way to an error)
MAX_ELEMENTS = 1 << 24


def cuda_build_error(func: Any, args: tuple, kwargs: dict) -> RuntimeError | None:
    """The RuntimeError the CPU kernel of `func` raises for inputs of these shapes and dtypes,
    or None (it accepts them, the op writes into an input, or an input is too large)."""
    schema = getattr(func, "_schema", None)
    if schema is None or schema.is_mutable:
        return None
    leaves, _ = tree_flatten((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    if not tensors or any(t.numel() > MAX_ELEMENTS or t.is_sparse for t in tensors):
        return None
    if any(isinstance(x, torch.device) and x.type != "cpu" for x in leaves):
        return None

    def stand_in(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.zeros((), dtype=x.dtype).expand(x.shape)
        return x

    try:
        func(*tree_map(stand_in, args), **tree_map(stand_in, kwargs))
    except RuntimeError as exc:
        if type(exc) is RuntimeError:
            return RuntimeError(str(exc))
    except Exception:  # any other failure: keep the meta kernel's error
        log.debug("re-running %s on the CPU failed", func, exc_info=True)
    return None


def _cuda_type_name(t: torch.Tensor) -> str:
    """A CUDA tensor's legacy type name, as ATen's error messages print it (torch.cuda.HalfTensor)."""
    name = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float32: "Float", torch.float64: "Double"}.get(
        t.dtype, str(t.dtype).replace("torch.", "").capitalize())
    return f"torch.cuda.{name}Tensor"


def _convolution_type_error(args: tuple) -> RuntimeError | None:
    """The CUDA build's check_input_same_type_as_parameters (ATen Convolution.cpp), in its words.
    Built here rather than taken from the CPU kernel: which CPU backend runs the stand-ins (and
    so which words it uses) depends on the CPU's instruction sets (oneDNN's fp16 support: on a
    machine without it the slow kernel says "expected scalar type Half but found Float")."""
    x, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    if not (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor)):
        return None
    if x.dtype != w.dtype:
        return RuntimeError(f"Input type ({_cuda_type_name(x)}) and weight type ({_cuda_type_name(w)}) "
                            f"should be the same")
    if isinstance(bias, torch.Tensor) and bias.dtype != x.dtype:
        return RuntimeError(f"Input type ({_cuda_type_name(x)}) and bias type ({_cuda_type_name(bias)}) "
                            f"should be the same")
    return None


def mixed_dtypes(args: tuple) -> bool:
    """Whether the op's tensor arguments differ in dtype (cheap: asked of every DTYPE_CHECKED op)."""
    return len({a.dtype for a in args if isinstance(a, torch.Tensor)}) > 1


def dtype_mismatch(func: Any, args: tuple, kwargs: dict) -> RuntimeError | None:
    """For an op of DTYPE_CHECKED whose tensor inputs differ in dtype: the error the CUDA
    kernel raises (None when the dtypes agree, or the CPU kernel accepts them)."""
    if not mixed_dtypes(args):
        return None
    if func is aten.convolution.default:
        return _convolution_type_error(args)
    err = cuda_build_error(func, args, kwargs)
    if err is None:
        return None
    text = str(err)
    for cpu, cuda in _CUDA_WORDS:
        text = text.replace(cpu, cuda)
    if "Input type (" in text:  # convolution: the CUDA tensor types
        text = _CPU_TYPE.sub(lambda m: f"torch.cuda.{m.group(1)}", text)
    return RuntimeError(text)
