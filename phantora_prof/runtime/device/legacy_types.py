"""`torch.cuda.FloatTensor(3, 4)` and the other legacy CUDA tensor types, on the simulated GPU.

Older scripts build tensors with the legacy type objects (`torch.cuda.LongTensor(ids)`,
`torch.cuda.FloatTensor(n, d).fill_(0)`). torch's own type objects refuse to construct
anything in a build without CUDA ("type torch.cuda.FloatTensor not available"), so each is
replaced by a class of the same name and module that builds the tensor on the simulated GPU,
as a CUDA build does: sizes give an uninitialised tensor, a sequence its values, nothing an
empty one. `isinstance(t, torch.cuda.FloatTensor)` asks torch's own type object, and
`t.type(torch.cuda.HalfTensor)` reads the name (`torch.cuda.HalfTensor`), as before.
"""
from __future__ import annotations

from typing import Any

import torch

NAMES = ("FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "ByteTensor", "CharTensor",
         "ShortTensor", "IntTensor", "LongTensor", "BoolTensor")


class _LegacyCudaType(type):
    """Metaclass of the stand-ins: construction on the simulated GPU, instance checks by torch's type."""

    def __call__(cls, *args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        if kwargs:
            raise TypeError(f"{cls.__name__}() got unexpected keyword arguments {sorted(kwargs)}")
        where = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        if not args:
            return torch.empty(0, dtype=cls.dtype, device=where)
        if len(args) == 1 and isinstance(args[0], torch.Tensor):
            return args[0].to(device=where, dtype=cls.dtype)
        if all(isinstance(a, int) for a in args) or (len(args) == 1 and isinstance(args[0], torch.Size)):
            return torch.empty(*args, dtype=cls.dtype, device=where)
        if len(args) == 1:
            return torch.tensor(args[0], dtype=cls.dtype, device=where)
        raise TypeError(f"{cls.__name__}(): expected sizes, a sequence or a tensor, got {args!r}")

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.original)

    def __subclasscheck__(cls, sub: Any) -> bool:
        return sub is cls or issubclass(sub, cls.original)


def install() -> None:
    for name in NAMES:
        original = getattr(torch.cuda, name, None)
        if original is None or isinstance(original, _LegacyCudaType):
            continue
        # named as torch's type object is ("torch.cuda.HalfTensor"): `Tensor.type(cls)` reads the name
        stand_in = _LegacyCudaType(f"torch.cuda.{name}", (), {
            "dtype": original.dtype, "original": original, "is_cuda": True, "__module__": "torch.cuda",
            "__qualname__": name, "__doc__": f"torch.cuda.{name} on the simulated GPU"})
        setattr(torch.cuda, name, stand_in)
