"""Allocations without a tensor of their own, modelled because the real run makes them
(measured in the reference trace of memory_probe.py, step 2):

- cuBLAS workspaces (CublasHandlePool.cpp): the first GEMM on a (thread, stream) allocates a
  workspace that stays allocated for the life of the process: `CUBLAS_WORKSPACE_CONFIG` if set,
  else 32 MiB on sm90 and 8,519,680 B (:4096:2:16:8) elsewhere.  An addmm with a 1-D bias goes
  through cuBLASLt, whose workspace is separate, per (thread, stream), `CUBLASLT_WORKSPACE_SIZE`
  KiB (default 1 MiB).  Forward and backward run on different threads (the autograd engine's
  device thread), so the GPT holds 2 x 32 MiB + 1 MiB: exactly the 75,628,544 + 1,048,576 bytes
  by which the real run's allocated memory exceeded parameters + gradients + AdamW states.
- CUDA reductions across thread blocks (ATen's Reduce.cuh: sum, mean, norm, amax, var, ...) take
  a staging buffer and semaphores for the duration of the kernel; `reduction_scratch`
  reproduces setReduceConfig (the bias gradients' sums over 8192 rows take 50, 138 and 139 MB).
- cuDNN attention: a forward workspace of one 512 B block, a backward one of dQ accumulator and
  softmax sums (fp32, B*H*S*(D+1): 25,559,552 B here); flash attention's backward takes the
  same kind of buffers.  Embedding backward (sort-based, > 3072 indices) takes its sort
  buffers, cub scratch and per-segment partial sums (27 MB here).
- The autograd engine sums gradients arriving at the same input in place (InputBuffer), but not
  for tensor subclasses such as the FakeTensors of the simulation: `inplace_source` makes such a
  sum reuse the incoming gradient's block, as the real run does (24 residual-stream sums of
  25 MB per GPT step).
- The CUDA context (CONTEXT_BYTES) is outside the caching allocator: it only lowers what
  `mem_get_info()` reports free and where the allocator runs out of memory.
"""
from __future__ import annotations

import threading
from typing import Any

from phantora_prof.runtime.device.allocator import _models
from phantora_prof.cost import CONTIGUOUS_OPERANDS, CONV_OPERANDS, FORMAT_OPERANDS, SOFTMAX_OPERANDS, copied_operands
from phantora_prof.cost.kernels import reduce_block

# ---------------------------------------------------------------- CUDA reductions' scratch

def _div_up(a: int, b: int) -> int:
    return (a + b - 1) // b


def reduction_scratch(shape: tuple[int, ...], strides: tuple[int, ...], elem_size: int, reduce_dims: set[int],
                      acc_size: int, num_sms: int, max_threads_per_sm: int = 2048,
                      max_threads: int = 512) -> tuple[int, int]:
    """(global staging buffer bytes, semaphore bytes) that ATen's gpu_reduce_kernel takes from the
    caching allocator for one reduction (Reduce.cuh setReduceConfig; (0, 0) when the reduction
    stays within a block).  `strides` in elements; `acc_size`: sizeof(arg_t)."""
    # TensorIterator: drop size-1 dims, reduced dims first, each group by ascending input stride,
    # then coalesce neighbours that are contiguous with each other.
    dims = [(shape[d], strides[d] * elem_size, d in reduce_dims) for d in range(len(shape)) if shape[d] != 1]
    numel = 1
    for n in shape:
        numel *= n
    if numel == 0:
        return 0, 0
    red = sorted((x for x in dims if x[2]), key=lambda x: x[1])
    keep = sorted((x for x in dims if not x[2]), key=lambda x: x[1])

    def coalesce(group):
        out = []
        for size, stride, r in group:
            if out and out[-1][1] * out[-1][0] == stride:
                out[-1] = (out[-1][0] * size, out[-1][1], r)
            else:
                out.append((size, stride, r))
        return out

    red, keep = coalesce(red), coalesce(keep)
    num_outputs = 1
    for size, _, _ in keep:
        num_outputs *= size
    inputs_per_output = numel // num_outputs
    ndim = len(red) + len(keep)
    output_vec_size = 1
    if ndim > 0:
        on_fastest = not keep or (bool(red) and red[0][1] < keep[0][1])
        if not red:
            on_fastest = False
        if on_fastest:
            dim0, dim1 = inputs_per_output, num_outputs
            fastest = red[0][1] if red else elem_size
        else:
            dim0, dim1 = num_outputs, inputs_per_output
            fastest = keep[0][1]
    else:
        on_fastest, fastest, dim0, dim1 = True, elem_size, 1, 1
    if fastest == elem_size:
        if on_fastest and dim0 > 128 and len(red) == 1:
            # torch sets vectorize_input here: 4 inputs per thread
            dim0 //= 4
        elif not on_fastest:
            vec = 4
            sizes_to_check = [keep[0][0]] + [st // elem_size for _, st, _ in red + keep[1:]]
            for n in sizes_to_check:
                while n % vec != 0:
                    vec //= 2
            output_vec_size = vec
            dim0 //= output_vec_size
    block_width, block_height = reduce_block(dim0, dim1, max_threads // output_vec_size)
    num_threads = block_width * block_height
    step_input = step_output = 1
    block_x_reduce = block_y_reduce = False
    if ndim == 0 or on_fastest:
        step_input *= block_width
        block_x_reduce = True
    else:
        step_output *= block_width
    vpt = _div_up(inputs_per_output, step_input)
    if vpt >= block_height * 16 or vpt >= 256:
        step_input *= block_height
        block_y_reduce = True
    else:
        step_output *= block_height
    target_grid = num_sms * (max_threads_per_sm // num_threads)
    grid_x = _div_up(num_outputs // output_vec_size, step_output)
    vpt = _div_up(inputs_per_output, step_input)
    if not (block_y_reduce and vpt >= 256 and grid_x <= target_grid):
        return 0, 0
    ctas = max(min(_div_up(target_grid, grid_x), _div_up(vpt, 16)), _div_up(vpt, 256))
    if ctas <= 1:
        return 0, 0
    size = acc_size * num_outputs * ctas
    if not block_x_reduce:
        size *= block_width * output_vec_size
    return size, 4 * grid_x


# reductions through gpu_reduce_kernel: op name -> (index of the dim argument or None for all dims,
# accumulator kind)
_REDUCTIONS = {
    "aten::sum": (1, "opmath"), "aten::nansum": (1, "opmath"), "aten::mean": (1, "opmath"),
    "aten::prod": (1, "opmath"), "aten::amax": (1, "same"), "aten::amin": (1, "same"),
    "aten::linalg_vector_norm": (2, "opmath"), "aten::norm": (2, "opmath"),
    "aten::any": (1, "bool"), "aten::all": (1, "bool"), "aten::argmax": (1, "pair"), "aten::argmin": (1, "pair"),
    "aten::max": (1, "pair"), "aten::min": (1, "pair"), "aten::std": (1, "welford"), "aten::var": (1, "welford"),
    "aten::var_mean": (1, "welford"), "aten::std_mean": (1, "welford"),
}


def _acc_size(kind: str, dtype: Any) -> int:
    name = str(dtype)
    is_float = any(k in name for k in ("float", "half", "bfloat"))
    if kind == "bool":
        return 1
    if kind == "welford":
        return 32 if "float64" in name else 16
    if kind == "pair":
        return 16
    if kind == "same":
        return 8 if ("float64" in name or "int64" in name) else (2 if ("16" in name) else 4)
    if is_float:
        return 8 if "float64" in name else 4
    return 8  # integer sums accumulate in int64


def _reduce_dims(name: str, args: tuple, kwargs: dict, ndim: int) -> set[int] | None:
    idx, _ = _REDUCTIONS[name]
    dim = kwargs.get("dim", args[idx] if len(args) > idx else None)
    if name in ("aten::max", "aten::min") and not isinstance(dim, int):
        dim = None  # max(t): a full reduction
    if isinstance(dim, bool) or (dim is not None and not isinstance(dim, (int, list, tuple))):
        dim = None  # an overload without dims (sum(t, dtype), norm(t, p))
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return set(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return {d % ndim for d in dims if isinstance(d, int)} if ndim else set()


GROUPED_MM_WORKSPACE = 67584  # bytes: CUTLASS grouped GEMM's workspace on the H200 (8 groups, bf16)

# ops that run cuBLAS GEMMs (and so take the handle's workspace on first use)
GEMM_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::addmv", "aten::mv",
    "aten::dot", "aten::vdot", "aten::_addmm_activation", "aten::_scaled_mm", "aten::_int_mm", "aten::addr",
})


# ops that clone a non-contiguous operand inside (cost.CONTIGUOUS_OPERANDS: layer norms; SOFTMAX_OPERANDS:
# a softmax over the last dim of a strided view), one in
# another memory format than cuDNN runs them in (cost.CONV_OPERANDS: convolutions), or one not dense
# in its own suggested format (cost.FORMAT_OPERANDS: upsampling backwards)
CLONING_OPS = frozenset("aten::" + base for base in (*CONTIGUOUS_OPERANDS, *CONV_OPERANDS, *FORMAT_OPERANDS,
                                                      *SOFTMAX_OPERANDS))


def _clones(m: Any, name: str, args: tuple) -> list:
    """Blocks for the contiguous clones of the operands the op copies before its kernels
    (cost.copied_operands); the caller frees them (`_free`) when the op ends."""
    return [m.malloc(args[i].numel() * args[i].element_size()) for i in copied_operands(name, args)]


def _free(m: Any, blocks: list) -> None:
    for b in reversed(blocks):
        m.free(b)


def _through_cublaslt(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether a GEMM goes through cuBLASLt (its own workspace): an addmm with a 1-D bias and
    beta 1, a scaled (fp8) mm. `args` hold tensors or TensorArgs."""
    if name in ("aten::addmm", "aten::_addmm_activation"):
        bias = args[0] if args else None
        beta = kwargs.get("beta", args[3] if len(args) > 3 else 1)
        return len(getattr(bias, "shape", ())) == 1 and beta == 1
    return name == "aten::_scaled_mm"


def note_compiled_extern(name: str, args: tuple, kwargs: dict, device: int = 0) -> None:
    """A compiled graph's extern call (Inductor's `extern_kernels.mm / addmm / bmm(..., out=)`,
    runtime/compile/runner.py): a GEMM takes the cuBLAS / cuBLASLt workspaces of its (thread,
    stream) on first use, as an eager one does. The compiled two-block MLP of
    tests/scripts/compiled.py on an H100 (session 56, a memory snapshot) held 32 MiB + 1 MiB from
    its forward graph's first addmm and 32 MiB from its backward graph's first mm (autograd's
    thread), which the simulation left out: its steady peak was 189 MB against 257 MB."""
    m = _models.get(device)
    if m is not None and name in GEMM_OPS:
        m.gemm(lt=_through_cublaslt(name, args, kwargs))


def note_op(name: str, args: tuple, kwargs: dict, out: Any, device: int = 0) -> None:
    """Allocations an op makes besides its outputs, after the outputs were allocated: cuBLAS and
    cuBLASLt workspaces on the first GEMM of a (thread, stream), cuDNN attention workspaces, and
    the staging buffer of reductions across thread blocks."""
    m = _models.get(device)
    if m is None:
        return
    if name in GEMM_OPS:
        # operands cuBLAS cannot take as they are: a contiguous clone, alive during the GEMM
        # (after the output, around the handle's first workspace; H200 memory trace, session 20)
        clones = _clones(m, name, args)
        m.gemm(lt=_through_cublaslt(name, args, kwargs))
        _free(m, clones)
    elif name in CLONING_OPS:
        # a layer norm's non-contiguous input, a convolution's operand in another memory format:
        # its copy lives while the op runs
        _free(m, _clones(m, name, args))
    elif name in _REDUCTIONS:
        x = args[0] if args else None
        if x is None or not hasattr(x, "stride"):
            return
        if any(hasattr(a, "stride") for a in args[1:]):
            return  # max(a, b), min(a, b): elementwise
        shape, strides = tuple(x.shape), tuple(x.stride())
        dims = _reduce_dims(name, args, kwargs, len(shape))
        if not dims:
            return
        kind = _REDUCTIONS[name][1]
        buf, sem = reduction_scratch(shape, strides, x.element_size(), dims, _acc_size(kind, x.dtype), m.num_sms)
        if buf:
            b1 = m.malloc(buf)
            b2 = m.malloc(sem)
            m.free(b2)
            m.free(b1)
    elif name == "aten::_grouped_mm":
        # CUTLASS grouped GEMM (aten/native/cuda/GroupMM): the groups' problem array (60 B per
        # group: shapes, pointers, strides), then its workspace, both freed after the launch.
        # Sizes from the H200 MoE trace at 8 groups (tools/holdout/real_h200/session20/); the
        # workspace is taken as the same for other group counts (not measured).
        offs = args[2] if len(args) > 2 else None
        batched = [t for t in (args[1] if len(args) > 1 else None, args[0] if args else None)
                   if hasattr(t, "dim") and t.dim() == 3]  # B first, then A: a 3-D operand's groups
        groups = int(batched[0].shape[0]) if batched else (int(offs.numel()) if hasattr(offs, "numel") else 1)
        problems = m.malloc(60 * max(1, groups))
        m.transient(GROUPED_MM_WORKSPACE)
        m.free(problems)
    elif name in ("aten::_cudnn_attention_backward", "aten::_scaled_dot_product_cudnn_attention_backward"):
        q = args[1] if len(args) > 1 else None
        shape = tuple(getattr(q, "shape", ()))
        if len(shape) == 4:
            b, h, sq, d = shape
            m.transient(b * h * sq * d * 4 + b * h * sq * 4 + 256)
    elif name in ("aten::_cudnn_attention_forward", "aten::_scaled_dot_product_cudnn_attention"):
        m.transient(256)
    elif name in ("aten::_flash_attention_backward", "aten::_scaled_dot_product_flash_attention_backward"):
        # flash-attention 2 mha_bwd: softmax_d (fp32, B x H x S_q rounded to 128) and the dq
        # accumulator (fp32, B x S_q rounded x H x D rounded to 32)
        q = args[1] if len(args) > 1 else None
        shape = tuple(getattr(q, "shape", ()))
        if len(shape) == 4:
            if name == "aten::_flash_attention_backward":  # (B, S, H, D)
                b, sq, h, d = shape
            else:  # (B, H, S, D)
                b, h, sq, d = shape
            sr = (sq + 127) // 128 * 128
            dr = (d + 31) // 32 * 32
            b1 = m.malloc(b * h * sr * 4)
            b2 = m.malloc(b * sr * h * dr * 4)
            m.free(b2)
            m.free(b1)


# ops whose kernels allocate their outputs in another order than they return them: indices into
# the returned tuple, first allocated first (the rest follow in their order)
_OUTPUT_ORDER = {
    # _cudnn_attention_forward: philox seed and offset, then the output and the logsumexp
    "aten::_scaled_dot_product_cudnn_attention": (6, 7, 0, 1),
}


def allocation_order(name: str, out: Any, tensors: list) -> list:
    """`tensors` (the op's CUDA outputs, in the order returned) in the order the real op
    allocates them."""
    order = _OUTPUT_ORDER.get(name)
    if order is None or not isinstance(out, (tuple, list)):
        return tensors
    ids = {id(t) for t in tensors}
    first = [out[i] for i in order if i < len(out) and id(out[i]) in ids]
    seen = {id(t) for t in first}
    return first + [t for t in tensors if id(t) not in seen]


_scratch = threading.local()  # blocks an op took before its outputs, given back after them


def before_outputs(name: str, args: tuple, kwargs: dict, device: int = 0) -> None:
    """Allocations an op makes before its outputs (the real kernels' order); see after_outputs."""
    m = _models.get(device)
    if m is None:
        return
    if name == "aten::embedding_dense_backward" and len(args) >= 3:
        idx = args[1]
        n = int(idx.numel()) if hasattr(idx, "numel") else 0
        scale = bool(kwargs.get("scale_grad_by_freq", args[4] if len(args) > 4 else False))
        if n <= 3072 and not scale:
            return  # one kernel into the zeroed output
        isz = idx.element_size()
        _drop_scratch()
        # sorted_indices, orig_indices, then the range 0..n and cub's radix sort scratch (transient)
        held = [m.malloc(n * isz), m.malloc(n * isz)]
        rng = m.malloc(n * isz)
        m.transient(2 * n * isz + 18944)
        m.free(rng)
        if scale:
            held.append(m.malloc(n * isz))
        _scratch.blocks = (m, held)


def _drop_scratch() -> None:
    """Give back what a failed op (e.g. out of memory for its outputs) left in `_scratch`."""
    held = getattr(_scratch, "blocks", None)
    _scratch.blocks = None
    if held is not None:
        for b in reversed(held[1]):
            held[0].free(b)


def after_outputs(name: str, args: tuple, kwargs: dict, device: int = 0) -> None:
    held = getattr(_scratch, "blocks", None)
    if name != "aten::embedding_dense_backward" or held is None:
        return
    _scratch.blocks = None
    m, blocks = held
    idx, grad = args[1], args[0]
    n = int(idx.numel())
    isz = idx.element_size()
    dim = int(grad.shape[-1]) if grad.dim() else 1
    acc = 8 if grad.dtype == getattr(__import__("torch"), "float64") else 4
    num_weights = int(args[2])
    max_segments = min(n, num_weights)
    max_partial = n // 10 + max_segments  # NROWS_PER_THREAD = 10
    # embedding_backward_cuda_kernel: segment offsets and counts, cub scans (transient), partial
    # segments and their per-segment gradient sums
    a = [m.malloc(n * isz), m.malloc(isz)]
    t = m.malloc(n * isz)
    m.transient(1280)
    m.free(t)
    a += [m.malloc(n * isz), m.malloc(n * isz)]
    m.transient(1280)
    a += [m.malloc(isz), m.malloc(max_partial * isz), m.malloc(max_partial * dim * acc)]
    for b in reversed(a):
        m.free(b)
    for b in reversed(blocks):
        m.free(b)


def inplace_source(name: str, args: tuple, kwargs: dict, out: Any) -> Any:
    """The storage the real program would have written `out` into, or None.

    The autograd engine sums the gradients that reach one input of a node (InputBuffer::accumulate)
    in place into one of them (`var.add_(old_var)`) when no grad mode is on, unless a tensor is a
    subclass: FakeTensors are, so under simulation the sum is a new tensor.  Here that sum takes
    over the block of the incoming gradient instead, as the real engine would."""
    if name != "aten::add" or len(args) < 2:
        return None
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
    if alpha != 1:
        return None
    try:
        import torch

        if torch.is_grad_enabled() or not isinstance(out, torch.Tensor):
            return None
        task = getattr(torch._C, "_current_graph_task_id", None)
        if task is not None:
            if task() == -1:
                return None  # not inside a backward pass
        elif threading.current_thread() is threading.main_thread():
            return None
        old, new = args[0], args[1]
        for cand in (new, old):
            if (isinstance(cand, torch.Tensor) and cand.device.type == "cuda" and cand.shape == out.shape
                    and cand.dtype == out.dtype and cand.is_contiguous() and cand.storage_offset() == 0
                    and cand.untyped_storage().nbytes() == out.untyped_storage().nbytes()):
                return cand.untyped_storage()
    except Exception:  # noqa: BLE001 - a heuristic: never break the op
        return None
    return None
