"""Shape functions (Meta kernels) for CUDA-only aten ops that torch ships without one.

The simulated device takes the paths a CUDA build takes (cuda_dispatch.py, the cuDNN answers
of native/fake_cuda.cpp), so it reaches ops that exist only as CUDA kernels. FakeTensor needs
a Meta kernel to know their outputs; torch has one for most (`_cudnn_rnn`, `cudnn_batch_norm`),
not for these, so they are given here, written from the ops' schemas and what their CUDA
implementations return:

- `_cudnn_rnn_flatten_weight` (nn.RNN.flatten_parameters): one flat buffer holding every
  weight, the weights turned into views of it (their old storages are freed, as on the GPU).
- `_cudnn_rnn_backward`: gradients shaped like the input, hx, cx and the weights.
- `_cudnn_rnn` (torch has one, but it returns no weight buffer when the weights were not
  flattened, which the backward then needs, and a reserve space of 0 bytes): the weight
  buffer cuDNN builds, and the training reserve space measured on an H200 (torch 2.11,
  cuDNN 9.19, measure/device_facts.py): seq x batch x hidden x element size x (k x layers - 1)
  bytes, k = 6 for LSTM and 7 for GRU, within 0.01% on 12 configurations; k = 2 for plain
  tanh / ReLU RNNs is an estimate (not measured). Its output is time-major in memory, a
  transposed view when batch_first, as ATen's cuDNN path returns it.
- `_ctc_loss` (int-list lengths) and `_ctc_loss_backward`: the CUDA kernels' outputs.
- `_thnn_fused_gru_cell` and its backward (nn.GRUCell), `_masked_softmax` and its backward
  (the inference fast path of nn.MultiheadAttention and nn.TransformerEncoderLayer).
- `_sample_dirichlet` and `binomial` (torch.distributions' Dirichlet, Beta and Binomial samples), the
  backward of `multi_margin_loss` and `multilabel_margin_loss`: outputs shaped like their input.
- `cudnn_grid_sampler` and its backward (F.grid_sample, bilinear, zero padding, align_corners:
  ATen's `grid_sampler` takes cuDNN's spatial transformer for 4-D float inputs with at most
  1,024 channels; RAFT's correlation lookups): the output [N, C, H_grid, W_grid] contiguous
  (cuDNN writes NCHW whatever the input's layout), gradients shaped like the input and grid.
- SyncBatchNorm's ops (`batch_norm_stats`, `batch_norm_gather_stats[_with_counts]`,
  `batch_norm_elemt`, `batch_norm_backward_reduce`, `batch_norm_backward_elemt`,
  `batch_norm_update_stats`): per-channel statistics in the accumulation type (float for half,
  bfloat16 and float inputs), element-wise outputs in the input's suggested memory format.
- Fake quantization (quantization-aware training: torch.ao.quantization's FakeQuantize and
  LearnableFakeQuantize, `torch.fake_quantize_per_{tensor,channel}_affine`): the output like the
  input and the boolean mask of in-range elements ATen caches for the backward; the learnable
  variants' backward returns gradients shaped like the input, the scale and the zero point.
"""
from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger(__name__)

_LIBRARY: Any = None


def _flatten_weight(weight_arr, weight_stride0, input_size, mode, hidden_size, proj_size, num_layers,
                    batch_first, bidirectional):
    from phantora_prof.runtime.dispatch import values

    ws = list(weight_arr)
    total = sum(w.numel() for w in ws)
    with values.real_cpu_work():  # small weights' values (values.py), read before they move
        known = [values.shadow(w) for w in ws]
        known = [None if v is None else v.clone() for v in known]
    buf = torch.empty(total, dtype=ws[0].dtype, device=ws[0].device)
    offset = 0
    for w in ws:
        w.set_(buf.untyped_storage(), offset, w.shape, w.stride() if w.is_contiguous() else
               torch._prims_common.make_contiguous_strides_for(w.shape))
        offset += w.numel()
    if all(v is not None for v in known) and values.small(buf):
        with values.real_cpu_work():  # the weights keep their values, now in the flat buffer
            values.give_shadow(buf, torch.cat([v.reshape(-1) for v in known]))
    return buf


def _rnn_backward(input, weight, weight_stride0, weight_buf, hx, cx, output, grad_output, grad_hy, grad_cy, mode,
                  hidden_size, proj_size, num_layers, batch_first, dropout, train, bidirectional, batch_sizes,
                  dropout_state, reserve, output_mask):
    dx = torch.empty_like(input) if output_mask[0] else None
    dhx = torch.empty_like(hx) if output_mask[1] else None
    dcx = torch.empty_like(cx) if (output_mask[2] and cx is not None) else None
    dw = [torch.empty_like(w) for w in weight] if output_mask[3] else []
    return dx, dhx, dcx, dw


_RESERVE_PER_LAYER = {2: 6, 3: 7, 0: 2, 1: 2}  # cudnnRNNMode_t -> k (see the module docstring)


def _rnn(input, weight, weight_stride0, weight_buf, hx, cx, mode, hidden_size, proj_size, num_layers, batch_first,
         dropout, train, bidirectional, batch_sizes, dropout_state):
    packed = len(batch_sizes) != 0
    dirs = 2 if bidirectional else 1
    out_size = proj_size if proj_size != 0 else hidden_size
    if packed:
        steps_x_batch = input.shape[0]
        batch = batch_sizes[0]
        out_shape = [input.shape[0], out_size * dirs]
    else:
        seq, batch = (input.shape[1], input.shape[0]) if batch_first else (input.shape[0], input.shape[1])
        steps_x_batch = seq * batch
        out_shape = [seq, batch, out_size * dirs]
    output = input.new_empty(out_shape)
    if batch_first and not packed:
        # cuDNN writes time-major; ATen hands back output.transpose(0, 1), so a batch-first
        # output is not contiguous, and what follows (a Linear: reshape copy, mm, add of the
        # bias instead of one addmm) runs as on the GPU
        output = output.transpose(0, 1)
    hy = hx.new_empty([num_layers * dirs, batch, out_size])
    cy = cx.new_empty([num_layers * dirs, batch, hidden_size]) if cx is not None else input.new_empty(0)
    k = _RESERVE_PER_LAYER.get(int(mode), 2)
    reserve_bytes = steps_x_batch * hidden_size * input.element_size() * (k * num_layers - 1) * dirs if train else 0
    reserve = input.new_empty(reserve_bytes, dtype=torch.uint8)
    if weight_buf is None:
        weight_buf = input.new_empty(sum(w.numel() for w in weight), dtype=weight[0].dtype)
    return output, hy, cy, reserve, weight_buf


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    """CTC loss with int-list lengths (known on the host): the negative log-likelihood per
    sequence and log_alpha of (batch, frames, 2 x longest target + 1), as the CUDA kernel sizes
    them. (The Tensor-lengths overload reads its lengths from the GPU: capture.ctc_loss_outputs.)"""
    longest = targets.shape[1] if targets.dim() == 2 else max(target_lengths, default=0)
    batch = log_probs.shape[1] if log_probs.dim() == 3 else 1
    return (log_probs.new_empty((batch,)), log_probs.new_empty((batch, log_probs.shape[0], 2 * longest + 1)))


def _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                       blank, zero_infinity=False):
    """The gradient of the log-probabilities: a fresh contiguous tensor shaped like them."""
    return log_probs.new_empty(log_probs.shape)


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """at::toAccumulateType(dtype, is_cuda=true) for floating types: float for half, bfloat16 and float."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _suggested_empty_like(t: torch.Tensor) -> torch.Tensor:
    """at::empty_like(t, t.suggest_memory_format())."""
    return torch.empty_like(t, memory_format=torch._prims_common.suggest_memory_format(t))


# SyncBatchNorm's ops (torch/nn/modules/_functions.py), CUDA kernels of aten/native/cuda/Normalization.cu
def _bn_stats(input, eps):
    """(mean, invstd) per channel, in the accumulation type."""
    c = input.shape[1]
    acc = _acc_dtype(input.dtype)
    return input.new_empty((c,), dtype=acc), input.new_empty((c,), dtype=acc)


def _bn_gather_stats(input, mean, invstd, running_mean, running_var, momentum, eps, count):
    """The group's (mean, invstd) per channel from every rank's; running stats updated in place."""
    c = mean.shape[-1]
    return mean.new_empty((c,)), mean.new_empty((c,))


def _bn_elemt(input, weight, bias, mean, invstd, eps):
    return _suggested_empty_like(input)


def _bn_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    """(sum_dy, sum_dy_xmu) like mean when input_g; grad_weight, grad_bias like weight per flag."""
    c = input.shape[1]
    sum_dy = mean.new_empty(mean.shape) if input_g else None
    sum_dy_xmu = mean.new_empty(mean.shape) if input_g else None
    wopts = weight if weight is not None else mean
    grad_weight = wopts.new_empty((c,)) if weight_g else None
    grad_bias = wopts.new_empty((c,)) if bias_g else None
    return sum_dy, sum_dy_xmu, grad_weight, grad_bias


def _bn_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    return _suggested_empty_like(input)


def _bn_update_stats(input, running_mean, running_var, momentum):
    """(mean, var) per channel in the accumulation type; running stats updated in place."""
    return _bn_stats(input, 0.0)


# nn.GRUCell's fused CUDA kernels (aten/native/cuda/RNN.cu; LSTM's have Meta kernels in torch)
_GRU_WORKSPACE = 5  # GRU_WORKSPACE_MULTIPLIER: the workspace holds 5 x hidden values per row


def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """(hy, workspace): hy like hx, the workspace (batch, 5 x hidden) the backward reads."""
    return torch.empty_like(hx, memory_format=torch.contiguous_format), \
        hx.new_empty((hx.shape[0], hx.shape[1] * _GRU_WORKSPACE))


def _gru_cell_backward(grad_hy, workspace, has_bias):
    """(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)."""
    hidden = workspace.shape[1] // _GRU_WORKSPACE
    gates = (workspace.new_empty((workspace.shape[0], 3 * hidden)), workspace.new_empty((workspace.shape[0], 3 * hidden)))
    bias = (workspace.new_empty((3 * hidden,)), workspace.new_empty((3 * hidden,))) if has_bias else (None, None)
    return gates[0], gates[1], torch.empty_like(grad_hy, memory_format=torch.contiguous_format), bias[0], bias[1]


# nn.MultiheadAttention's / TransformerEncoderLayer's inference fast path
def _masked_softmax(input, mask, dim=None, mask_type=None):
    return torch.empty_like(input, memory_format=torch.contiguous_format)


def _masked_softmax_backward(grad_output, output, mask, dim=None):
    return torch.empty_like(grad_output, memory_format=torch.contiguous_format)


def _cudnn_grid_sampler(self, grid):
    n, c = self.shape[0], self.shape[1]
    return self.new_empty((n, c, grid.shape[1], grid.shape[2]))


def _cudnn_grid_sampler_backward(self, grid, grad_output):
    return (torch.empty_like(self, memory_format=torch.contiguous_format),
            torch.empty_like(grid, memory_format=torch.contiguous_format))


# random samplers of torch.distributions (Dirichlet, Beta, Binomial) and margin losses' backward
def _sample_dirichlet(alpha, generator=None):
    return torch.empty_like(alpha, memory_format=torch.contiguous_format)


def _binomial(count, prob, generator=None):
    return torch.empty_like(count, memory_format=torch.contiguous_format)


def _multi_margin_loss_backward(grad_output, input, target, p, margin, weight=None, reduction=1):
    return torch.empty_like(input, memory_format=torch.contiguous_format)


def _multilabel_margin_loss_backward(grad_output, input, target, reduction, is_target):
    return torch.empty_like(input, memory_format=torch.contiguous_format)


# fake quantization (QAT): element-wise ops, outputs like the input (ATen's CUDA kernels allocate
# them with `at::empty_like`, keeping the input's memory format)
def _fake_quant_cachemask(self, *args, **kwargs):
    return torch.empty_like(self), torch.empty_like(self, dtype=torch.bool)


def _fake_quant_learnable(self, *args, **kwargs):
    return torch.empty_like(self)


def _fake_quant_learnable_backward(grad, self, scale, zero_point, *args, **kwargs):
    return torch.empty_like(self), torch.empty_like(scale), torch.empty_like(zero_point)


_META = {
    "fake_quantize_per_tensor_affine_cachemask": _fake_quant_cachemask,
    "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams": _fake_quant_cachemask,
    "fake_quantize_per_channel_affine_cachemask": _fake_quant_cachemask,
    "_fake_quantize_learnable_per_tensor_affine": _fake_quant_learnable,
    "_fake_quantize_learnable_per_channel_affine": _fake_quant_learnable,
    "_fake_quantize_learnable_per_tensor_affine_backward": _fake_quant_learnable_backward,
    "_fake_quantize_learnable_per_channel_affine_backward": _fake_quant_learnable_backward,
    "cudnn_grid_sampler": _cudnn_grid_sampler,
    "cudnn_grid_sampler_backward": _cudnn_grid_sampler_backward,
    "_sample_dirichlet": _sample_dirichlet,
    "binomial": _binomial,
    "multi_margin_loss_backward": _multi_margin_loss_backward,
    "multilabel_margin_loss_backward": _multilabel_margin_loss_backward,
    "_thnn_fused_gru_cell": _gru_cell,
    "_thnn_fused_gru_cell_backward": _gru_cell_backward,
    "_masked_softmax": _masked_softmax,
    "_masked_softmax_backward": _masked_softmax_backward,
    "batch_norm_stats": _bn_stats,
    "batch_norm_gather_stats": _bn_gather_stats,
    "batch_norm_gather_stats_with_counts": _bn_gather_stats,  # counts a tensor: the same outputs
    "batch_norm_elemt": _bn_elemt,
    "batch_norm_backward_reduce": _bn_backward_reduce,
    "batch_norm_backward_elemt": _bn_backward_elemt,
    "batch_norm_update_stats": _bn_update_stats,
    "_cudnn_rnn": _rnn,
    "_cudnn_rnn_flatten_weight": _flatten_weight,
    "_cudnn_rnn_backward": _rnn_backward,
    "_ctc_loss": ctc_loss,
    "_ctc_loss_backward": _ctc_loss_backward,
    "_ctc_loss_backward.Tensor": _ctc_loss_backward,
}


def install() -> None:
    """Register the Meta kernels above (idempotent)."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    for name, fn in _META.items():
        lib.impl(name, fn, "Meta", allow_override=True)
    _LIBRARY = lib
