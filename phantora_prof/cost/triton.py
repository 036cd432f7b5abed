"""Time of the Triton kernels torch.compile (Inductor) generates.

Inductor fuses pointwise ops and reductions into Triton kernels whose cost is dominated by
the bytes they move: what they read from buffers other kernels wrote, and what they write
for other kernels (values that stay inside a fused kernel never reach memory). A kernel is
described here by those bytes, its iteration space (`numel` output points times `rnumel`
reduced elements) and its Inductor category:

- `pointwise` (`triton_poi_*`): one pass, fully parallel;
- `persistent_reduction` (`triton_per_*`): a whole reduction row held in registers;
- `reduction` (`triton_red_*`): a looped reduction (long rows, or column sums).

Time = max(bytes term, compute term). The bytes term is the launch floor plus bytes over an
achieved bandwidth that depends on the bytes moved (small kernels cannot fill the GPU) and
the category. The compute term counts iteration points (numel x rnumel) at a measured cost
per point for kernels whose ops are expensive per element: transcendental math (exp, tanh,
GELU, softmax, log) and random numbers (dropout's Philox), named in the kernel's fused-op
name; plain arithmetic, casts and norms stay memory-bound. The curve comes from
measured kernels (`tools/holdout/triton_sweep.py` on the H200, fitted by
`phantora-prof calibrate triton` into cost/data/triton_<gpu>.json); a GPU without such a
curve uses the H200's scaled by its HBM bandwidth, which is approximate (and says so in
the kernel's source). Without any curve the roofline's elementwise efficiency applies.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources

from phantora_prof.cost.kernels import API_CU_KERNEL, KIND_KERNEL, Kernel
from phantora_prof.errors import ConfigError

CATEGORIES = ("pointwise", "reduction", "persistent_reduction")
COMPUTE_CLASSES = ("plain", "transcendental", "rng")
# fused-op name parts (Inductor's descriptive kernel names) that make a kernel compute-heavy
_RNG_OPS = ("dropout", "rand", "bernoulli", "philox", "seed")
_TRANSCENDENTAL_OPS = ("gelu", "exp", "softmax", "tanh", "erf", "sigmoid", "silu", "log", "sin", "cos",
                       "mish", "softplus", "elu")


_REDUCTION_TRANSCENDENTAL_OPS = ("softmax", "logsumexp")


def compute_class(fused_name: str, category: str = "pointwise") -> str:
    """The compute class of a kernel from its fused-op name (`gelu_view`, `add_native_dropout`).

    A reduction's name also lists the pointwise ops whose results it reads (a bias gradient
    `gelu_gelu_backward_sum` reads what another kernel computed), so only softmax-type
    reductions, which exponentiate every element they reduce, count as transcendental: the
    measured bias-gradient sums run at the bytes' speed."""
    name = fused_name.lower()
    # a dropout backward multiplies by the saved mask: no random numbers
    if any(op in name.replace("dropout_backward", "") for op in _RNG_OPS):
        return "rng"
    ops = _TRANSCENDENTAL_OPS if category == "pointwise" else _REDUCTION_TRANSCENDENTAL_OPS
    if any(op in name for op in ops):
        return "transcendental"
    return "plain"
_PREFIX = {"pointwise": "poi", "reduction": "red", "persistent_reduction": "per"}
SCHEMA = "phantora-prof/triton-curve/1"
# Reductions run at different speeds per byte by kind: a Welford pass (norm statistics: mean and
# variance together) is slower, a column sum (Inductor's hint "outer": the reduced dimension is
# not the contiguous one) faster than a row reduction of the same bytes (the session-17 sweep).
# A kind gets a curve of its own, keyed "<category>/<kind>", where enough kernels were measured.
OUTER_HINTS = ("outer", "outer_tiny")


def curve_keys(category: str, welford: bool, reduction_hint: str, n_buffers: int = 0,
               few_buffers: int = 0) -> tuple[str, ...]:
    """The curve keys a kernel may take, most specific first (the last: its category). Column
    sums split by how many buffers they stream (`few_buffers`: the curve's boundary, 0: no
    split): a plain sum(0) (2) runs faster per byte than one fused with the pointwise work
    before it (a GELU's backward: 4-6)."""
    if category == "pointwise":
        return (category,)
    if welford:
        return (f"{category}/welford", category)
    if reduction_hint in OUTER_HINTS:
        if n_buffers and few_buffers:
            few = "few" if n_buffers <= few_buffers else "many"
            return (f"{category}/outer/{few}", f"{category}/outer", category)
        return (f"{category}/outer", category)
    return (category,)


@dataclass(frozen=True, slots=True)
class TritonKernelShape:
    """What the time of one generated Triton kernel depends on."""

    category: str  # one of CATEGORIES
    numel: int  # output points (Inductor's xnumel)
    rnumel: int  # reduced elements per point (1 for pointwise)
    bytes_read: int
    bytes_written: int
    compute: str = "plain"  # one of COMPUTE_CLASSES: what each iteration point costs beyond its bytes
    n_buffers: int = 0  # distinct buffers the kernel reads or writes in memory (0: not known)
    reduction_hint: str = ""  # Inductor's ReductionHint of a reduction ("inner", "outer", ...; "" for pointwise)
    welford: bool = False  # a Welford reduction (mean and variance in one pass: batch / layer norm statistics)

    def __post_init__(self) -> None:
        if self.compute not in COMPUTE_CLASSES:
            raise ConfigError(f"unknown Triton compute class {self.compute!r} (known: {', '.join(COMPUTE_CLASSES)})")
        if self.category not in CATEGORIES:
            raise ConfigError(f"unknown Triton kernel category {self.category!r} (known: {', '.join(CATEGORIES)})")
        if self.numel < 0 or self.rnumel < 1 or self.bytes_read < 0 or self.bytes_written < 0:
            raise ConfigError(f"invalid Triton kernel shape {self}")

    @property
    def nbytes(self) -> int:
        return self.bytes_read + self.bytes_written


def kernel_name(category: str, fused_name: str, index: int) -> str:
    """Inductor's name: triton_<poi|red|per>_<fused_name>_<index in its graph>, where
    `fused_name` is Inductor's descriptive part ("fused_add_mul"; empty without one)."""
    parts = ["triton", _PREFIX[category]] + ([fused_name] if fused_name else []) + [str(index)]
    return "_".join(parts)


@dataclass(frozen=True, slots=True)
class TritonCurve:
    """Measured time against bytes moved, per category, on one GPU: piecewise linear in
    log(bytes) -> log(ns), clamped at both ends by the floor (small kernels) and the
    asymptotic bandwidth (large ones)."""

    gpu: str
    hbm_bandwidth: float  # bytes/s of the GPU it was measured on
    points: dict  # curve key (cost/triton.py curve_keys) -> ((bytes, ns), ...) sorted by bytes
    ns_per_point: dict = None  # compute class -> ns per iteration point (absent: memory-bound)
    few_buffers: int = 0  # column sums streaming at most this many buffers have their own curve (0: none)

    def time_ns(self, shape: TritonKernelShape) -> float:
        per_point = (self.ns_per_point or {}).get(shape.compute, 0.0)
        compute = per_point * shape.numel * shape.rnumel
        return max(self.bytes_ns(shape), compute)

    def bytes_ns(self, shape: TritonKernelShape) -> float:
        keys = curve_keys(shape.category, shape.welford, shape.reduction_hint, shape.n_buffers, self.few_buffers)
        pts = next((self.points[k] for k in keys if k in self.points), None) or self.points.get("pointwise")
        b = max(1, shape.nbytes)
        if b <= pts[0][0]:
            return float(pts[0][1])
        if b >= pts[-1][0]:
            b_last, ns_last = pts[-1]
            return ns_last * b / b_last  # past the last point: its bandwidth
        lb = math.log(b)
        for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
            if b <= b1:
                f = (lb - math.log(b0)) / (math.log(b1) - math.log(b0))
                return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
        return float(pts[-1][1])  # not reached


@lru_cache(maxsize=None)
def load_curve(gpu_key: str) -> TritonCurve | None:
    """The shipped curve for `gpu_key`, or None."""
    path = resources.files("phantora_prof.cost") / "data" / f"triton_{gpu_key}.json"
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    if doc.get("schema") != SCHEMA:
        raise ConfigError(f"{path}: not a {SCHEMA} file")
    return curve_from_doc(doc)


def curve_from_doc(doc: dict) -> TritonCurve:
    pts = {c: tuple((int(b), float(t)) for b, t in v) for c, v in doc["points"].items()}
    return TritonCurve(doc["gpu"], float(doc["hbm_bandwidth"]), pts,
                       {k: float(v) for k, v in doc.get("ns_per_point", {}).items()}, int(doc.get("few_buffers", 0)))


def kernel_time_ns(shape: TritonKernelShape, gpu) -> tuple[float, str]:
    """(duration, source) of a Triton kernel on `gpu` (a cost.gpus.GpuSpec)."""
    from phantora_prof.cost import roofline

    curve = load_curve(gpu.key)
    if curve is not None:
        return curve.time_ns(shape), "triton"
    ref = load_curve("h200")
    if ref is not None:
        # another GPU: the H200's curve with bytes scaled by the bandwidth ratio (approximate)
        # (datasheet bandwidths: the H100's compiled steps of tools/holdout/compile_dynamic.py ran
        # within 3% of this scaling, where its sustained-bandwidth ratio for eager kernels,
        # roofline.hbm_bw, made them 1.4-5.7% fast; session 32)
        scale = ref.hbm_bandwidth / gpu.hbm_bandwidth
        scaled = replace(shape, bytes_read=int(shape.bytes_read * scale), bytes_written=int(shape.bytes_written * scale))
        return ref.time_ns(scaled), "triton_scaled"
    e = roofline.eff_for("vectorized", gpu)  # TensorIterator's vectorized kernels: the closest eager family
    return e.t0_ns + shape.nbytes / (roofline.hbm_bw(gpu) * e.mem) * 1e9, "roofline"


def launch_geometry(shape: TritonKernelShape) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Approximate (grid, block) as Inductor's default heuristics launch them: pointwise
    XBLOCK 1024 with 4 warps; reductions one program per row (per) or per 8 rows with 8
    warps. Only shown in the trace; the time does not use it."""
    if shape.category == "pointwise":
        return (max(1, -(-shape.numel // 1024)), 1, 1), (128, 1, 1)
    if shape.category == "persistent_reduction":
        warps = 8 if shape.rnumel >= 512 else 4
        return (max(1, shape.numel), 1, 1), (32 * warps, 1, 1)
    return (max(1, -(-shape.numel // 8) if shape.rnumel < 4096 else shape.numel), 1, 1), (256, 1, 1)


def triton_kernel(name: str, shape: TritonKernelShape, gpu) -> Kernel:
    """The trace activity of one Triton kernel launch (launched with cuLaunchKernel, as
    Triton's launcher does)."""
    ns, source = kernel_time_ns(shape, gpu)
    grid, block = launch_geometry(shape)
    return Kernel(KIND_KERNEL, name, max(1, int(round(ns))), grid, block, launch_api=API_CU_KERNEL,
                  source=source)
