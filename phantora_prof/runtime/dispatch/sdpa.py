"""scaled_dot_product_attention's backend choice, as a CUDA build of torch makes it, for the simulated GPU.

`F.scaled_dot_product_attention` is torch's own C++ composite (CompositeImplicitAutograd) and
runs unchanged on fake CUDA tensors: validation, autocast's cast, boolean-mask conversion,
head-dim padding, the call of the fused op, autograd's backward op. The one thing a CPU build
lacks is the CUDA kernel of `_fused_sdp_choice_stub`, which picks the backend; without it the
composite takes the math path. native/sdp_choice.cpp gives the stub a CUDA kernel that asks the
`aten::_fused_sdp_choice` op; this module answers that op (the capture mode intercepts it;
`install()` adds CUDA-key and Meta kernels for calls that reach those keys) with
`select_sdp_backend`.

What it mirrors: `select_sdp_backend`, `priority_order`, `check_prefer_cudnn_attention` and
the `can_use_{cudnn,flash,mem_efficient}_attention` filter chains of
aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, with the shared filters of
sdp_utils_cpp.h, for a CUDA build with cuDNN, flash and memory-efficient attention compiled
in (the official Linux wheels), not ROCm. The filters follow torch 2.13.0 (the shared
header is read from the installed 2.13.0 wheel; sdp_utils.cpp from pytorch's history around
the 2.13 branch cut, week of 2026-06-08). The device answers come from the simulated GPU:
compute capability from its GpuSpec, cuDNN runtime version `cuda_api.CUDNN_VERSION`
(91900, the reference H200 machine's). The user's switches are read through torch's API:
`torch.backends.cuda.enable_*_sdp`, `sdpa_kernel(...)` (also `set_priority=True`),
`torch.use_deterministic_algorithms`, TORCH_CUDNN_SDPA_DEPRIORITIZED.

Checked against tests/data/device/h200_sdpa_cases.json (500 calls on a real H200, torch 2.11,
cuDNN 9.19): tests/test_sdpa_rules.py.

Version notes (branches on torch.__version__ only where the change was dated):
- cuDNN refuses a dropout probability that is not a multiple of 1/16 (pytorch#174245, merged
  2026-02-26, after the 2.11 branch cut: torch 2.11 on the H200 takes cuDNN with dropout 0.1):
  torch >= 2.12;
- memory-efficient attention's storage-offset alignment filter (pytorch#184258, merged
  2026-05-18): torch >= 2.13 only;
- cuDNN first in the default priority order on sm90/sm100 (pytorch#162073, "for 2.9"):
  torch >= 2.9; older versions keep torch's default order;
- NOT modelled, from pytorch main after the 2.13 cut: memory-efficient GQA and implicit MQA
  (pytorch#191085, 2026-07-25; the 2.13.0 wheel's sdp_utils_cpp.h predates it).
- Approximate: cuDNN's head-dim limit. Up to 2.12 (and in torch 2.11, measured), sm90 with
  cuDNN >= 9.10 takes head dims up to 256. pytorch#185553 ("d=256 support for cuDNN SDPA",
  opened 2026-05-28) caps it at 128 (192/128 excepted) unless cuDNN > 9.22 and cuDNN frontend
  >= 1.24; whether it landed before the 2.13 cut could not be established here, so the
  measured (pre-#185553) limit is kept.
- Older torch versions (>= 2.5) get 2.13's filters otherwise; their own rules differed in
  places (cuDNN GQA, head-dim limits) and are not reproduced.
Also approximate: CUDA is always "available" and the build always has cuDNN, flash and
memory-efficient attention; a user's own TorchDispatchMode sees `aten::_fused_sdp_choice` go by
(the CUDA build's composite asks the stub directly, no op is dispatched); nested (jagged)
tensors are not simulated: a choice for them raises UnsupportedOpError.
"""
from __future__ import annotations

import logging
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from phantora_prof.errors import UnsupportedOpError

log = logging.getLogger(__name__)

_B = getattr(torch._C, "_SDPBackend")
ERROR = int(_B.ERROR)
MATH = int(_B.MATH)
FLASH = int(_B.FLASH_ATTENTION)
EFFICIENT = int(_B.EFFICIENT_ATTENTION)
CUDNN = int(_B.CUDNN_ATTENTION)
OVERRIDEABLE = int(_B.OVERRIDEABLE) if hasattr(_B, "OVERRIDEABLE") else None

TORCH_VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])

_HALF = (torch.float16, torch.bfloat16)
_FP8_E4M3 = getattr(torch, "float8_e4m3fn", None)


@dataclass(frozen=True)
class Device:
    """What select_sdp_backend reads of the GPU and the build: cudaDeviceProp's major/minor,
    the cuDNN runtime version, and which torch's rules apply ((major, minor); the installed one
    unless a test asks for another)."""
    major: int
    minor: int
    cudnn_version: int
    torch_version: tuple = TORCH_VERSION

    @classmethod
    def of(cls, gpu: Any) -> "Device":
        from phantora_prof.runtime.device.cuda_api import CUDNN_VERSION

        major, minor = gpu.compute_capability
        return cls(int(major), int(minor), CUDNN_VERSION)

    def sm_in(self, lo: tuple[int, int], hi: tuple[int, int]) -> bool:
        return lo <= (self.major, self.minor) <= hi


@dataclass(frozen=True)
class Params:
    """sdp_params: the tensors as the user passed them (the mask before any conversion)."""
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attn_mask: Optional[torch.Tensor]
    dropout: float
    is_causal: bool
    enable_gqa: bool


def _device_type(t: torch.Tensor) -> str:
    fake = getattr(t, "fake_device", None)  # a FakeTensor reports "meta" inside its kernels
    return fake.type if fake is not None else t.device.type


def _requires_grad(p: Params) -> bool:
    return (p.query.requires_grad or p.key.requires_grad or p.value.requires_grad) and torch.is_grad_enabled()


def _nested(p: Params) -> bool:
    return p.query.is_nested or p.key.is_nested or p.value.is_nested


Check = Callable[[Params, Device], Optional[str]]  # None: passes; else why not


# ---- the shared filters (sdp_utils_cpp.h) ----

def _tensor_dtype(p: Params, allowed: tuple) -> Optional[str]:
    q = p.query.dtype
    if q == p.key.dtype == p.value.dtype and q in allowed:
        return None
    return (f"Expected query, key and value to all be of dtype: {{{', '.join(str(a) for a in allowed)}}}. "
            f"Got Query dtype: {q}, Key dtype: {p.key.dtype}, and Value dtype: {p.value.dtype} instead.")


def check_tensor_shapes(p: Params, d: Device) -> Optional[str]:
    if p.query.dim() == p.key.dim() == p.value.dim() == 4:
        return None
    return (f"All fused kernels requires query, key and value to be 4 dimensional, but got Query dim: "
            f"{p.query.dim()}, Key dim: {p.key.dim()}, Value dim: {p.value.dim()} instead.")


def check_all_tensors_on_device(p: Params, d: Device) -> Optional[str]:
    if _device_type(p.query) == "cuda":
        return None
    return f"All tensors need to be on cuda device. Got query on device: {p.query.device}"


def check_for_attn_mask(p: Params, d: Device) -> Optional[str]:
    return None if p.attn_mask is None else "Flash Attention does not support non-null attn_mask."


def check_attn_mask_shape(p: Params, d: Device) -> Optional[str]:
    m = p.attn_mask
    if m is None:
        return None
    why = ("Please use the following attn mask shapes: 2d - ({Q_seq_len, 1}  x {KV_seq_len, 1}); "
           "4d - ({Batch, 1} x {Num_heads, 1} x {Q_seq_len, 1}  x {KV_seq_len, 1})")
    if m.requires_grad:
        return "attn_mask requires grad"

    def compatible(mask_dim: int, dim: int) -> bool:
        return mask_dim == dim or mask_dim == 1

    q = p.query
    if not compatible(m.size(-2), q.size(2)) or not compatible(m.size(-1), p.key.size(2)):
        return why
    if m.dim() == 2:
        return None
    if m.dim() == 4 and compatible(m.size(0), q.size(0)) and compatible(m.size(1), q.size(1)):
        return None
    return why


def check_nonzero_sequence_lengths_dense(p: Params, d: Device) -> Optional[str]:
    if p.query.size(-2) == 0 or p.key.size(-2) == 0:
        return "All fused kernels do not support zero seq_len_q or seq_len_kv."
    return None


def _check_last_dim_stride_equals_1_dense(ignore_singleton_dim: bool) -> Check:
    def check_last_dim_stride_equals_1_dense(p: Params, d: Device) -> Optional[str]:
        ok = p.query.stride(-1) == 1 and p.key.stride(-1) == 1 and p.value.stride(-1) == 1
        if ignore_singleton_dim:
            ok = ok or p.query.size(-1) == 1
        mask_ok = p.attn_mask is None or p.attn_mask.stride(-1) == 1  # required on GPUs (not on the CPU)
        if ok and mask_ok:
            return None
        return (f"All fused kernels require the last dimension of the input to have stride 1. Got Query.stride(-1): "
                f"{p.query.stride(-1)}, Key.stride(-1): {p.key.stride(-1)}, Value.stride(-1): {p.value.stride(-1)}"
                + (f", Attn_mask.stride(-1): {p.attn_mask.stride(-1)}" if p.attn_mask is not None else ""))

    return check_last_dim_stride_equals_1_dense


def _check_grouped_query_attention(p: Params, requires_same_num_heads: bool) -> Optional[str]:
    qh, kh, vh = p.query.size(-3), p.key.size(-3), p.value.size(-3)
    if requires_same_num_heads and kh != vh:
        return (f"Both fused kernels require key and value to have the same num_heads and batch_size but got: "
                f"Key sizes: {tuple(p.key.shape)}, Value sizes: {tuple(p.value.shape)}")
    if kh == 0 or vh == 0 or qh % kh != 0 or (not requires_same_num_heads and qh % vh != 0):
        return (f"The number of heads in key/value must divide number of heads in query. Got input Key sizes(): "
                f"{kh}, Value sizes(): {vh}, Query sizes(): {qh} instead.")
    return None


def _check_batch_size_and_num_heads_dense(supports_gqa: bool, requires_same_num_heads: bool = True) -> Check:
    def check_batch_size_and_num_heads_dense(p: Params, d: Device) -> Optional[str]:
        q, k, v = p.query, p.key, p.value
        if not q.size(0) == k.size(0) == v.size(0):
            return ("For dense inputs, both fused kernels require query, key and value to have the same batch_size. "
                    f"Query.sizes(): {tuple(q.shape)}, Key.sizes(): {tuple(k.shape)}, Value.sizes(): {tuple(v.shape)}")
        if p.enable_gqa and supports_gqa:
            return _check_grouped_query_attention(p, requires_same_num_heads)
        if not q.size(-3) == k.size(-3) == v.size(-3):
            return ("For dense input, both fused kernels require query, key and value to have the same num_heads. "
                    f"Query.sizes(): {tuple(q.shape)}, Key sizes(): {tuple(k.shape)}, Value sizes(): {tuple(v.shape)}")
        return None

    return check_batch_size_and_num_heads_dense


def check_runtime_disabled_flash(p: Params, d: Device) -> Optional[str]:
    return None if torch.backends.cuda.flash_sdp_enabled() else "Flash attention has been runtime disabled."


def check_runtime_disabled_mem_efficient(p: Params, d: Device) -> Optional[str]:
    if torch.backends.cuda.mem_efficient_sdp_enabled():
        return None
    return "Memory Efficient attention has been runtime disabled."


# ---- sdp_utils.cpp ----

def _minimum_gemm_alignment(p: Params, d: Device) -> int:
    is_half = p.query.dtype in _HALF
    use_tc = d.major >= 8 or (d.major >= 7 and is_half)
    alignment = 4 if d.major >= 8 else 1
    if use_tc:
        alignment = max(alignment, 128 // (16 if is_half else 32))
    return alignment


def check_head_dim_size_flash(p: Params, d: Device) -> Optional[str]:
    hq, hk, hv = p.query.size(-1), p.key.size(-1), p.value.size(-1)
    if hq == hk == hv and hq <= 256:
        return None
    return ("Flash attention requires q,k,v to have the same last dimension and to be less than or equal to 256. "
            f"Got Query.size(-1): {hq}, Key.size(-1): {hk}, Value.size(-1): {hv} instead.")


def check_head_dim_size_mem_efficient(p: Params, d: Device) -> Optional[str]:
    a = _minimum_gemm_alignment(p, d)
    hq, hk, hv = p.query.size(-1), p.key.size(-1), p.value.size(-1)
    if hq == hk and hq % a == 0 and hq > 0 and hv % a == 0 and hv > 0:
        return None
    return (f"Mem efficient attention requires last dimension of inputs to be divisible by {a}. "
            f"Got Query.size(-1): {hq}, Key.size(-1): {hk}, Value.size(-1): {hv} instead.")


def check_data_ptr_alignment_mem_efficient(p: Params, d: Device) -> Optional[str]:
    """torch >= 2.13 (pytorch#184258). The caching allocator's blocks are >= 256-byte aligned,
    so a pointer's alignment is that of storage_offset * element_size."""
    if d.torch_version < (2, 13) or _nested(p) or d.major < 8:
        return None
    align = _minimum_gemm_alignment(p, d) * p.query.element_size()

    def aligned(t: torch.Tensor) -> bool:
        return t.numel() == 0 or (t.storage_offset() * t.element_size()) % align == 0

    if aligned(p.query) and aligned(p.key) and aligned(p.value):
        return None
    return (f"Mem efficient attention on sm80 or newer requires q, k, and v storage offsets * element_size to be "
            f"aligned to {align} bytes.")


def check_flash_attention_hardware_support(p: Params, d: Device) -> Optional[str]:
    if d.sm_in((8, 0), (12, 1)):
        return None
    return ("Flash attention only supports gpu architectures in the range [sm80, sm121]. Attempting to run on a "
            f"sm {d.major}.{d.minor} gpu.")


def check_mem_efficient_hardware_support(p: Params, d: Device) -> Optional[str]:
    if d.sm_in((5, 0), (12, 1)):
        return None
    return ("Mem Efficient Attention only supports gpu architectures in the range [sm50, sm121]. Attempting to run "
            f"on a sm {d.major}.{d.minor} gpu.")


def check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120(p: Params, d: Device) -> Optional[str]:
    if _requires_grad(p) and (d.sm_in((8, 6), (8, 9)) or d.sm_in((12, 0), (12, 1))):
        head_dim = p.query.size(-1)
        if head_dim <= 192 or (not p.dropout > 0.0 and head_dim > 224):
            return None
        return ("Flash attention currently doesn't support training with head_dim in (192, 224] or (head_dim in "
                f"(224, 256] and dropout > 0.0) on gpu architectures in the range[sm86, sm89]. Got head_dim {head_dim} "
                f"on a sm {d.major}.{d.minor} gpu.")
    return None


def check_flash_causal_non_square_seqlens(p: Params, d: Device) -> Optional[str]:
    if p.is_causal and not p.query.is_nested and not p.key.is_nested and p.query.size(-2) != p.key.size(-2):
        return ("Flash attention does not support the is_causal flag when seqlen_q != seqlen_k. Got seqlen_q: "
                f"{p.query.size(-2)} seqlen_k: {p.key.size(-2)}.")
    return None


def check_cudnn_dropout(p: Params, d: Device) -> Optional[str]:
    """torch >= 2.12 (pytorch#174245, merged 2026-02-26; torch 2.11 takes cuDNN with dropout 0.1)."""
    if d.torch_version < (2, 12):
        return None
    scaled = p.dropout * 16.0
    if math.isnan(scaled) or (math.isfinite(scaled) and scaled != math.floor(scaled)):
        return "cuDNN dropout probability resolution is limited to 1/16."
    return None


def check_cudnn_tensor_shapes(p: Params, d: Device) -> Optional[str]:
    q, k, v = p.query, p.key, p.value
    max_dim = 65535
    if q.size(0) > max_dim or q.size(1) > max_dim:
        return f"cuDNN SDPA does not support batch size or num_heads greater than {max_dim}."
    s_q, s_k, d_qk, d_v = q.size(2), k.size(2), q.size(3), v.size(3)
    cv = d.cudnn_version
    if cv < 8903:
        return "SDPA fprop requires cudnn 8.9.3 or higher"
    if cv < 8906 and p.dropout != 0.0:
        return "Dropout reference is only supported on 8.9.6 onwards."
    limit = 128
    if cv >= 91000 and d.major == 9 and d.minor == 0:  # Hopper: head_dim <= 256 with cuDNN >= 9.10
        limit = 256
    if cv >= 91100 and d.major == 10 and d_qk == 192 and d_v == 128:  # Blackwell, DeepSeek's dimensions
        limit = 192
    if d_qk > limit or d_v > limit:
        return f"head_dim should be no more than {limit}"
    if d_qk % 8 != 0 or d_v % 8 != 0:
        return "head_dim should be a multiple of 8"
    if cv < 8906 and s_k % 64 != 0:
        return "not-multiple-of-64 seq_kv is not supported below 8.9.6"
    if cv < 90000:
        if s_q < 64:
            return "s_q less than 64 is not supported before cudnn 9.0.0"
        if p.dropout != 0.0 and (s_q % 64 != 0 or s_k % 64 != 0):
            return "s_q not a multiple of 64 with padding/dropout is not supported with cudnn version 9.0.0"
    if s_k == 1:
        return "cudnn SDPA does not support key/value sequence length 1."
    if p.dropout != 0.0 and s_q == 1:
        return "cudnn SDPA does not support query sequence length 1 with dropout."
    return None


def check_cudnn_hardware_support(p: Params, d: Device) -> Optional[str]:
    if d.sm_in((8, 0), (12, 1)):
        return None
    return ("cuDNN MHA only supports gpu architectures in the range [sm80, sm121]. Attempting to run on a sm "
            f"{d.major}.{d.minor} gpu.")


def check_for_nested_inputs(p: Params, d: Device) -> Optional[str]:
    return "Experimental cuDNN SDPA nested tensor support is not enabled." if _nested(p) else None


def check_dtypes_low_precision(p: Params, d: Device) -> Optional[str]:
    return _tensor_dtype(p, _HALF if d.major >= 8 else (torch.float16,))


def check_dtypes_flash_attention(p: Params, d: Device) -> Optional[str]:
    fa3 = getattr(torch._C, "_get_fa3_sdp_enabled", lambda: False)()
    if d.major >= 9 and fa3 and _FP8_E4M3 is not None:
        return _tensor_dtype(p, (_FP8_E4M3, torch.float16, torch.bfloat16))
    return check_dtypes_low_precision(p, d)


def check_runtime_disabled_cudnn(p: Params, d: Device) -> Optional[str]:
    return None if torch.backends.cuda.cudnn_sdp_enabled() else "cuDNN attention has been runtime disabled."


def check_cudnn_deterministic(p: Params, d: Device) -> Optional[str]:
    if torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled():
        return "cuDNN SDPA is not deterministic."
    return None


def _first_failure(p: Params, d: Device, checks: tuple) -> Optional[str]:
    for check in checks:
        why = check(p, d)
        if why is not None:
            return why
    return None


_CUDNN_GENERAL = (check_runtime_disabled_cudnn, check_for_nested_inputs, check_all_tensors_on_device,
                  check_tensor_shapes, check_cudnn_deterministic, check_dtypes_low_precision, check_attn_mask_shape,
                  check_cudnn_hardware_support, check_cudnn_dropout)
_CUDNN_DENSE = (check_nonzero_sequence_lengths_dense, _check_last_dim_stride_equals_1_dense(True),
                _check_batch_size_and_num_heads_dense(True, requires_same_num_heads=False), check_cudnn_tensor_shapes)

_FLASH_GENERAL = (check_runtime_disabled_flash, check_all_tensors_on_device, check_tensor_shapes, check_for_attn_mask,
                  check_head_dim_size_flash, check_flash_attention_hardware_support,
                  check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120,
                  check_flash_causal_non_square_seqlens, check_dtypes_flash_attention)
_FLASH_DENSE = (_check_batch_size_and_num_heads_dense(True), check_nonzero_sequence_lengths_dense,
                _check_last_dim_stride_equals_1_dense(True))

_MEM_EFFICIENT_GENERAL = (check_runtime_disabled_mem_efficient, check_all_tensors_on_device,
                          check_mem_efficient_hardware_support, check_tensor_shapes, check_head_dim_size_mem_efficient,
                          check_data_ptr_alignment_mem_efficient)
_MEM_EFFICIENT_DENSE = (check_nonzero_sequence_lengths_dense, _check_last_dim_stride_equals_1_dense(False),
                        _check_batch_size_and_num_heads_dense(False))


def why_not_cudnn(p: Params, d: Device) -> Optional[str]:
    """can_use_cudnn_attention: None when cuDNN attention can run these inputs, else the first reason."""
    if p.dropout > 0.0 and 91100 < d.cudnn_version < 91400:
        return "cuDNN version does not support dropout in SDPA (9.11 - 9.13)."
    return _first_failure(p, d, _CUDNN_GENERAL) or (None if _nested(p) else _first_failure(p, d, _CUDNN_DENSE))


def why_not_flash(p: Params, d: Device) -> Optional[str]:
    """can_use_flash_attention, as why_not_cudnn."""
    return _first_failure(p, d, _FLASH_GENERAL) or (None if _nested(p) else _first_failure(p, d, _FLASH_DENSE))


def why_not_mem_efficient(p: Params, d: Device) -> Optional[str]:
    """can_use_mem_efficient_attention, as why_not_cudnn."""
    why = _first_failure(p, d, _MEM_EFFICIENT_GENERAL)
    if why is None and not _nested(p):
        why = _first_failure(p, d, _MEM_EFFICIENT_DENSE)
    if why is None:
        why = _tensor_dtype(p, (torch.float16, torch.float32, torch.bfloat16) if d.major >= 8
                            else (torch.float16, torch.float32))
    return why


# ---- priority and selection ----

_priority_initialised = False  # sdp_utils.cpp's priority_order_init_: one process-wide first-use switch


def _env_flag(name: str) -> Optional[bool]:
    """c10::utils::check_env: "1"/"true"... -> True, "0"/"false"... -> False, unset -> None."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    raw = raw.strip().lower()
    if raw in ("1", "true", "yes", "on", "y"):
        return True
    if raw in ("0", "false", "no", "off", "n"):
        return False
    return None


def prefer_cudnn(d: Device) -> bool:
    """check_prefer_cudnn_attention: cuDNN first on sm90/sm100 (and sm103) with cuDNN > 9.15."""
    if d.torch_version < (2, 9):
        return False
    if _env_flag("TORCH_CUDNN_SDPA_DEPRIORITIZED") is True:
        return False
    return d.cudnn_version > 91500 and d.major in (9, 10) and d.minor in (0, 3)


def priority_order(d: Device) -> list[int]:
    """The backends in the order select_sdp_backend tries them: torch's global priority order
    (`torch._C._get_sdp_priority_order()`, which `sdpa_kernel(..., set_priority=True)` sets), after
    the first call made it cuDNN-first where the device prefers cuDNN, as the C++ does."""
    global _priority_initialised
    get = getattr(torch._C, "_get_sdp_priority_order", None)
    if not _priority_initialised:
        _priority_initialised = True
        if get is not None and prefer_cudnn(d):
            torch._C._set_sdp_priority_order([CUDNN, FLASH, EFFICIENT, MATH])
    if get is None:  # torch without a settable order
        return [FLASH, EFFICIENT, MATH, CUDNN]
    return [int(b) for b in get()]


def select_backend(p: Params, d: Device) -> int:
    """select_sdp_backend: the first backend in priority order whose filters pass; ERROR when
    every backend is switched off; RuntimeError("No available kernel...") when none can run."""
    cuda = torch.backends.cuda
    math_on = cuda.math_sdp_enabled()
    if not (math_on or cuda.flash_sdp_enabled() or cuda.mem_efficient_sdp_enabled() or cuda.cudnn_sdp_enabled()):
        return ERROR
    for backend in priority_order(d):
        if backend == CUDNN:
            if why_not_cudnn(p, d) is None:
                return CUDNN
        elif backend == FLASH:
            if why_not_flash(p, d) is None:
                return FLASH
        elif backend == EFFICIENT:
            if why_not_mem_efficient(p, d) is None:
                return EFFICIENT
        elif backend == MATH:
            if math_on:
                return MATH
        elif backend == OVERRIDEABLE:
            if getattr(torch._C, "_get_overrideable_sdp_enabled", lambda: False)():
                raise RuntimeError("Invalid backend")
        else:
            raise RuntimeError("Invalid backend")
    for label, why in (("Memory efficient kernel", why_not_mem_efficient(p, d)),
                       ("Flash attention kernel", why_not_flash(p, d)),
                       ("cuDNN attention kernel", why_not_cudnn(p, d))):
        warnings.warn(f"{label} not used because: {why}", stacklevel=2)
    raise RuntimeError("No available kernel. Aborting execution.")


_DEVICES: dict = {}


def _device() -> Device:
    from phantora_prof.runtime.process import state as _state

    gpu = _state.get().gpu
    d = _DEVICES.get(id(gpu))
    if d is None:
        d = _DEVICES[id(gpu)] = Device.of(gpu)
    return d


def fused_sdp_choice(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0, is_causal: bool = False, *,
                     scale: Optional[float] = None, enable_gqa: bool = False, device: Optional[Device] = None) -> int:
    """`aten::_fused_sdp_choice` as `_fused_sdp_choice_cuda` answers it on the simulated GPU."""
    p = Params(query, key, value, attn_mask, float(dropout_p), bool(is_causal), bool(enable_gqa))
    if _nested(p):
        raise UnsupportedOpError(
            "phantora-prof cannot simulate scaled_dot_product_attention on nested tensors (NestedTensor "
            "query/key/value): pad the batch to dense tensors, or run this part on the CPU")
    backend = select_backend(p, device if device is not None else _device())
    if backend == ERROR:
        raise RuntimeError("No viable backend for scaled_dot_product_attention was found. This is likely due to "
                           "turning off both the math kernel and the fused kernels.")
    return backend


def answers(args: tuple) -> bool:
    """Whether the capture mode answers this `_fused_sdp_choice` call (a CUDA query; a CPU one is
    torch's own CPU choice)."""
    return bool(args) and isinstance(args[0], torch.Tensor) and _device_type(args[0]) == "cuda"


_LIBRARY: Any = None  # keeps the registrations alive


def install() -> None:
    """On a CPU build: route the stub to the op (native/sdp_choice.cpp) and give the op a CUDA
    kernel (reached with the Python key excluded) and a Meta kernel (a FakeTensorMode runs it;
    the stock one asks the stub again) that answer with `fused_sdp_choice`."""
    global _LIBRARY
    if _LIBRARY is not None or torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_sdp_choice", "CUDA"):
        return  # a CUDA build: torch's own selection runs (for the real GPU)
    from phantora_prof.runtime.process import native_loader

    lib = torch.library.Library("aten", "IMPL")

    def cuda_kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                    enable_gqa=False):
        return fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                                enable_gqa=enable_gqa)

    def meta_kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                    enable_gqa=False):
        if _device_type(query) != "cuda":
            return MATH  # as _fused_sdp_choice_meta for a non-CUDA query
        return cuda_kernel(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)

    lib.impl("_fused_sdp_choice", cuda_kernel, "CUDA")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel" (Meta): intended
        lib.impl("_fused_sdp_choice", meta_kernel, "Meta")
    _LIBRARY = lib
    _install_build_queries()
    if not native_loader.route_sdp_choice():
        log.warning("the native library is not loaded: scaled_dot_product_attention takes the math path")


def _params_of(params: Any) -> Params:
    """Params from torch.backends.cuda.SDPAParams (what `can_use_*_attention` take)."""
    return Params(params.query, params.key, params.value, params.attn_mask, float(params.dropout),
                  bool(params.is_causal), bool(getattr(params, "enable_gqa", False)))


def _can_use(why_not: Callable[[Params, Device], Optional[str]], label: str) -> Callable[..., bool]:
    def can_use(params: Any, debug: bool = False) -> bool:
        why = why_not(_params_of(params), _device())
        if why is not None and debug:
            warnings.warn(f"{label} not used because: {why}", stacklevel=2)
        return why is None

    can_use.__name__ = f"can_use_{label.split()[0].lower()}_attention"
    return can_use


def _install_build_queries() -> None:
    """torch.backends.cuda's questions about attention backends answered as a CUDA wheel answers
    them (a CPU build says no): `is_flash_attention_available()` (compiled into the official
    Linux wheels) and `can_use_{flash,efficient,cudnn}_attention` from the same filters as the
    backend choice, for the simulated GPU. `is_built()` stays False: torch's own modules read it
    as "torch._C has the CUDA bindings" (cudagraph_trees imports them when it says True)."""
    cuda = torch.backends.cuda
    cuda.is_flash_attention_available = lambda: True
    cuda.can_use_flash_attention = _can_use(why_not_flash, "Flash attention kernel")
    cuda.can_use_efficient_attention = _can_use(why_not_mem_efficient, "Memory efficient kernel")
    cuda.can_use_cudnn_attention = _can_use(why_not_cudnn, "cuDNN attention kernel")
