"""torch.cuda.comm's C++ half (broadcast, scatter, gather between GPUs of one process).

`nn.DataParallel` and `torch.cuda.comm` call `torch._C._scatter`, `_gather`,
`_broadcast_coalesced`, ... which only a CUDA build of torch compiles (torch/csrc/cuda/comm.cpp);
on the CPU build the simulator runs on they are missing, and DataParallel stopped at its first
forward (`module 'torch._C' has no attribute '_scatter'`). These are the same operations in
Python, built from the ops a CUDA build's comm.cpp runs: device-to-device copies (`to`, `copy_`
into `narrow` slices), each captured and timed like any copy. Where comm.cpp would use NCCL
(`broadcast` of large tensors across devices) the copies stand in for it (approximate: one
peer copy per device instead of NCCL's ring).
"""
from __future__ import annotations

import functools
import importlib
import sys
from typing import Any, Callable, Sequence

import torch


def _device(d: Any) -> torch.device:
    if isinstance(d, torch.device):
        return d
    return torch.device("cuda", int(d))


def broadcast(tensor: torch.Tensor, devices: Sequence[Any]) -> list[torch.Tensor]:
    """One copy of `tensor` per device; the tensor itself on its own device."""
    return [tensor if tensor.device == _device(d) else tensor.to(_device(d)) for d in devices]


def broadcast_out(tensor: torch.Tensor, out: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
    for o in out:
        o.copy_(tensor)
    return out


def broadcast_coalesced(tensors: Sequence[torch.Tensor], devices: Sequence[Any], buffer_size: int = 0) -> list:
    """Per device, its copies of `tensors` (the originals on the first device, as comm.cpp)."""
    return [list(tensors) if i == 0 else [t.to(_device(d)) for t in tensors] for i, d in enumerate(devices)]


def scatter(tensor: torch.Tensor, devices: Sequence[Any], chunk_sizes: Sequence[int] | None = None, dim: int = 0,
            streams: Any = None) -> tuple:
    """`tensor` split along `dim` (by `chunk_sizes`, else evenly), each chunk on its device
    (non-blocking, as comm.cpp copies)."""
    chunks = tensor.split(list(chunk_sizes), dim) if chunk_sizes else tensor.chunk(len(devices), dim)
    return tuple(c.to(_device(d), non_blocking=True) for c, d in zip(chunks, devices))


def scatter_out(tensor: torch.Tensor, out: Sequence[torch.Tensor], dim: int = 0, streams: Any = None) -> tuple:
    chunks = tensor.split([o.size(dim) for o in out], dim)
    for o, c in zip(out, chunks):
        o.copy_(c, non_blocking=True)
    return tuple(out)


def gather(tensors: Sequence[torch.Tensor], dim: int = 0, destination: Any = None) -> torch.Tensor:
    """The tensors concatenated along `dim` on `destination` (a device index; -1: the CPU;
    None: the current device), each copied into its slice of the result as comm.cpp does."""
    if destination is None:
        where = torch.device("cuda", torch.cuda.current_device())
    elif isinstance(destination, int) and destination < 0:
        where = torch.device("cpu")
    else:
        where = _device(destination)
    first = tensors[0]
    shape = list(first.shape)
    shape[dim] = sum(t.size(dim) for t in tensors)
    result = torch.empty(shape, dtype=first.dtype, device=where)
    return gather_out(tensors, result, dim)


def gather_out(tensors: Sequence[torch.Tensor], out: torch.Tensor, dim: int = 0) -> torch.Tensor:
    offset = 0
    for t in tensors:
        out.narrow(dim, offset, t.size(dim)).copy_(t, non_blocking=True)
        offset += t.size(dim)
    return out


_FUNCTIONS = {"_broadcast": broadcast, "_broadcast_out": broadcast_out, "_broadcast_coalesced": broadcast_coalesced,
              "_scatter": scatter, "_scatter_out": scatter_out, "_gather": gather, "_gather_out": gather_out}


def _one_replica_at_a_time(orig: Callable) -> Callable:
    """DataParallel's `parallel_apply` runs each replica on a thread of its own; the capture
    mode handles one program thread at a time (and autograd's), so here the replicas run one
    after another on the calling thread, each through torch's own code for a single replica
    (its device, stream and autocast state). The host time is then the sum of the replicas'
    dispatch: the real threads share the GIL for their Python and dispatch too (approximate)."""

    @functools.wraps(orig)
    def parallel_apply(modules, inputs, kwargs_tup=None, devices=None):
        n = len(modules)
        if n <= 1:
            return orig(modules, inputs, kwargs_tup, devices)
        kwargs_tup = kwargs_tup if kwargs_tup is not None else ({},) * n
        devices = devices if devices is not None else [None] * n
        return [orig([m], [i], [k], [d])[0] for m, i, k, d in zip(modules, inputs, kwargs_tup, devices, strict=True)]

    return parallel_apply


def install() -> None:
    """Give the CPU build the functions it lacks (a CUDA build keeps its own), and run
    DataParallel's replicas one at a time."""
    for name, fn in _FUNCTIONS.items():
        if not hasattr(torch._C, name):
            setattr(torch._C, name, fn)
    importlib.import_module("torch.nn.parallel.data_parallel")  # loads parallel_apply's module too
    module = sys.modules["torch.nn.parallel.parallel_apply"]
    patched = _one_replica_at_a_time(module.parallel_apply)
    module.parallel_apply = patched
    sys.modules["torch.nn.parallel.data_parallel"].parallel_apply = patched
    torch.nn.parallel.parallel_apply = patched
