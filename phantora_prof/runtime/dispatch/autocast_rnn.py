"""cuDNN RNNs under CUDA autocast, as a CUDA build runs them.

A CUDA build registers an Autocast kernel for `aten::_cudnn_rnn` (ATen's
`cudnn/AutocastRNN.cpp`, `_cudnn_rnn_cast_reflatten`, compiled only with cuDNN): inside
`torch.autocast("cuda")`, whatever its dtype, an RNN whose weights are not already fp16 gets
- a new flat fp16 weight buffer (`aten::zeros`), one view of it per weight (`aten::empty` +
  `aten::set_`) and a cast copy of each weight into its view (`aten::view_as` + `aten::copy_`):
  autograd records these, so the backward runs a `CopyBackwards` node per weight;
- its input, hx and cx cast to fp16 (`aten::to`);
- the cuDNN RNN itself in fp16, forward and backward (`_cudnn_rnn_backward` on Half tensors).
A CPU build has no such kernel, so the simulated GPU ran the RNN in fp32 under autocast: a
bf16-autocast Sequencer2D (timm, blind set 16) was simulated with fp32 LSTMs, no casts and no
reflattening, 2x short on the host and +36% in peak memory. This module registers the same
wrapper for the AutocastCUDA key where the installed torch has none.

The flat buffer holds the weights back to back in the module's order (w_ih, w_hh[, b_ih, b_hh]
[, w_hr] per layer and direction), each as a [numel, 1] view: cuDNN's own layout for the
profiled LSTMs (92,928 elements for a bidirectional 192 -> 48 layer, the weights' sum); any
alignment padding cuDNN adds for other shapes is not modelled.
"""
from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)

_LIBRARY: torch.library.Library | None = None
_AUTOCAST = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)


def _eligible(t: torch.Tensor | None) -> bool:
    """ATen autocast's is_eligible for CUDA: a defined floating-point CUDA tensor, not double."""
    return (t is not None and t.device.type == "cuda" and t.is_floating_point()
            and t.dtype is not torch.float64)


def _half(t: torch.Tensor | None) -> torch.Tensor | None:
    """cached_cast(kHalf, t): cast only an eligible tensor that is not fp16 already."""
    return t.to(torch.float16) if _eligible(t) and t.dtype is not torch.float16 else t


def _flat_views(weights: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """copy_weights_to_flat_buf_views: an fp16 buffer, a [numel, 1] view of it per weight (in the
    weights' order) and each weight copied (cast) into its view."""
    total = sum(w.numel() for w in weights)
    buf = torch.zeros(total, dtype=torch.float16, device=weights[0].device)
    views, offset = [], 0
    for w in weights:
        n = w.numel()
        views.append(torch.empty(0, dtype=torch.float16, device=buf.device).set_(
            buf.untyped_storage(), offset, (n, 1), (1, 1)))
        offset += n
    for w, v in zip(weights, views):
        v.copy_(w.view_as(v))
    return buf, views


def _cast_reflatten(input, weight, weight_stride0, weight_buf, hx, cx, mode, hidden_size, proj_size, num_layers,
                    batch_first, dropout, train, bidirectional, batch_sizes, dropout_state):
    """The AutocastCUDA kernel of aten::_cudnn_rnn (ATen's _cudnn_rnn_cast_reflatten)."""
    with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST):
        weight = list(weight)
        needs = (_eligible(weight_buf) and weight_buf.dtype is not torch.float16) if weight_buf is not None \
            else (_eligible(weight[0]) and weight[0].dtype is not torch.float16)
        if needs:
            weight_buf, weight = _flat_views(weight)
        # C++ evaluates the call's arguments right to left: cx, hx, then the input
        cx, hx = _half(cx), _half(hx)
        return torch.ops.aten._cudnn_rnn.default(
            _half(input), weight, weight_stride0, weight_buf, hx, cx, mode, hidden_size, proj_size, num_layers,
            batch_first, dropout, train, bidirectional, batch_sizes, dropout_state)


def install() -> bool:
    """Register the wrapper where this torch has no AutocastCUDA kernel for _cudnn_rnn (a CPU
    build); True when registered."""
    global _LIBRARY
    if _LIBRARY is not None:
        return True
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::_cudnn_rnn", "AutocastCUDA"):
        return False
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_cudnn_rnn", _cast_reflatten, "AutocastCUDA")
    _LIBRARY = lib
    log.debug("aten::_cudnn_rnn given a CUDA build's autocast wrapper (fp16 weights reflattened)")
    return True
