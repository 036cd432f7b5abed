"""Read the shipped cost data once, before ranks are forked.

Each rank's kernel-time model reads the same tables (the measured H200 kernels, the
family and isolated sweeps, GEMM split-K, the Triton curve, the GPU profile): ~30 MB of
parsed JSON per rank, decoded again in every rank that meets an op of that kind. The fork
server (runtime/process/fork_server.py) calls `preload` before its first fork, so every
rank finds the tables in its loaders' caches and shares their pages with the server
instead of holding its own copy, and spends none of its start-up decoding them.

The tables are plain data behind `functools.lru_cache` loaders; loading them earlier
changes no estimate. `cached_loaders` lists every such loader of this package, so a test
can check that `preload` reaches all of them (a new table that it missed would only cost
memory, not change a result)."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any, Callable

from phantora_prof.cost.gpus import DEFAULT_GPU, get_gpu

#: the GPU the measured tables were taken on (kernels.table, the Triton reference curve)
_TABLE_GPU = DEFAULT_GPU


def preload(gpu_key: str = DEFAULT_GPU) -> None:
    """Load every shipped table a rank's CostModel for `gpu_key` consults."""
    from phantora_prof.cost import (errorband, families, kernels, measured, ops, profiles, roofline, skinny_gemm,
                                    split_k, triton)

    gpu = get_gpu(gpu_key)
    profiles.load_profile(gpu.key)
    kernels.table(_TABLE_GPU)
    triton.load_curve(gpu.key)
    triton.load_curve(_TABLE_GPU)
    for fam_gpu in families.measured_gpus():
        families.model(fam_gpu)
    families._measured_multipliers()
    measured.model()
    split_k._sweep()
    split_k._observed()
    roofline._arg_positions()
    ops._grouped_mm_names()
    skinny_gemm._points()
    errorband.source_sigmas()


def cached_loaders() -> list[tuple[str, Callable[..., Any]]]:
    """(module.name, function) for each `lru_cache`d function of this package that takes no
    required argument or only a GPU key: the data loaders `preload` is meant to cover."""
    import phantora_prof.cost as pkg

    found = []
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for name, fn in vars(mod).items():
            if not hasattr(fn, "cache_info") or getattr(fn, "__module__", None) != mod.__name__:
                continue
            required = [p for p in inspect.signature(fn).parameters.values()
                        if p.default is inspect.Parameter.empty]
            if len(required) <= 1 and all("key" in p.name for p in required):
                found.append((f"{mod.__name__}.{name}", fn))
    return found
