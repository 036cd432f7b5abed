"""CUDA extensions built at run time (`torch.utils.cpp_extension.load` / `load_inline`).

Frameworks JIT-compile their fused CUDA kernels on first use (DeepSpeed's FusedAdam, fused
LAMB, ...). Under simulation that cannot work: the installed torch may be a CPU build, there
may be no CUDA toolkit, and even a built module would run real kernels on tensors that hold
no data. Rather than let the build fail deep inside ninja/nvcc with a compiler log (or hang
for minutes), such a build stops at once with a `CudaExtensionError` that names the
extension and says what to use instead. Extensions without CUDA sources (CPU code) still
build and load normally.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable

from phantora_prof.errors import PhantoraError

log = logging.getLogger(__name__)

_CUDA_SUFFIXES = (".cu", ".cuh")


class CudaExtensionError(PhantoraError):
    """A CUDA extension was to be compiled and loaded under the simulated GPU."""


def _message(name: str, sources: list[str]) -> str:
    shown = ", ".join(str(s).rsplit("/", 1)[-1] for s in sources[:4]) + (" ..." if len(sources) > 4 else "")
    return (f"phantora-prof: the program tried to build the CUDA extension {name!r}"
            f"{f' ({shown})' if shown else ''}. A simulated GPU cannot run custom CUDA kernels, so "
            "CUDA extensions are not built under phantora-prof. Use the framework's PyTorch code path "
            "instead (e.g. pass torch.optim.AdamW to deepspeed.initialize instead of configuring "
            "DeepSpeed's FusedAdam / an 'optimizer' section that needs it, with "
            "\"zero_allow_untested_optimizer\": true), or, for an op that must stay, register a fake "
            "implementation with torch.library.register_fake and give its GPU time with --op-cost.")


def _has_cuda(sources: Any, with_cuda: Any) -> bool:
    if with_cuda:
        return True
    if isinstance(sources, (str, bytes)):
        sources = [sources]
    return any(str(s).endswith(_CUDA_SUFFIXES) for s in (sources or ()))


def _guard_load(orig: Callable) -> Callable:
    @functools.wraps(orig)
    def load(name, sources, *args: Any, **kwargs: Any):
        if _has_cuda(sources, kwargs.get("with_cuda")):
            srcs = [sources] if isinstance(sources, str) else list(sources)
            raise CudaExtensionError(_message(name, srcs))
        return orig(name, sources, *args, **kwargs)

    return load


def _guard_load_inline(orig: Callable) -> Callable:
    @functools.wraps(orig)
    def load_inline(name, cpp_sources, cuda_sources=None, *args: Any, **kwargs: Any):
        if cuda_sources or kwargs.get("with_cuda"):
            raise CudaExtensionError(_message(name, ["<inline CUDA source>"]))
        return orig(name, cpp_sources, cuda_sources, *args, **kwargs)

    return load_inline


def install() -> None:
    """Guard torch.utils.cpp_extension's JIT entry points (imported lazily by frameworks, who
    look them up as attributes of the module, so patching the module is enough)."""
    try:
        from torch.utils import cpp_extension
    except Exception:  # noqa: BLE001 - torch without the build helpers: nothing to guard
        return
    if getattr(cpp_extension.load, "_phantora_guard", False):
        return
    cpp_extension.load = _guard_load(cpp_extension.load)
    cpp_extension.load_inline = _guard_load_inline(cpp_extension.load_inline)
    cpp_extension.load._phantora_guard = True
