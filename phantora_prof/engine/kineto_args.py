"""Render captured operator arguments the way torch.profiler records them with
record_shapes=True: `Input Dims`, `Input type`, `Input Strides`, `Concrete Inputs`."""
from __future__ import annotations

from typing import Any

from phantora_prof.protocol import TensorArg

# c10's names for scalar types, as they appear in "Input type".
KINETO_TYPE_NAMES = {
    "float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
    "int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char",
    "uint8": "unsigned char", "bool": "bool", "complex64": "c10::complex<float>",
    "complex128": "c10::complex<double>", "float8_e4m3fn": "c10::Float8_e4m3fn",
    "float8_e5m2": "c10::Float8_e5m2",
}


TENSOR_LIST_DISPLAY_LENGTH_LIMIT = 30


def _concrete(value: Any) -> str:
    """A scalar argument as c10 prints an IValue: a double with an integral value below 1e10 as
    "1." / "0." / "-0." (SDPA's dropout_p "0.", autograd's `pow(x, 1.)`), other doubles with 17
    significant digits ("1.0000000000000001e-05"), ints and bools as they are."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return repr(value)
        if abs(value) < 1e10 and value == int(value):
            return ("-" if value == 0 and str(value).startswith("-") else "") + f"{int(value)}."
        return f"{value:.17g}"
    if isinstance(value, int):
        return str(value)
    return ""


def _is_scalar_list(value: Any) -> bool:
    return isinstance(value, tuple) and all(isinstance(v, (int, float, bool)) for v in value) and len(value) > 0


def shape_args(args: tuple) -> dict[str, list]:
    """The four record_shapes lists for an op's positional arguments."""
    dims: list = []
    types: list = []
    strides: list = []
    concrete: list = []
    for a in args:
        if isinstance(a, TensorArg):
            dims.append(list(a.shape))
            types.append(KINETO_TYPE_NAMES.get(a.dtype, a.dtype))
            strides.append(list(a.stride))
            concrete.append("")
        elif isinstance(a, tuple) and a and all(isinstance(t, TensorArg) or t is None for t in a):
            # the shapes of each tensor, up to torch.profiler's TENSOR_LIST_DISPLAY_LENGTH_LIMIT
            short = len(a) <= TENSOR_LIST_DISPLAY_LENGTH_LIMIT
            dims.append([list(t.shape) if t is not None else [] for t in a] if short else [])
            types.append("TensorList")
            strides.append([list(t.stride) if t is not None else [] for t in a] if short else [])
            concrete.append("")
        elif _is_scalar_list(a):
            dims.append([])
            types.append("ScalarList")
            strides.append([])
            concrete.append("[" + ", ".join(_concrete(v) for v in a) + "]")
        elif isinstance(a, (bool, int, float)):
            dims.append([])
            types.append("Scalar")
            strides.append([])
            concrete.append(_concrete(a))
        else:
            dims.append([])
            types.append("")
            strides.append([])
            concrete.append("")
    return {"Concrete Inputs": concrete, "Input type": types, "Input Strides": strides, "Input Dims": dims}
