"""`ctc_loss` with length tensors, as ATen runs it for the plain tensors of a CUDA run.

ATen's `ctc_loss.Tensor` (LossCTC.cpp) is a CompositeImplicitAutograd kernel with two paths. For
plain tensors where cuDNN does not take the call, it reads the lengths to the host
(`.to("cpu", long)`) and runs the int-list overload, whose mean reduction divides the loss by the
target lengths made on the loss's device. For tensor subclasses it keeps the lengths as tensors
and divides by them where they are. Under the simulator every tensor is subclass-like, so a
script with CPU length tensors and a CUDA loss (torch's own CTCLoss example makes them so) got
a device-mismatch error from that division, which a GPU run does not raise
(tools/holdout/real_h200/session49/ordinary_ops_cuda.txt). This registers the plain-tensor path
for the AutogradCUDA key, ahead of the composite kernel; where cuDNN takes the call the composite
runs as before. On the way it makes the MIOpen check's int copy of the targets to the CPU (a
DtoH copy and a sync when they are on the GPU) that a CUDA build makes.
"""
from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)

_LIBRARY: torch.library.Library | None = None
_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd


def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank: int = 0, reduction: int = 1,
              zero_infinity: bool = False):
    aten = torch.ops.aten
    if log_probs.device.type != "cuda" or aten._use_cudnn_ctc_loss.Tensor(
            log_probs, targets, input_lengths, target_lengths, blank):
        return aten.ctc_loss.Tensor._op_dk(_COMPOSITE, log_probs, targets, input_lengths, target_lengths, blank,
                                           reduction, zero_infinity)
    checked = targets.to(torch.int) if targets.device.type == "cpu" else targets.to("cpu", torch.int)
    aten._use_miopen_ctc_loss.Tensor(log_probs, checked, input_lengths, target_lengths, blank)
    il = input_lengths.to("cpu", torch.long).contiguous().tolist()
    tl = target_lengths.to("cpu", torch.long).contiguous().tolist()
    return aten.ctc_loss.IntList(log_probs, targets, il, tl, blank, reduction, zero_infinity)


def install() -> None:
    """Register the plain-tensor path of ctc_loss.Tensor for CUDA tensors (once per process)."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("ctc_loss.Tensor", _ctc_loss, "AutogradCUDA")
    _LIBRARY = lib
    log.debug("aten::ctc_loss.Tensor takes the plain-tensor path on the simulated GPU")
