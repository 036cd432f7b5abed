"""What host code sees of a simulated CUDA tensor: its text, its format, numpy's refusal.

Simulated CUDA tensors are torch FakeTensors, whose repr is `FakeTensor(..., device='cuda:0',
size=(4,))` and whose `__format__` rejects every format spec: under the simulator
`print(loss)` showed that placeholder and `print(f"loss {loss:.4f}")` raised a TypeError, where
a real run prints `tensor(2.3026, device='cuda:0', grad_fn=<NllLossBackward0>)` and `2.3026`.

Here a simulated CUDA tensor prints as torch prints a CUDA tensor: the values it has (small
tensors carry their real values, `runtime/dispatch/values.py`), zeros where the data does not
exist (the same placeholder `.item()` and `.cpu()` give), torch's own number formatting
(`torch.set_printoptions` applies) and torch's suffixes (device, dtype, grad_fn,
requires_grad, "Parameter containing:"). A 0-d tensor formats through `.item()`, as torch's
`Tensor.__format__` does for plain tensors.

Cost, approximate on purpose: printing a real CUDA tensor runs a few ops on the GPU (the
summary of a large tensor) and reads elements back with device-to-host copies. Here it costs
one device-to-host copy of what is shown (the whole tensor up to torch's print threshold, the
summary above it) and the sync that comes with it, through the capture path like any `.cpu()`.

`t.numpy()` and `np.array(t)` raise the TypeError a CUDA tensor raises (FakeTensor's own
message was a RuntimeError about tensor subclasses); `t.numpy(force=True)` copies to the host
first, as torch does.

Other FakeTensors (torch.compile's tracing, a program's own FakeTensorMode) keep torch's behaviour.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import FakeTensor

log = logging.getLogger(__name__)

_PREFIX = "tensor("
_installed = False


def install(is_simulated: Callable[[torch.Tensor], bool]) -> None:
    """Show the tensors for which `is_simulated(t)` holds to host code as CUDA tensors (idempotent)."""
    global _installed
    if _installed:
        return
    torch_repr, torch_format, torch_numpy = FakeTensor.__repr__, FakeTensor.__format__, FakeTensor.numpy

    def __repr__(self: FakeTensor, *, tensor_contents: Any = None) -> str:
        if not is_simulated(self):
            return torch_repr(self, tensor_contents=tensor_contents)
        return cuda_tensor_repr(self, tensor_contents)

    def __format__(self: FakeTensor, format_spec: str) -> str:
        if self.dim() == 0 and is_simulated(self):
            return self.detach().item().__format__(format_spec)
        return torch_format(self, format_spec)

    def numpy(self: FakeTensor, *, force: bool = False) -> Any:
        if not is_simulated(self):
            return torch_numpy(self, force=force)
        if force:
            return self.detach().cpu().resolve_conj().resolve_neg().numpy()
        raise TypeError(f"can't convert {self.device} device type tensor to numpy. "
                        "Use Tensor.cpu() to copy the tensor to host memory first.")

    FakeTensor.__repr__ = __repr__  # type: ignore[method-assign]
    FakeTensor.__format__ = __format__  # type: ignore[method-assign]
    FakeTensor.numpy = numpy  # type: ignore[method-assign]
    _installed = True


def cuda_tensor_repr(t: torch.Tensor, tensor_contents: Any = None) -> str:
    """torch's text for a dense CUDA tensor `t`, its values read through a device-to-host copy."""
    from torch._tensor_str import PRINT_OPTS, _add_suffixes, _tensor_str

    indent = len(_PREFIX)
    suffixes: list[str] = []
    if t.device.type != torch._C._get_default_device() or torch.cuda.current_device() != t.device.index:
        suffixes.append(f"device='{t.device}'")
    default_dtypes = (torch.get_default_dtype(),
                      torch.cdouble if torch.get_default_dtype() == torch.double else torch.cfloat,
                      torch.int64, torch.bool)
    if t.numel() == 0:
        if t.dim() != 1:
            suffixes.append(f"size={tuple(t.shape)}")
        if t.dtype != torch.get_default_dtype():
            suffixes.append(f"dtype={t.dtype}")
        body = "[]" if tensor_contents is None else str(tensor_contents)
    else:
        if not PRINT_OPTS.edgeitems:
            suffixes.append(f"size={tuple(t.shape)}")
        if t.dtype not in default_dtypes:
            suffixes.append(f"dtype={t.dtype}")
        body = _tensor_str(host_copy_for_print(t), indent) if tensor_contents is None else str(tensor_contents)
    grad_fn = t.grad_fn
    if grad_fn is not None:
        name = type(grad_fn).__name__
        suffixes.append(f"grad_fn=<{grad_fn.name().rsplit('::', 1)[-1] if name == 'CppFunction' else name}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    text = _add_suffixes(_PREFIX + body, suffixes, indent, force_newline=False)
    return "Parameter containing:\n" + text if getattr(t, "_is_param", False) else text


def host_copy_for_print(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor of `t`'s shape with the values a print shows, after charging the copy.

    Up to the print threshold the whole tensor is copied (`.cpu()`: shadow values or zeros).
    Above it only the summary torch would read is copied, and the text is made from `t`'s
    values when it has them, else from zeros that take no memory (an expanded scalar)."""
    from torch._tensor_str import PRINT_OPTS, get_summarized_data

    from phantora_prof.runtime.dispatch import values

    t = t.detach()
    if t.numel() <= PRINT_OPTS.threshold:
        return t.cpu()
    get_summarized_data(t).cpu()  # the copy a real print makes; its values are the ones below
    known = values.shadow(t)
    if known is not None:
        return known.clone()
    return torch.zeros((), dtype=t.dtype).expand(t.shape)
