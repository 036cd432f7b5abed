"""Dispatch CUDA tensors as a CUDA build of the installed torch would, on a CPU-only build.

An aten op can carry a CompositeImplicitAutograd (CIA) kernel, a decomposition into other
ops, next to device kernels. The dispatcher uses the CIA kernel for a backend only when that
backend has no kernel of its own. A CPU-only build has no CUDA kernels at all, so on our fake
CUDA tensors such ops silently decompose where a CUDA build runs one fused kernel: on
torch 2.13 `_fused_rms_norm` (F.rms_norm / nn.RMSNorm: ~7 fp32 kernels forward and ~15
backward instead of one each), `silu_backward` (7 kernels instead of 1) and `mish_backward`.
That changes kernels, time and memory (the decomposition saves fp32 intermediates).

Which ops those are comes from torch's own table, not from a list kept here: the
`native_functions.yaml` the wheel ships (torchgen/packaged), read for the installed version.
An op is affected when the yaml gives it a CUDA kernel (directly, or through its
`structured_delegate`) and this build registers a CIA kernel for it but none for CUDA. For
each, a kernel is registered under the CUDA dispatch key: the dispatcher then stops
decomposing at AutogradCUDA (autograd's own formula for the op runs, as on a CUDA build),
and the capture mode sees the op itself. That kernel runs only if something reaches the
CUDA key with the Python key excluded; it then does what a CPU build did before: decompose.

`has_cuda_kernel(op)` answers the same question for the capture mode, which decomposes a CIA
op only where a CUDA build would (never one that has a CUDA kernel there).
"""
from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

_LIBRARY: Any = None  # keeps the registrations alive
_CIA = torch._C.DispatchKey.CompositeImplicitAutograd


def _yaml_path() -> Path | None:
    try:
        import torchgen
    except ImportError:
        return None
    p = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    return p if p.exists() else None


def parse_native_functions(text: str) -> dict[str, tuple[frozenset[str], str | None]]:
    """`native_functions.yaml` -> {"name.overload": (dispatch keys, structured_delegate or None)}.

    A line-oriented reader of the few fields needed here (a full YAML parse of the 15,000-line
    file costs ~1 s at every rank's start; this ~15 ms)."""
    ops: dict[str, tuple[set, list]] = {}
    keys: set[str] = set()
    delegate: list = [None]
    in_dispatch = False
    for line in text.splitlines():
        if line.startswith("- func:"):
            name = line[len("- func:"):].strip().split("(", 1)[0]
            keys, delegate = set(), [None]
            ops[name] = (keys, delegate)
            in_dispatch = False
        elif line.startswith("  dispatch:"):
            in_dispatch = True
        elif in_dispatch and line.startswith("    ") and ":" in line:
            keys.update(k.strip() for k in line.strip().split(":", 1)[0].split(","))
        else:
            in_dispatch = False
            if line.startswith("  structured_delegate:"):
                delegate[0] = line.split(":", 1)[1].strip()
            elif line.startswith("  ufunc_inner_loop:"):
                keys.update(("CPU", "CUDA"))  # codegen'd from the ufunc loops for both (add.out)
    return {n: (frozenset(k), d[0]) for n, (k, d) in ops.items()}


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, tuple[frozenset[str], str | None]]:
    path = _yaml_path()
    if path is None:
        log.warning("torchgen's native_functions.yaml is not installed with torch: ops that a CUDA build runs "
                    "as one kernel may decompose into several here")
        return {}
    return parse_native_functions(path.read_text())


def cuda_build_has_kernel(name: str, table: dict | None = None) -> bool:
    """Whether a CUDA build of this torch registers a CUDA kernel for `name` ("op" or "op.overload")."""
    table = _table() if table is None else table
    seen = set()
    while name and name not in seen:
        seen.add(name)
        entry = table.get(name)
        if entry is None:
            return False
        keys, delegate = entry
        if "CUDA" in keys:
            return True
        name = delegate
    return False


def _qualified(name: str) -> str:
    return "aten::" + name


def decomposed_here(table: dict | None = None) -> list[str]:
    """Ops ("op" / "op.overload") a CUDA build runs as a CUDA kernel that this build decomposes."""
    table = _table() if table is None else table
    out = []
    for name in table:
        if not cuda_build_has_kernel(name, table):
            continue
        q = _qualified(name)
        if torch._C._dispatch_has_kernel_for_dispatch_key(q, _CIA) and \
                not torch._C._dispatch_has_kernel_for_dispatch_key(q, "CUDA"):
            out.append(name)
    return sorted(out)


_HAS_CUDA: dict = {}


def has_cuda_kernel(func) -> bool:
    """For an OpOverload: does a CUDA build run it as its own kernel (so it must not be decomposed)?"""
    r = _HAS_CUDA.get(func)
    if r is None:
        packet, overload = func._schema.name.split("::", 1)[1], func._overloadname
        name = packet if overload == "default" else f"{packet}.{overload}"
        r = _HAS_CUDA[func] = func.namespace == "aten" and cuda_build_has_kernel(name)
    return r


def _decomposing_kernel(op):
    def kernel(*args, **kwargs):
        return op.decompose(*args, **kwargs)

    return kernel


def install() -> list[str]:
    """Register CUDA-key kernels for the ops this build would decompose; returns their names."""
    global _LIBRARY
    if _LIBRARY is not None:
        return []
    names = decomposed_here()
    if not names:
        return []
    lib = torch.library.Library("aten", "IMPL")
    for name in names:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload or "default")
        lib.impl(name, _decomposing_kernel(op), "CUDA")
    _LIBRARY = lib
    log.debug("ops given a CUDA dispatch as on a CUDA build: %s", ", ".join(names))
    return names


# Ops a CUDA build runs as their CompositeExplicitAutograd(NonFunctional) kernel, a C++ body that
# calls other ops, whose kernels depend on the arguments in ways one cost for the whole op cannot
# see. The capture mode runs that body under itself, so each op it calls is captured, recorded
# and costed as on a CUDA build (a real profile shows them as the op's children):
# - select / slice / diagonal backward: zeros, then a copy into a view of them (a DtoD memcpy
#   when that view is contiguous: Swin's and ViT's qkv[0], qkv[1], qkv[2]);
# - masked_fill, index_put: a clone (a memcpy) and then the in-place kernel;
# - constant_pad_nd: a clone when no pad is positive (F.pad with zeros: Swin's window padding);
# - index_put_: reaches _index_put_impl_, whose accumulate path sorts the indices;
# - allclose: isclose, all, and the host's read of the answer (`.item()`: a sync).
# Only where the installed torch registers such a kernel and no CUDA kernel (checked from
# native_functions.yaml at the first call: a torch that gives one of them a CUDA kernel keeps it
# whole).
COMPOSITE_BODIES = frozenset({
    "select_backward", "slice_backward", "diagonal_backward", "masked_fill.Scalar", "masked_fill.Tensor",
    "index_put", "index_put_", "constant_pad_nd", "allclose",
})
_COMPOSITE_KEYS = (torch._C.DispatchKey.CompositeExplicitAutogradNonFunctional,
                   torch._C.DispatchKey.CompositeExplicitAutograd)
_BODY_KEY: dict = {}


def composite_body_key(func):
    """The dispatch key of the composite kernel a CUDA build runs for `func` (an OpOverload in
    COMPOSITE_BODIES), or None when the op stays one captured op."""
    try:
        return _BODY_KEY[func]
    except KeyError:
        pass
    key = None
    packet, overload = func._schema.name.split("::", 1)[1], func._overloadname
    name = packet if overload == "default" else f"{packet}.{overload}"
    if func.namespace == "aten" and name in COMPOSITE_BODIES and not cuda_build_has_kernel(name):
        for k in _COMPOSITE_KEYS:
            if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), k):
                key = k
                break
    _BODY_KEY[func] = key
    return key


# Ops outside ATen whose CUDA kernel torch itself implements in Python, device-generically: the
# same torch.library registration in a file of the installed torch serves CUDA and CPU (FSDP2's
# fsdp::all_gather_copy_in, fsdp::split_with_sizes_copy, fsdp::chunk_cat, fsdp::copy_). A CUDA
# build runs that Python, which calls ATen ops (narrow, split_with_sizes, _foreach_copy_, a pinned
# H2D copy of the sizes, ...): the capture mode runs it under itself, so each op it calls is
# captured and recorded inside the custom op and its Python costs host time, instead of faking
# the whole op from its Meta kernel as one op with one kernel. A CUDA-only Python kernel keeps
# the faked path: torch's own are DSL kernels (torch._native: Triton / CuTe launches) and
# symmetric-memory collectives (symm_mem::, which need the devices' shared buffers), and kernels
# registered outside torch (a user's or another library's custom ops) may launch kernels of
# their own or read tensor data, which fake tensors cannot serve.
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_PY_CUDA: dict = {}


def python_cuda_kernel(func) -> bool:
    """Whether `func` (an OpOverload) is a non-ATen op whose CUDA kernel is torch's own
    device-generic Python (registered for the CPU at the same site)."""
    r = _PY_CUDA.get(func)
    if r is None:
        r = _PY_CUDA[func] = _python_cuda_kernel(func)
    return r


def _registration_site(dump: str, key: str) -> str | None:
    """Where `torch._C._dispatch_dump` says `key`'s kernel was registered (file:line), or None."""
    for line in dump.splitlines():
        if line.startswith(key + ":") and "registered at " in line:
            return line.split("registered at ", 1)[1].split(" ", 1)[0]
    return None


def _python_cuda_kernel(func) -> bool:
    if func.namespace in ("aten", "prim", "prims"):
        return False
    name = func.name()
    try:
        if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA"):
            return False
        dump = torch._C._dispatch_dump(name)
    except RuntimeError:
        return False
    cuda, cpu = _registration_site(dump, "CUDA"), _registration_site(dump, "CPU")
    if cuda is None or cuda != cpu:
        return False
    where = cuda.rsplit(":", 1)[0]
    if not where.endswith(".py"):
        return False
    try:
        return str(Path(where).resolve()).startswith(_TORCH_DIR + "/")
    except OSError:
        return False
