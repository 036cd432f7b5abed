"""Kernel names and launch configurations: the measured H200 table and generators.

The table (data/h200_kernels.json, built by phantora_prof/calibrate/kernel_table.py from the
reference traces) says which kernels each dispatch-level op launched on a real H200 with
torch 2.11 / CUDA 13, with grid, block, registers, shared memory, launch API and mean
duration. Lookups:

- exact: op name + every tensor argument (dims, dtype, strides; tensor lists as lists) +
  output dims/dtypes; if one key launched different kernels for different scalar
  arguments (pow(x, 1) is a DtoD memcpy, pow(x, 2) a kernel), the variant whose recorded
  scalars match the call's best wins. A second map without outputs catches calls whose
  output list differs from what meta kernels produced at extraction time.
- fallback: op name + input dtypes -> the most frequent kernel sequence (names and
  launch configs only; durations come from the roofline).

Generators give PyTorch-like names for everything else (TensorIterator elementwise
kernels, reductions, cuBLAS/nvjet GEMMs, SDPA backends, multi-tensor-apply launches).
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from phantora_prof.cost.profiles import profile_for
from phantora_prof.protocol import TensorArg, pickled_by_fields

KIND_KERNEL = "kernel"
KIND_MEMCPY = "memcpy"
KIND_MEMSET = "memset"

API_KERNEL = "cudaLaunchKernel"
API_KERNEL_EX = "cuLaunchKernelEx"
API_KERNEL_EXC = "cudaLaunchKernelExC"
API_CU_KERNEL = "cuLaunchKernel"
API_MEMCPY = "cudaMemcpyAsync"
API_MEMSET = "cudaMemsetAsync"
LAUNCH_APIS = (API_KERNEL, API_KERNEL_EX, API_KERNEL_EXC, API_CU_KERNEL, API_MEMCPY, API_MEMSET)

MEMSET_NAME = "Memset (Device)"


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Kernel:
    """One GPU activity an op launches, as the trace shows it."""

    kind: str  # "kernel" | "memcpy" | "memset"
    name: str  # exact trace name: "Memset (Device)", "Memcpy HtoD (Pinned -> Device)", kernel name
    duration_ns: int
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)
    registers_per_thread: int = 0
    shared_memory: int = 0
    bytes: int = 0  # memcpy / memset size
    launch_api: str = API_KERNEL
    flops: float = 0.0
    source: str = "roofline"  # "roofline" | "table" | "interpolated" | "bandwidth"


@dataclass(slots=True)
class KernelSpec:
    """A kernel to be launched, before its duration is known."""

    kind: str
    name: str
    grid: tuple = (0, 0, 0)
    block: tuple = (0, 0, 0)
    regs: int = 0
    smem: int = 0
    nbytes: int = 0
    api: str = API_KERNEL
    weight: float = 1.0  # share of the op's time (memsets: ignored, they have their own)
    dur_ns: int = 0  # measured duration when it comes from the table
    generic: bool = False  # the name is a guess (no functor known for the op)


# ------------------------------------------------------------------ the H200 table

def _kind_of(code: str, name: str) -> str:
    if code == "k":
        return KIND_KERNEL
    return KIND_MEMSET if name.startswith("Memset") else KIND_MEMCPY


def _freeze(x):
    if isinstance(x, list):
        return tuple(_freeze(v) for v in x)
    return x


def parse_scalar(s):
    """A scalar as torch.profiler writes it in `Concrete Inputs` (bool, int, float, list, str; None for empty)."""
    if s is None or s == "":
        return None
    if s in ("True", "False"):
        return s == "True"
    if s.startswith("[") and s.endswith("]"):
        inner = s[1:-1].strip()
        return tuple(parse_scalar(x.strip()) for x in inner.split(",")) if inner else ()
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return s


class KernelTable:
    def __init__(self, data: dict):
        self.gpu = data.get("gpu", "h200")
        self.arch = data.get("arch", "sm90")
        names = data["names"]
        apis = data["apis"]

        def specs(recs):
            out = []
            for r in recs:
                code, ni, gx, gy, gz, bx, by, bz, regs, smem, nb, ai, dur = r
                name = names[ni]
                out.append(KernelSpec(_kind_of(code, name), name, (gx, gy, gz), (bx, by, bz),
                                      regs, smem, nb, apis[ai], 1.0, int(dur)))
            return tuple(out)

        self.exact: dict = {}
        self.exact_noout: dict = {}
        for opname, entries in data["exact"].items():
            for e in entries:
                kin = _freeze(e["in"])
                kout = None if e["out"] is None else _freeze(e["out"])
                variants = tuple(
                    (tuple(parse_scalar(s) for s in v["scalars"]), v["n"], specs(v["kernels"]))
                    for v in e["variants"])
                self.exact[(opname, kin, kout)] = variants
                prev = self.exact_noout.get((opname, kin))
                if prev is None or variants[0][1] > prev[0][1]:
                    self.exact_noout[(opname, kin)] = variants
        self.fallback: dict = {}
        for opname, by_types in data["fallback"].items():
            for types, seqs in by_types.items():
                self.fallback[(opname, tuple(types.split("|")) if types else ())] = tuple(
                    (s["in_bytes"], specs(s["kernels"])) for s in seqs)

    def lookup(self, base: str, kin, kout, scalars) -> tuple | None:
        variants = self.exact.get((base, kin, kout))
        if variants is None:
            variants = self.exact_noout.get((base, kin))
            if variants is None:
                return None
        if len(variants) == 1:
            return variants[0][2]
        best, best_score = variants[0][2], -1
        for vscal, _n, ks in variants:
            score = 0
            for i, v in enumerate(vscal):
                if v is None or i >= len(scalars):
                    continue
                try:
                    if scalars[i] == v:
                        score += 1
                except Exception:  # noqa: BLE001 - incomparable values simply do not match
                    pass
            if score > best_score:
                best, best_score = ks, score
        return best

    def lookup_types(self, base: str, types: tuple) -> tuple | None:
        """All kernel sequences seen for (op, input dtypes): ((input bytes, specs), ...)."""
        return self.fallback.get((base, types))

    def nearest(self, base: str, types: tuple, in_bytes: int) -> tuple | None:
        """The sequence recorded for the input size nearest (in log scale) to in_bytes."""
        seqs = self.fallback.get((base, types))
        if not seqs:
            return None
        lb = math.log(max(in_bytes, 1))
        return min(seqs, key=lambda s: abs(math.log(max(s[0], 1)) - lb))[1]


@lru_cache(maxsize=None)
def table(gpu_key: str = "h200") -> KernelTable | None:
    """The measured table for a GPU (only h200 exists); None when there is none."""
    if gpu_key != "h200":
        return None
    ref = resources.files("phantora_prof.cost").joinpath("data", "h200_kernels.json")
    with ref.open("rb") as f:
        data = json.loads(f.read())
    return KernelTable(data)


def table_key(args: tuple, kwargs: dict, outputs: tuple):
    """(inputs, outputs) key in the table's format for a captured call."""
    parts = []
    has_list = False
    for a in args:
        if isinstance(a, TensorArg):
            parts.append((a.shape, a.dtype, a.stride))
        elif isinstance(a, tuple) and a and isinstance(a[0], TensorArg):
            has_list = True
            parts.append(tuple((t.shape, None, t.stride) for t in a if isinstance(t, TensorArg)))
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, TensorArg):
                parts.append((a.shape, a.dtype, a.stride))
            elif isinstance(a, tuple) and a and isinstance(a[0], TensorArg):
                has_list = True
                parts.append(tuple((t.shape, None, t.stride) for t in a if isinstance(t, TensorArg)))
    kout = None if has_list else tuple((o.shape, o.dtype) for o in outputs if isinstance(o, TensorArg))
    return tuple(parts), kout


LIBRARY_MARKERS = ("nvjet", "cudnn", "xmma", "cutlass", "cublas", "sm90", "sm80", "flash", "fmha")


def arch_specific(specs) -> bool:
    return any(any(m in s.name for m in LIBRARY_MARKERS) for s in specs)


# ------------------------------------------------------------------ C++ type spelling

CPP_TYPE = {
    "float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
    "int64": "long", "int32": "int", "int16": "short", "int8": "signed char", "uint8": "unsigned char",
    "bool": "bool", "float8_e4m3fn": "c10::Float8_e4m3fn", "float8_e5m2": "c10::Float8_e5m2",
    "complex64": "c10::complex<float>", "complex128": "c10::complex<double>",
}


def cpp(dtype: str) -> str:
    return CPP_TYPE.get(dtype, "float")


def opmath(dtype: str) -> str:
    return "float" if dtype in ("bfloat16", "float16") or dtype.startswith("float8") else cpp(dtype)


# ------------------------------------------------------------------ TensorIterator kernels

def family(name: str) -> str:
    """TensorIterator kernel family of a kernel name (vectorized / unrolled / strided / other)."""
    if "vectorized_elementwise_kernel" in name:
        return "vectorized"
    if "unrolled_elementwise_kernel" in name:
        return "unrolled"
    if "at::native::elementwise_kernel<" in name:
        return "strided"
    return "other"


def api_for(name: str) -> str:
    if name.startswith("Memset"):
        return API_MEMSET
    if name.startswith("Memcpy"):
        return API_MEMCPY
    if name.startswith("nvjet") or name.startswith("cudnn") or "cudnn::" in name:
        return API_KERNEL_EX
    if "xmma" in name or "cublasLt::" in name:
        return API_KERNEL_EXC
    if "cutlass::Kernel" in name:
        return API_CU_KERNEL
    return API_KERNEL


def vec_size(dtypes) -> int:
    smallest = min((_ITEMSIZE.get(d, 4) for d in dtypes), default=4)
    return max(1, min(16 // smallest, 8))


_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
             "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
             "float8_e4m3fn": 1, "float8_e5m2": 1}


def _grid1(numel: int, per_block: int) -> tuple:
    return (max(1, min(-(-numel // per_block), 2**31 - 1)), 1, 1)


def vectorized_kernel(functor: str, ntensors: int, numel: int, dtypes, vec: int | None = None) -> KernelSpec:
    v = vec or vec_size(dtypes)
    name = (f"void at::native::vectorized_elementwise_kernel<{v}, {functor}, std::array<char*, {ntensors}ul> >"
            f"(int, {functor}, std::array<char*, {ntensors}ul>)")
    return KernelSpec(KIND_KERNEL, name, _grid1(numel, 1024), (128, 1, 1), 32 if ntensors > 1 else 16)


def unrolled_kernel(functor: str, ntensors: int, numel: int) -> KernelSpec:
    nin = max(1, ntensors - 1)
    calc = (f"TrivialOffsetCalculator<{nin}, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
            f"at::native::memory::LoadWithCast<{nin}>, at::native::memory::StoreWithCast<1>")
    name = (f"void at::native::unrolled_elementwise_kernel<{functor}, std::array<char*, {ntensors}ul>, 4, {calc} >"
            f"(int, {functor}, std::array<char*, {ntensors}ul>, {calc})")
    return KernelSpec(KIND_KERNEL, name, _grid1(numel, 512), (128, 1, 1), 32)


def strided_kernel(functor: str, numel: int, dtype: str = "float32", cast: bool = False) -> KernelSpec:
    """TensorIterator's legacy kernel for broadcast or non-contiguous operands (CUDALoops.cuh):
    `gpu_kernel_impl_nocast` unrolled 4x for operands under 4 bytes (`dtype`: the functor's),
    2x otherwise; with operands of several dtypes (`cast`) `gpu_kernel_impl`, which casts each
    load and store, unrolled 4x (the H200 traces: HF LLaMA's RoPE `bf16 * fp32` products)."""
    impl, unroll = ("gpu_kernel_impl", 4) if cast else ("gpu_kernel_impl_nocast", 4 if _ITEMSIZE.get(dtype, 4) < 4 else 2)
    close = " >" if functor.endswith(">") else ">"  # as the demangler writes nested templates
    lam = f"at::native::{impl}<{functor}{close}(at::TensorIteratorBase&, {functor} const&)::{{lambda(int)#1}}"
    name = f"void at::native::elementwise_kernel<128, {unroll}, {lam}>(int, {lam})"
    return KernelSpec(KIND_KERNEL, name, _grid1(numel, 128 * unroll), (128, 1, 1), 18)


def casts(name: str) -> bool:
    """Whether a TensorIterator kernel converts dtypes per element (operands of several dtypes)."""
    return "LoadWithCast" in name or "gpu_kernel_impl<" in name


def lambda_functor(fn: str, dtype: str, nargs: int = 1, anon: bool = False, case: int = 2) -> str:
    """The GPU lambda of ATen kernel `fn`; `case`: which case of its AT_DISPATCH the dtype is."""
    t = cpp(dtype)
    ns = "at::native::(anonymous namespace)::" if anon else "at::native::"
    params = ", ".join([t] * nargs)
    return (f"{ns}{fn}(at::TensorIteratorBase&)::{{lambda()#1}}::operator()() const::"
            f"{{lambda()#{case}}}::operator()() const::{{lambda({params})#1}}")


# AT_DISPATCH_V2's case numbers over AT_ALL_TYPES_AND_COMPLEX then kBool, kHalf, kBFloat16
# (masked_fill on the H200: float #7, BFloat16 #12)
_ALL_TYPES_CASE = {"uint8": 1, "int8": 2, "int32": 3, "int64": 4, "int16": 5, "float64": 6, "float32": 7,
                   "complex128": 8, "complex64": 9, "bool": 10, "float16": 11, "bfloat16": 12}
# where_kernel_impl's dispatch: kComplexHalf, kHalf, kBFloat16, kBool, then AT_ALL_TYPES_AND_COMPLEX
# (H200 traces: BFloat16 #3, long #8, float #11)
_WHERE_CASE = {"float16": 2, "bfloat16": 3, "bool": 4, "uint8": 5, "int8": 6, "int32": 7, "int64": 8, "int16": 9,
               "float64": 10, "float32": 11, "complex128": 12, "complex64": 13}
# launch_clamp_scalar's dispatch: AT_ALL_TYPES, then kHalf, kBFloat16 (H200 traces: BFloat16 #9)
_CLAMP_CASE = {"uint8": 1, "int8": 2, "int32": 3, "int64": 4, "int16": 5, "float64": 6, "float32": 7,
               "float16": 8, "bfloat16": 9}
_COMPARE = ("gt", "lt", "ge", "le")


def typed_functor(base: str, dtype: str, scalar: bool) -> tuple[str, int] | None:
    """(functor, vector width) of a kernel whose functor takes the operands' own dtypes, so that
    TensorIterator runs it vectorized over mixed dtypes (a bool output, a bool mask), as the H200
    ran them (tools/holdout/composite_probe.py, session 24): comparisons with a Python scalar
    (`compare_scalar_kernel`, 4 wide), `eq` / `ne` (`CompareEqFunctor`), comparisons of two
    tensors (`CompareFunctor`), `masked_fill_` with a scalar (8 wide for 16-bit data, 4 for fp32),
    `where` (a bool condition and two operands of the data's dtype); None for other ops."""
    t = cpp(dtype)
    op = base.rstrip("_")
    if op in _COMPARE and scalar:
        return (f"at::native::compare_scalar_kernel<{t}>(at::TensorIteratorBase&, at::native::(anonymous namespace)::"
                f"OpType, {t})::{{lambda({t})#1}}"), 4
    if op in ("eq", "ne"):
        wrap = "AUnaryFunctor" if scalar else "BinaryFunctor"
        return f"at::native::{wrap}<{t}, {t}, bool, at::native::(anonymous namespace)::CompareEqFunctor<{t}> >", 4
    if op in _COMPARE:
        return f"at::native::(anonymous namespace)::CompareFunctor<{t}>", 4
    if op in ("relu", "clamp_min") and dtype in _CLAMP_CASE:  # relu_ is clamp_min_(0) on CUDA
        return (f"at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
                f"at::native::detail::ClampLimits)::{{lambda()#1}}::operator()() const::{{lambda()#{_CLAMP_CASE[dtype]}}}"
                f"::operator()() const::{{lambda({t})#1}}"), vec_size((dtype,))
    if op == "where" and dtype in _WHERE_CASE:
        return (f"at::native::(anonymous namespace)::where_kernel_impl(at::TensorIterator&)::{{lambda()#1}}::operator()() "
                f"const::{{lambda()#{_WHERE_CASE[dtype]}}}::operator()() const::{{lambda(bool, {t}, {t})#1}}"), vec_size((dtype,))
    if base == "masked_fill_" and dtype in _ALL_TYPES_CASE:
        return (f"at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::"
                f"{{lambda()#1}}::operator()() const::{{lambda()#{_ALL_TYPES_CASE[dtype]}}}::operator()() const::"
                f"{{lambda({t}, bool)#1}}"), vec_size((dtype,))
    return None


# functors for the common TensorIterator ops; everything else gets lambda_functor(op)
def binary_functor(base: str, dtype: str, scalar: bool) -> str:
    t = cpp(dtype)
    o = opmath(dtype)
    if base in ("add", "add_", "sub", "sub_", "rsub"):
        # with a Scalar other (`x + eps`), ATen's add_kernel folds it into the functor
        # (CUDAFunctorOnSelf_add: HF LLaMA's RMSNorm `variance + eps` on the H200)
        return f"at::native::CUDAFunctorOnSelf_add<{t}>" if scalar and base != "rsub" else f"at::native::CUDAFunctor_add<{t}>"
    fn = {"mul": "MulFunctor", "mul_": "MulFunctor", "div": "DivFunctor", "div_": "DivFunctor"}.get(base)
    if fn is not None:
        wrap = "AUnaryFunctor" if scalar else "BinaryFunctor"
        return f"at::native::{wrap}<{t}, {t}, {t}, at::native::binary_internal::{fn}<{o}> >"
    return lambda_functor(f"{base.rstrip('_')}_kernel_cuda", dtype, 1 if scalar else 2)


def fill_kernel(dtype: str, numel: int) -> KernelSpec:
    return vectorized_kernel(f"at::native::FillFunctor<{cpp(dtype)}>", 1, numel, (dtype,))


def copy_kernel(src: str, dst: str, numel: int, contiguous: bool) -> KernelSpec:
    """A same-device cast/copy kernel as TensorIterator's copy picks it."""
    if contiguous and src == "float32" and dst in ("bfloat16", "float16"):
        fn = "bfloat16_copy_kernel_cuda" if dst == "bfloat16" else "float16_copy_kernel_cuda"
        functor = f"at::native::{fn}(at::TensorIteratorBase&)::{{lambda(float)#1}}"
        return vectorized_kernel(functor, 2, numel, (dst,))
    functor = (f"at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{{lambda()#3}}::operator()() const::"
               f"{{lambda()#7}}::operator()() const::{{lambda({cpp(dst)})#1}}")
    if contiguous:
        return unrolled_kernel(functor, 2, numel)
    return strided_kernel(functor, numel, dst, cast=src != dst)


def last_pow2(n: int) -> int:
    """The largest power of two not above `n` (1 for n < 2): ATen's last_pow2."""
    return 1 << (max(1, n).bit_length() - 1)


def reduce_block(dim0: int, dim1: int, max_threads: int) -> tuple[int, int]:
    """(width, height) of a reduce_kernel block, as ATen's ReduceConfig::set_block_dimension:
    up to a warp along dim0 (the dimension threads of a row share), the rest along dim1."""
    dim0_pow2 = last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(dim0_pow2, 32)
    height = min(dim1_pow2, max_threads // width)
    return min(dim0_pow2, max_threads // height), height


def reduce_kernel(functor: str, dtype: str, out_dtype: str, reduce_size: int, num_outputs: int,
                  num_sms: int, inner: bool) -> list[KernelSpec]:
    """reduce_kernel launch (plus the semaphore memset of a global reduction)."""
    t, o = cpp(dtype), cpp(out_dtype)
    v = vec_size((dtype,))
    op = f"at::native::ReduceOp<{t}, {functor}, unsigned int, {o}, 4, {v if num_outputs > 1 else 4}>"
    if num_outputs == 1:
        threads, vt = 512, 1
        gy = max(1, min(-(-reduce_size // 4096 // 8), num_sms * 4))
        grid, block, global_reduce = (1, gy, 1), (512, 1, 1), gy > 1
    elif inner:
        # reducing the contiguous dimension (ATen's setReduceConfig): outputs are not vectorized
        # (reduce_kernel<512, 1>), a warp-wide row of threads per output, the input read
        # `v` elements at a time when the row is longer than 128; as the H200 traces of HF
        # LLaMA's RMSNorm mean and its backward's sums show (block 32 x 16, grid outputs / 16)
        threads, vt = 512, 1
        dim0 = reduce_size // v if reduce_size > 128 and reduce_size % v == 0 else reduce_size
        width, height = reduce_block(dim0, num_outputs, threads)
        grid, block, global_reduce = (min(-(-num_outputs // height), 2**31 - 1), 1, 1), (width, height, 1), False
    else:
        threads, vt = 128, 4
        gx = max(1, -(-num_outputs // 128))
        gy = max(1, min(-(-reduce_size // 64), -(-num_sms * 16 // gx)))
        grid, block, global_reduce = (gx, gy, 1), (32, 4, 1), gy > 1
    name = f"void at::native::reduce_kernel<{threads}, {vt}, {op} >({op})"
    ks = []
    if global_reduce:
        ks.append(KernelSpec(KIND_MEMSET, MEMSET_NAME, nbytes=4 * grid[0], api=API_MEMSET))
    ks.append(KernelSpec(KIND_KERNEL, name, grid, block, 54 if vt == 4 else 32, 2064 if global_reduce else 16))
    return ks


def sum_functor(dtype: str, out_dtype: str) -> str:
    t, o = cpp(dtype), cpp(out_dtype)
    return (f"at::native::func_wrapper_t<{o}, at::native::sum_functor<{t}, float, {o}>::operator()"
            f"(at::TensorIterator&)::{{lambda(float, float)#1}}>")


def mean_functor(dtype: str, out_dtype: str | None = None) -> str:
    """ATen's mean_kernel_cuda: 16-bit data kept as it is and accumulated in float
    (`MeanOps<c10::BFloat16, float, float, c10::BFloat16>`: the H200 traces of the torchvision
    models' global average pools), float data all float, double all double."""
    if dtype == "float64":
        return "at::native::MeanOps<double, double, double, double>"
    if dtype in ("bfloat16", "float16"):
        return f"at::native::MeanOps<{cpp(dtype)}, float, float, {cpp(out_dtype or dtype)}>"
    return "at::native::MeanOps<float, float, float, float>"


def generic_reduce_functor(base: str, dtype: str) -> str:
    t = cpp(dtype)
    fn = {"amax": "MaxNanFunctor", "max": "MaxNanFunctor", "amin": "MinNanFunctor", "min": "MinNanFunctor",
          "prod": "ProdFunctor", "norm": "NormTwoOps", "linalg_vector_norm": "NormTwoOps",
          "var": "WelfordOps", "var_mean": "WelfordOps", "std": "WelfordOps", "std_mean": "WelfordOps",
          "argmax": "ArgMaxOps", "argmin": "ArgMinOps", "any": "func_wrapper_t<bool, or>",
          "all": "func_wrapper_t<bool, and>"}.get(base, f"{base}_functor")
    if fn in ("ArgMaxOps", "ArgMinOps") and dtype in ("bfloat16", "float16"):
        t = "float"  # compared in float (the H200 probe: ReduceOp<c10::BFloat16, ArgMaxOps<float>, ...>)
    return f"at::native::{fn}<{t}>"


# ------------------------------------------------------------------ GEMM

# nvjet's letters for FP8 operands (in cuBLAS's (B, A) order): "qqtst" for e4m3 x e4m3,
# "qrtst" for an e5m2 A (gradients) times an e4m3 B (measured: sweep scaled_mm, 2026-12-02)
_FP8_LETTER = {"float8_e4m3fn": "q", "float8_e5m2": "r"}


def _clears_flag(gpu, m: int, n: int, k: int) -> bool:
    """Whether a non-split Hopper GEMM's kernel runs more than two waves of output tiles, for
    which cuBLAS clears a flag first (the profile's tile edge, fitted on the real profiles).
    A dimension that is not a multiple of 8 takes a CUTLASS kernel instead of nvjet, with no
    flag (MLP-Mixer's 196-token mixing: 108 of 112 such calls in the profiles)."""
    if m % 8 or n % 8 or k % 8:
        return False
    t = profile_for(gpu).gemm_memset_tile
    return -(-m // t) * -(-n // t) > 2 * gpu.num_sms


def gemm_specs(gpu, m: int, n: int, k: int, batch: int, dtype: str, a_t: bool, b_t: bool,
               bias: bool, allow_tf32: bool, split: int = 1, b_dtype: str | None = None) -> list[KernelSpec]:
    """cuBLAS kernels for C[m,n] = A[m,k] @ B[k,n] (row-major view of torch's call); `dtype` is
    A's, `b_dtype` B's where it differs (FP8 GEMMs mix e5m2 and e4m3)."""
    la = "T" if b_t else "N"  # cuBLAS sees (B, A) column-major
    lb = "T" if a_t else "N"
    sms = gpu.num_sms
    if gpu.compute_capability[0] >= 9 and dtype in ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"):
        if m * n >= 8192 * 2304:
            tm, tn, st, cl, hv, coop = 256, 128, 4, "1x2", "h", "_coopA"
        elif m * n >= 2048 * 2048:
            tm, tn, st, cl, hv, coop = 192, 128, 5, "1x2", "h", "_coopB"
        else:
            tm, tn, st, cl, hv, coop = 128, 128, 6, "2x4", "h", ""
        tiles = -(-m // tm) * -(-n // tn) * batch
        split_k = split > 1
        kind, ktile = "tst", 64
        if dtype in _FP8_LETTER:  # FP8: a 128-deep K tile, the operand types in the name
            kind = _FP8_LETTER.get(b_dtype or dtype, "q") + _FP8_LETTER[dtype] + "tst"
            ktile = 128
        name = (f"nvjet_sm90_{kind}_{tm}x{tn}_{ktile}x{st}_{cl}_{hv}_bz{coop}{'_splitK' if split_k else ''}"
                f"{'_bias' if bias else ''}_{la}{lb}N")
        ctas = min(tiles * split, sms)
        grid = (2, max(1, -(-ctas // 2)), 1) if ctas >= 2 else (1, 1, 1)
        ks = []
        if not split_k and (_clears_flag(gpu, m, n, k) if batch == 1 else m >= 4096 and n >= 2304):
            # cuBLAS clears a 4-byte flag before a kernel with more than two waves of output tiles
            # (the profile's gemm_memset_tile, fitted on 12,568 real mm / addmm calls); batched
            # GEMMs keep the older rule (too few of them in the profiles to fit one)
            ks.append(KernelSpec(KIND_MEMSET, MEMSET_NAME, nbytes=4, api=API_MEMSET))
        ks.append(KernelSpec(KIND_KERNEL, name, grid, (384, 1, 1), 168, 213188, api=API_KERNEL_EX,
                             weight=0.95 if split_k else 1.0))
        if split_k:
            t = "__nv_bfloat16" if dtype == "bfloat16" else "__half"
            red = (f"void cublasLt::splitKreduce_kernel<32, 16, int, float, {t}, float, {t}, false, float, {t}, {t}, "
                   f"true, false, false, false>(cublasLt::cublasSplitKParams<float>, float const*, {t} const*, float*, "
                   f"{t}*, float const*, float const*, {t} const*, float const*, {t}*, void*, long, float*, int*, "
                   f"float*, float*, float const*, float const*, float const*, float const*, float const*)")
            ks.append(KernelSpec(KIND_KERNEL, red, (max(1, -(-n // 32)), max(1, -(-m // 128)), 1), (32, 16, 1), 32, 0,
                                 api=API_KERNEL_EXC, weight=0.05))
        return ks
    tl = (la + lb).lower()
    if dtype in ("bfloat16", "float16"):
        short = "bf16" if dtype == "bfloat16" else "fp16"
        tm, tn = (256, 128) if m * n >= 4096 * 4096 else (128, 128)
        name = f"ampere_{short}_s16816gemm_{short}_{tm}x{tn}_ldg8_f2f_stages_64x3_{tl}"
        grid = (-(-n // tn), -(-m // tm), batch)
        return [KernelSpec(KIND_KERNEL, name, grid, (256, 1, 1), 230, 98304, api=API_KERNEL)]
    if dtype == "float32" and allow_tf32:
        name = (f"sm80_xmma_gemm_tf32f32_tf32f32_f32_{tl}_n_tilesize128x128x32_stage3_warpsize2x2x1_"
                f"tensor16x8x8_execute_kernel__5x_cublas")
        grid = (-(-n // 128), -(-m // 128), batch)
        return [KernelSpec(KIND_KERNEL, name, grid, (128, 1, 1), 230, 81920, api=API_KERNEL_EXC)]
    t = {"float64": "f64f64_f64f64_f64", "float32": "f32f32_f32f32_f32"}.get(dtype, "f32f32_f32f32_f32")
    name = (f"sm80_xmma_gemm_{t}_{tl}_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_"
            f"execute_kernel__5x_cublas")
    grid = (-(-n // 128), -(-m // 128), batch)
    return [KernelSpec(KIND_KERNEL, name, grid, (128, 1, 1), 255, 33792, api=API_KERNEL_EXC)]


# ------------------------------------------------------------------ attention

def attention_specs(gpu, backend: str, backward: bool, b: int, h: int, s_q: int, d: int, dtype: str,
                    causal: bool) -> list[KernelSpec]:
    """Kernels of the SDPA backends (cudnn / flash / efficient), weights = time shares."""
    sm = f"sm{gpu.compute_capability[0]}{gpu.compute_capability[1]}"
    hopper = gpu.compute_capability[0] >= 9
    t = "cutlass::bfloat16_t" if dtype == "bfloat16" else "cutlass::half_t"
    rows = -(-s_q // 128)
    if backend == "cudnn":
        memset = KernelSpec(KIND_MEMSET, MEMSET_NAME, nbytes=4, api=API_MEMSET)
        mma = "wgmma" if hopper else "mma"
        if not backward:
            main = KernelSpec(KIND_KERNEL, f"cudnn_generated_fort_native_sdpa_{sm}_flash_fprop_{mma}_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
                              (gpu.num_sms, 1, 1), (384, 1, 1), 168, 134144, api=API_KERNEL_EX)
            return [memset, main]
        dot = KernelSpec(KIND_KERNEL, "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, void*, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, float, void const*, void const*, void const*, void const*, void const*, bool, void const*, void*, void const*, int, int, int, int, int, int, int, int, int)",
                         (max(1, s_q // 16), b, h), (128, 1, 1), 26, 0, api=API_KERNEL_EX, weight=0.097)
        main = KernelSpec(KIND_KERNEL, f"cudnn_generated_fort_native_sdpa_{sm}_flash_bprop_{mma}_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0",
                          (gpu.num_sms, 1, 1), (384, 1, 1), 168, 152576, api=API_KERNEL_EX, weight=0.82)
        cvt = KernelSpec(KIND_KERNEL, "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, float const*, float const*, float const*, float*, void const*, void*, void*, bool, bool)",
                         (max(1, s_q // 32), b, h), (128, 1, 1), 30, 0, api=API_KERNEL_EX, weight=0.083)
        return [memset, dot, main, cvt]
    if backend == "flash":
        traits = f"pytorch_flash::Flash_fwd_kernel_traits<{d}, 128, 64, 4, false, false, {t}, pytorch_flash::Flash_kernel_traits<{d}, 128, 64, 4, {t}> >"
        if not backward:
            name = (f"void pytorch_flash::flash_fwd_kernel<{traits}, false, {'true' if causal else 'false'}, false, false, true, true, false, false>"
                    f"(pytorch_flash::Flash_fwd_params)")
            return [KernelSpec(KIND_KERNEL, name, (rows, b, h), (128, 1, 1), 255, 49152)]
        btraits = f"pytorch_flash::Flash_bwd_kernel_traits<{d}, 128, 128, 8, 4, 4, 4, false, false, {t}, pytorch_flash::Flash_kernel_traits<{d}, 128, 128, 8, {t}> >"
        return [
            KernelSpec(KIND_KERNEL, f"void pytorch_flash::flash_bwd_dot_do_o_kernel<true, {btraits}>(pytorch_flash::Flash_bwd_params)",
                       (rows, b, h), (256, 1, 1), 40, 0, weight=0.06),
            KernelSpec(KIND_KERNEL, f"void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<{btraits}, false, {'true' if causal else 'false'}, false, false, true, true, false>(pytorch_flash::Flash_bwd_params)",
                       (rows, b, h), (256, 1, 1), 255, 98304, weight=0.88),
            KernelSpec(KIND_KERNEL, f"void pytorch_flash::flash_bwd_convert_dq_kernel<{btraits}, false>(pytorch_flash::Flash_bwd_params, int)",
                       (rows, b, h), (256, 1, 1), 40, 0, weight=0.06),
        ]
    short = "bf16" if dtype == "bfloat16" else ("f16" if dtype == "float16" else "f32")
    if not backward:
        name = (f"fmha_cutlassF_{short}_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<{t}, "
                f"cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)")
        return [KernelSpec(KIND_KERNEL, name, (-(-s_q // 64), h, b), (32, 4, 1), 128, 16384)]
    name = (f"fmha_cutlassB_{short}_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<"
            f"cutlass::arch::Sm80, {t}, true, false, true, 64, 64, 64, false>::Params)")
    return [KernelSpec(KIND_MEMSET, MEMSET_NAME, nbytes=4 * b * h * s_q, api=API_MEMSET),
            KernelSpec(KIND_KERNEL, name, (1, h, b), (128, 1, 1), 255, 65536)]


# ------------------------------------------------------------------ multi_tensor_apply

CHUNK = 65536
MAX_TENSORS = (110, 64, 48, 36, 30)
MAX_BLOCKS = 320
# a block's loop takes 512 threads x kILP (4) elements of its chunk per iteration (ForeachFunctors.cuh)
MULTI_TENSOR_ELEMS_PER_ITER = 512 * 4


def multi_tensor_launches(numels, depth: int) -> list[tuple[int, int]]:
    """(blocks, elements) per launch, following ATen's multi_tensor_apply split."""
    return [(blocks, elems) for blocks, elems, _ in multi_tensor_launch_shapes(numels, depth)]


def multi_tensor_launch_shapes(numels, depth: int) -> list[tuple[int, int, int]]:
    """(blocks, elements, largest chunk) per launch, following ATen's multi_tensor_apply split
    (MultiTensorApply.cuh): one block per chunk of CHUNK elements of a tensor, a launch when
    MAX_TENSORS[depth - 1] tensors or MAX_BLOCKS chunks are gathered, or at the list's end. The
    largest chunk is how many elements the slowest block walks through (cost/multi_tensor.py)."""
    depth = max(1, min(depth, 5))
    max_t = MAX_TENSORS[depth - 1]
    launches = []
    loc_t = loc_b = 0
    elems = biggest = 0
    n = len(numels)
    for ti, numel in enumerate(numels):
        if numel == 0:
            if ti == n - 1 and loc_b:
                launches.append((loc_b, elems, biggest))
            continue
        loc_t += 1
        chunks = -(-numel // CHUNK)
        for c in range(chunks):
            loc_b += 1
            size = min(CHUNK, numel - c * CHUNK)
            elems += size
            if size > biggest:
                biggest = size
            tensors_full = loc_t == max_t and c == chunks - 1
            blocks_full = loc_b == MAX_BLOCKS
            last = ti == n - 1 and c == chunks - 1
            if tensors_full or blocks_full or last:
                launches.append((loc_b, elems, biggest))
                loc_b = 0
                elems = biggest = 0
                loc_t = 0 if c == chunks - 1 else 1
    return launches


def multi_tensor_name(base: str, depth: int, dtype: str, scalar_list: bool, scalar_tensor: bool = False) -> str:
    t = opmath(dtype)
    ns = "at::native::(anonymous namespace)::"
    if base == "_foreach_norm":  # ForeachReduceOp.cu: partial norms per chunk, then lpnorm_cleanup
        fn = f"at::native::LpNormFunctor<{cpp(dtype)}, (at::native::NormType)1, {cpp(dtype)}, 1, 1, 0>"
        meta = f"{ns}TensorListMetadata<1>"
        return f"void {ns}multi_tensor_apply_kernel<{meta}, {fn}, {t}*, int>({meta}, {fn}, {t}*, int)"
    if base in ("_fused_adamw_", "_fused_adam_"):
        mode = 1 if base == "_fused_adamw_" else 0
        meta = f"{ns}FusedOptimizerTensorListMetadata<{depth}>"
        fn = f"{ns}FusedAdamMathFunctor<{t}, {depth}, (at::native::ADAM_MODE){mode}, false>"
        extra = "float const*, double, double, double, double, double, bool, float const*, float const*"
        return f"void {ns}multi_tensor_apply_kernel<{meta}, {fn}, {extra}>({meta}, {fn}, {extra})"
    if base == "_fused_sgd_":
        meta = f"{ns}TensorListMetadata<{depth}>"
        fn = f"{ns}FusedSgdMathFunctor<{t}, {depth}>"
        extra = "double, double, double, bool, bool, bool, float const*, float const*, float const*"
        return f"void {ns}multi_tensor_apply_kernel<{meta}, {fn}, {extra}>({meta}, {fn}, {extra})"
    meta = f"{ns}TensorListMetadata<{depth}>"
    op = base.replace("_foreach_", "").rstrip("_")
    std = {"add": "std::plus", "sub": "std::minus", "mul": "std::multiplies", "div": "std::divides"}.get(op)
    r = 1 if base.endswith("_") else 0
    if std is not None:
        if scalar_tensor:  # the scalar is a 0-dim tensor on the GPU (clip_grad_norm_'s clip coefficient)
            fn = f"{ns}BinaryOpScalarTensorFunctor<{t}, {depth}, {depth}, 0>"
            return (f"void {ns}multi_tensor_apply_kernel<{meta}, {fn}, {std}<{t}>, {t}*, {t}>"
                    f"({meta}, {fn}, {std}<{t}>, {t}*, {t})")
        if scalar_list or depth == 1:
            fn = f"{ns}BinaryOpScalarFunctor<{t}, {depth}, {depth - r if depth > 1 else 1}, 0>"
        else:
            fn = f"{ns}BinaryOpListAlphaFunctor<{t}, {depth}, {depth - r}, 0>"
        return f"void {ns}multi_tensor_apply_kernel<{meta}, {fn}, {std}<{t}>, {t}>({meta}, {fn}, {std}<{t}>, {t})"
    fn = f"{ns}UnaryOpFunctor<{t}, {depth}, {depth if r else 1}, 0>"
    return f"void {ns}multi_tensor_apply_kernel<{meta}, {fn}, {ns}{op.capitalize()}<{t}>, {t}>({meta}, {fn}, {ns}{op.capitalize()}<{t}>, {t})"


def multi_tensor_specs(base: str, lists, depth: int, dtype: str, scalar_list: bool,
                       regs: int = 32, scalar_tensor: bool = False, smem: int = 0) -> list[KernelSpec]:
    numels = [t.numel for t in lists[0]] if lists else []
    name = multi_tensor_name(base, depth, dtype, scalar_list, scalar_tensor)
    out = []
    for blocks, elems in multi_tensor_launches(numels, depth):
        out.append(KernelSpec(KIND_KERNEL, name, (blocks, 1, 1), (512, 1, 1), regs, smem, weight=float(elems)))
    return out


def lpnorm_cleanup_spec(dtype: str, ntensors: int) -> KernelSpec:
    """`_foreach_norm`'s second kernel: one block per tensor sums its chunks' partial norms
    (grid, block, registers and shared memory as the H200 profile of tools/holdout/lstm shows)."""
    t = opmath(dtype)
    return KernelSpec(KIND_KERNEL, f"void at::native::lpnorm_cleanup<{t}, (at::native::NormType)1, {cpp(dtype)}, true, {t}>"
                      f"({t} const*, at::native::TensorListAddresses, int)", (ntensors, 1, 1), (512, 1, 1), 16, 2048)


# ------------------------------------------------------------------ memcpy / memset

def memcpy_name(src: TensorArg | None, dst: TensorArg | None) -> str:
    s_gpu = src is not None and src.on_gpu
    d_gpu = dst is not None and dst.on_gpu
    if s_gpu and d_gpu:
        if src.device != dst.device:
            return "Memcpy PtoP (Device -> Device)"
        return "Memcpy DtoD (Device -> Device)"
    if d_gpu:
        return f"Memcpy HtoD ({'Pinned' if src is not None and src.pinned else 'Pageable'} -> Device)"
    return f"Memcpy DtoH (Device -> {'Pinned' if dst is not None and dst.pinned else 'Pageable'})"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def log2i(x: int) -> int:
    return max(0, int(math.log2(max(1, x))))


# ------------------------------------------------------------------ topk (TensorTopK.cu), names as the H200 ran them

_THRUST = "thrust::THRUST_300001_SM_750_800_860_900_1000_1200_NS::"
_BLOCK_KEYS = (f"{_THRUST}transform_iterator<at::native::mbtopk::BlockIdxToKey, {_THRUST}counting_iterator<unsigned int, "
               f"unsigned int, {_THRUST}use_default, {_THRUST}use_default>, {_THRUST}use_default, {_THRUST}use_default>")
_TILES = "at_cuda_detail::cub::ReduceByKeyScanTileState<unsigned int, int, true>"
TOPK_SCAN_INIT = (f"void at_cuda_detail::cub::detail::scan_by_key::DeviceScanByKeyInitKernel<{_TILES}, {_BLOCK_KEYS}, unsigned long "
                  f"long>({_TILES}, {_BLOCK_KEYS}, cuda::std::__4::iterator_traits<{_BLOCK_KEYS}, void>::value_type*, unsigned "
                  f"long long, int)")
TOPK_SCAN = (f"void at_cuda_detail::cub::detail::scan_by_key::DeviceScanByKeyKernel<at_cuda_detail::cub::detail::scan_by_key::"
             f"policy_hub<{_BLOCK_KEYS}, unsigned int, unsigned int, cuda::std::__4::plus<void> >::Policy1000, {_BLOCK_KEYS}, "
             f"unsigned int*, unsigned int*, {_TILES}, cuda::std::__4::equal_to<void>, cuda::std::__4::plus<void>, "
             f"at_cuda_detail::cub::NullType, unsigned long long, unsigned int, unsigned int>({_BLOCK_KEYS}, unsigned int*, "
             f"unsigned int*, unsigned int*, {_TILES}, int, cuda::std::__4::equal_to<void>, cuda::std::__4::plus<void>, "
             f"at_cuda_detail::cub::NullType, unsigned long long)")


_TOPK_FIXED = frozenset({"mb_fill", "mb_kth_counts", "mb_scan_init", "mb_scan"})  # per call, not per element


def topk_multiblock(slices: int, size: int) -> bool:
    """TensorTopK.cu's should_use_multiblock (the cub scan-by-key branch), as recalled from the
    source; checked at two points on the H200: 4,096 rows of 1,024 multi-block, of 8 single."""
    return ((slices <= 20 and size >= 20000) or (20 < slices <= 40 and size >= 10000)
            or (40 < slices <= 80 and size >= 8000) or (80 < slices < 200 and size >= 5000)
            or (200 <= slices < 800 and size >= 3000) or (800 <= slices <= 4000 and size >= 800)
            or (slices > 4000 and size >= 400))


def topk_specs(dtype: str, slices: int, size: int, k: int, sort: bool, times: Mapping[str, float]) -> list[KernelSpec]:
    """The kernels of torch.topk over `slices` rows of `size`: the single-block gather (one block
    per row) or the multi-block radix select (one pass per 8 bits of the key), then a bitonic
    sort of the k results when `sort` and k > 1. Times: the measured ones of `times` scaled by
    the element count (approximate)."""
    t = cpp(dtype)
    scale = max(1.0, slices * size / (4096 * (1024 if topk_multiblock(slices, size) else 8)))
    info, out = f"at::cuda::detail::TensorInfo<{t} const, unsigned int>", f"at::cuda::detail::TensorInfo<{t}, unsigned int>"
    idx = "at::cuda::detail::TensorInfo<long, unsigned int>"

    def spec(name, grid, block, smem, key):
        dur = times[key] * (1.0 if key in _TOPK_FIXED else scale)
        return KernelSpec(KIND_KERNEL, name, grid, block, 32, smem, dur_ns=int(dur))

    if not topk_multiblock(slices, size):
        block = min(1024, max(32, -(-size // 32) * 32))
        specs = [spec(f"void at::native::sbtopk::gatherTopK<{t}, unsigned int, 2, false>({info}, unsigned int, unsigned int, "
                      f"bool, unsigned int, unsigned int, {out}, unsigned int, {idx}, unsigned int, {t}*)",
                      (slices, 1, 1), (block, 1, 1), 128, "sb_gather")]
    else:
        blocks = max(1, slices * -(-size // (256 * 4)))
        specs = [spec("void at::native::mbtopk::fill<unsigned int, unsigned int>(unsigned int*, unsigned int, unsigned int)",
                      (max(1, -(-slices // 512)), 1, 1), (512, 1, 1), 0, "mb_fill"),
                 KernelSpec(KIND_MEMSET, MEMSET_NAME, nbytes=4 * slices, api=API_MEMSET),
                 KernelSpec(KIND_MEMSET, MEMSET_NAME, nbytes=4 * slices, api=API_MEMSET)]
        for _ in range(max(1, _ITEMSIZE.get(dtype, 4))):
            specs += [spec(f"void at::native::mbtopk::computeBlockDigitCounts<{t}, unsigned int, unsigned int, 2>({info}, "
                           "unsigned int, unsigned int*, unsigned int, unsigned int, int, int, unsigned int, unsigned int, "
                           "unsigned int*, short*)", (blocks, 1, 1), (256, 1, 1), 0, "mb_digit_counts"),
                      spec("at::native::mbtopk::computeDigitCumSum(short*, unsigned int*, unsigned int)",
                           (blocks, 1, 1), (256, 1, 1), 0, "mb_digit_cumsum"),
                      spec(f"void at::native::mbtopk::computeBlockwiseWithinKCounts<unsigned int, {t}>(unsigned int*, "
                           f"short*, unsigned int*, unsigned int*, unsigned int, int, bool, unsigned int*, {t}*, unsigned "
                           "int*, unsigned int*, unsigned int)", (blocks, 1, 1), (256, 1, 1), 0, "mb_within_k")]
        specs += [spec("void at::native::mbtopk::computeBlockwiseKthCounts<unsigned int>(unsigned int*, short*, unsigned "
                       "int, unsigned int, unsigned int*)", (max(1, -(-blocks // 256)), 1, 1), (256, 1, 1), 0, "mb_kth_counts")]
        for _ in range(2):
            specs += [spec(TOPK_SCAN_INIT, (1, 1, 1), (128, 1, 1), 0, "mb_scan_init"),
                      spec(TOPK_SCAN, (max(1, -(-blocks // 2304)), 1, 1), (288, 1, 1), 0, "mb_scan")]
        specs.append(spec(f"void at::native::mbtopk::gatherTopK<{t}, unsigned int, 2>({info}, unsigned int, unsigned int, "
                          f"bool, unsigned int, unsigned int, {out}, unsigned int, {idx}, unsigned int, unsigned int, "
                          f"unsigned int, {t}*, unsigned int*, unsigned int*, unsigned int)",
                          (blocks, 1, 1), (256, 1, 1), 0, "mb_gather"))
    if sort and k > 1:
        n = 16 if k <= 16 else (32 if k <= 32 else 128)
        rows = max(1, 80 // n)
        specs.append(KernelSpec(KIND_KERNEL, f"void at::native::bitonicSortKVInPlace<2, -1, {n}, {n}, {t}, long, "
                                f"at::native::GTOp<{t}, true>, unsigned int>({out}, unsigned int, unsigned int, unsigned "
                                f"int, {idx}, unsigned int, at::native::GTOp<{t}, true>)",
                                (max(1, -(-slices // rows)), 1, 1), (n, rows, 1), 32, 6656,
                                dur_ns=int(times["bitonic_sort"] * max(1.0, slices / 4096) * n / 16)))
    return specs
