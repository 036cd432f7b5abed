"""Kernel categories: which kind of GPU work each kernel, memcpy and memset is.

A category is decided from the activity's Kineto category, the kernel name, and the op
that launched it (the innermost `cpu_op` enclosing the launch), so that the same work gets
the same category across torch/CUDA versions (whose kernel names differ: nvjet vs cutlass
vs sm90_xmma GEMMs, cudnn vs flash attention) and in simulated traces. Rules, first match
wins:

1. `gpu_memcpy` -> memcpy, `gpu_memset` -> memset (by Kineto category, never by name).
2. communication: the kernel name contains "nccl" (as HTA decides it), or the launching
   op is a collective (`nccl:*`, `record_param_comms`, `c10d::*`, `_c10d_functional::*`).
3. optimizer: launched inside an `Optimizer.step#...` annotation, or by an optimizer op
   (`_fused_adam*`, `_fused_sgd*`, `_foreach_*`, `_amp_foreach_*`), or a
   `multi_tensor_apply` / fused-adam kernel.
4. by the launching op's name: attention (`attention`, `flash`, `sdpa`, `fmha`),
   GEMM (`mm`, `addmm`, `bmm`, `baddbmm`, `linear`, `matmul`, `_scaled_mm`, `addmv`,
   `mv`, `dot`, `convolution`...), normalization (`layer_norm`, `rms_norm`,
   `batch_norm`, `group_norm`, `instance_norm`), reduction (`sum`, `mean`, `softmax`,
   `log_softmax`, `nll_loss`, `cross_entropy`, `norm`, `amax`, `argmax`, `var`, `std`, ...).
5. by the kernel name: attention (`flash`, `fmha`, `sdpa`, `attention`), GEMM (`nvjet`,
   `cutlass`, `gemm`, `xmma`, `cublas`, `wgmma`..., and cuDNN's convolution helpers
   `nhwcAddPadding`, `nchwToNhwc`, `nhwcToNchw`), normalization (`layer_norm`,
   `layernorm`, `rms_norm`, `GammaBetaBackward`...), reduction (`reduce_kernel`,
   `softmax`, `nll_loss`, cub reductions, triton `red`/`per` kernels).
6. elementwise: everything else (copies, casts, pointwise math, fills, indexing, sorts).

The op name wins over the kernel name (step 4 before 5): an `aten::sum` that reduces a
GEMM's bias gradient is a reduction, a `aten::copy_` inside `aten::matmul` elementwise.
"""
from __future__ import annotations

import re
from functools import lru_cache

CATEGORIES = ("gemm", "attention", "elementwise", "reduction", "normalization", "optimizer",
              "memcpy", "memset", "communication")
COMPUTE_CATEGORIES = ("gemm", "attention", "elementwise", "reduction", "normalization", "optimizer")

_COMM_OP = re.compile(r"^(nccl:|record_param_comms|c10d::|_c10d_functional|c10d_functional|"
                      r"aten::_allgather|gloo:)", re.I)
_OPT_OP = re.compile(r"_fused_adam|_fused_sgd|_fused_adagrad|^aten::_foreach_|_amp_foreach_|"
                     r"^Optimizer\.(step|zero_grad)", re.I)
_OPT_KERNEL = re.compile(r"multi_tensor_apply|fused_adam|FusedAdam|adam_kernel|lamb_", re.I)

_ATTN_OP = re.compile(r"attention|flash|sdpa|fmha", re.I)
_GEMM_OP = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|addbmm|linear|matmul|_scaled_mm|addmv|mv|dot|"
                      r"vdot|_addmm_activation|_int_mm|einsum|convolution|_convolution|"
                      r"cudnn_convolution\w*|conv\w*|_grouped_mm|_scaled_grouped_mm)$", re.I)
_NORM = re.compile(r"layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|GammaBetaBackward|"
                   r"cuApplyLayerNorm|cuComputeGradInput|cuComputePartGradGammaBeta", re.I)
_RED_OP = re.compile(r"^aten::(sum|mean|nansum|prod|amax|amin|max|min|aminmax|argmax|argmin|all|any|"
                     r"_?softmax|_?log_softmax|_softmax_backward_data|_log_softmax_backward_data|"
                     r"nll_loss\w*|cross_entropy\w*|norm|linalg_vector_norm|_foreach_norm|var|std|"
                     r"var_mean|std_mean|logsumexp|cumsum|cumprod|count_nonzero)$", re.I)
_ATTN_KERNEL = re.compile(r"flash|fmha|sdpa|attention|attn", re.I)
# cuDNN's convolution helpers (operand padding, NCHW <-> NHWC transforms) count as the GEMM work
# they serve; their argument lists mention cudnn::reduced_divisor, which is no reduction
_GEMM_KERNEL = re.compile(r"nvjet|cutlass|gemm|xmma|cublas|wgmma|hmma|s884|h884|s1688|h1688|"
                          r"splitKreduce|triton_tem_fused_mm|triton_.*_mm_|implicit_convolve|"
                          r"nhwcAddPadding|nchwToNhwc|nhwcToNchw", re.I)
_RED_KERNEL = re.compile(r"reduce_kernel|Reduce(?!d_divisor)|softmax|SoftMax|nll_loss|cross_entropy|"
                         r"norm_kernel|triton_red_|triton_per_|cub::.*Reduce(?!d_divisor)|tensor_kernel_scan", re.I)


@lru_cache(maxsize=65536)
def categorize(gpu_cat: str, kernel: str, op: str, in_optimizer: bool) -> str:
    """The category of one GPU activity (see the module docstring for the rules)."""
    if gpu_cat == "gpu_memcpy":
        return "memcpy"
    if gpu_cat == "gpu_memset":
        return "memset"
    if "nccl" in kernel.lower() or (op and _COMM_OP.search(op)):
        return "communication"
    if in_optimizer or (op and _OPT_OP.search(op)) or _OPT_KERNEL.search(kernel):
        return "optimizer"
    if op:
        if _ATTN_OP.search(op):
            return "attention"
        if _GEMM_OP.search(op):
            return "gemm"
        if _NORM.search(op):
            return "normalization"
        if _RED_OP.search(op):
            return "reduction"
    if _ATTN_KERNEL.search(kernel):
        return "attention"
    if _GEMM_KERNEL.search(kernel):
        return "gemm"
    if _NORM.search(kernel):
        return "normalization"
    if _RED_KERNEL.search(kernel):
        return "reduction"
    return "elementwise"
