"""Per-GPU model constants, read from data files that say where every number comes from.

The kernel-time model and the engine have numbers that are not datasheet facts: roofline
efficiencies per kernel class, fixed costs of hand-modelled kernels (batch-norm blocks, the
serial NLL kernel, embedding-backward sorts), the launch latency and queue gap of a stream,
and how much NCCL kernels slow compute. They were fitted to H200 traces, measured there, or
set by hand; which of the three is recorded entry by entry in
`cost/data/profiles/<gpu>.json`:

    {"schema": "phantora-gpu-profile/1", "gpu": "h200", "inherits": null,
     "eff": {"gemm": {"mem": 0.92, "compute": 0.94, "t0_ns": 2000.0, "source": "fitted on ..."}},
     "kernel": {"gemm_tail": {"value": 0.25, "source": "fitted: ..."}},
     "engine": {"launch_latency_ns": {"value": 4000, "source": "measured: ..."}}}

A profile may inherit another GPU's and override entries (the A100 takes published GEMM and
attention efficiencies and inherits the rest); an inherited entry's source says so. Datasheet
figures (peaks, bandwidths, SM counts) stay in cost/gpus.py. A GPU with no profile file is an
error, never a silent fallback. Loaded once per process; values are exactly the JSON's, so a
run is reproducible from the file.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from phantora_prof.errors import ConfigError

SCHEMA = "phantora-gpu-profile/1"
PROFILES = Path(__file__).parent / "data" / "profiles"


@dataclass(frozen=True, slots=True)
class Eff:
    """How a class of kernels uses the GPU: fractions of peak and a fixed cost (ns)."""

    mem: float = 0.9  # fraction of HBM bandwidth
    compute: float = 0.9  # fraction of the dtype's dense peak
    t0_ns: float = 1200.0  # fixed cost per op (ramp-up, tail, second pass)

    def __post_init__(self) -> None:
        for name in ("mem", "compute"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise ConfigError(f"efficiency {name}={v!r} must be in (0, 1]")
        if not isinstance(self.t0_ns, (int, float)) or self.t0_ns < 0:
            raise ConfigError(f"efficiency t0_ns={self.t0_ns!r} must be >= 0")


@dataclass(frozen=True)
class GpuProfile:
    """The model constants of one simulated GPU (see the module docstring for the file)."""

    gpu: str
    eff: Mapping[str, Eff]
    # kernel model (cost/roofline.py, cost/ops.py, cost/measured.py)
    kernel_floor_ns: int
    memset_fixed_ns: int
    dtod_fixed_ns: float
    dtod_fraction: float
    gemm_tail: float
    gemm_memset_tile: int  # a non-split 16-bit Hopper GEMM over more than 2 x SMs such tiles clears a flag first
    attn_t0_fwd_ns: float
    attn_t0_bwd_ns: float
    attn_bias_fwd_elems_per_ns: float  # memory-efficient attention with an additive bias: bias elements per ns
    attn_bias_bwd_elems_per_ns: float  # ... its backward returning the bias gradient
    im2col_tap_ns: float  # F.unfold's per-image kernel: one tap of a thread's window, per wave of blocks
    col2im_taps_per_ns: float  # F.fold's batched kernel: column reads per ns
    dw_direct_fprop_per_ns: float  # cuDNN's direct grouped depthwise kernels (ops.direct_depthwise): outputs per ns
    dw_direct_dgrad_row_per_ns: float  # ... their data gradient, 1 x k windows: inputs per ns
    dw_direct_dgrad_col_per_ns: float  # ... k x 1 windows
    dw_direct_wgrad_per_ns: float  # ... their weight gradient: output-gradient elements per ns
    attn_tile: int
    attn_tile_fp32: int  # the memory-efficient kernels' fp32 path
    family_own_gpu_margin: float  # cost/__init__.py _nearest_table
    bn_block_elems_per_s: Mapping[str, float]
    bn_block_t0_ns: Mapping[str, float]
    bn_blocks_per_sm: int
    nll_serial_ns_per_row: float
    nll_serial_t0_ns: float
    nll_bwd_fixed_ns: float
    nll_bwd_ns_per_row: float
    reduce_bw_per_column: float
    emb_bwd_sort_fixed_ns: float
    emb_feature_fixed_ns: float
    emb_feature_ns_per_index: float
    index_sort_histogram_ns: float  # index_put_(accumulate=True)'s cub radix sort kernels (ops.index_put_accumulate)
    index_sort_scan_ns: float
    index_sort_onesweep_ns: float
    index_accumulate_fixed_ns: float
    index_accumulate_per_duplicate_ns: float  # the accumulation's serial walk over one row's indices
    index_accumulate_run_fixed_ns: float  # ... when the indices' longest run is known (their values)
    index_accumulate_per_run_index_ns: float
    topk_ns: Mapping[str, float]  # topk's kernels at the measured sizes (ops.topk)
    rnn_step_ns: float
    l2_warm_weight: float
    hbm_sustained_ratio: float  # HBM bandwidth this GPU sustains, relative to the reference H200's share of its datasheet peak
    pad_mm_ratio: float  # cost-model unpadded / padded GEMM time above which Inductor's shape_padding pads
    multi_tensor_t0_ns: float  # foreach launches (cost/multi_tensor.py): fixed cost per launch
    multi_tensor_iter_ns: Mapping[str, float]  # per op (and "default"): one iteration of a block's chunk loop
    multi_tensor_mem_fraction: Mapping[str, float]  # per op (and "default"): fraction of HBM bandwidth
    lpnorm_cleanup_ns: float  # _foreach_norm's cleanup kernel (one block per tensor)
    # engine (engine/gpu.py, engine/contention.py)
    launch_latency_ns: int
    kernel_gap_ns: int
    graph_node_gap_ns: int  # between consecutive kernels of one CUDA graph on a stream
    graph_cudnn_sdpa_gap_ns: int  # the same before a cuDNN attention kernel
    graph_launch_latency_ns: int  # from cudaGraphLaunch to the graph's first kernel on an idle stream
    launch_queue_depth: int  # launches queued before cudaLaunchKernel blocks (runtime/device/launch_queue.py)
    nccl_ctas: int
    nccl_p2p_ctas: int
    contention_slowdown: Mapping[str, float]
    # entry -> where its number comes from ("eff.gemm", "kernel_gap_ns", ...)
    sources: Mapping[str, str]

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("gpu", "eff", "sources"):
                continue
            vals = v.values() if isinstance(v, Mapping) else (v,)
            for x in vals:
                if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0:
                    raise ConfigError(f"GPU profile {self.gpu}: {f.name} must be a non-negative number, got {v!r}")
        if not 0 <= self.l2_warm_weight <= 1:
            raise ConfigError(f"GPU profile {self.gpu}: l2_warm_weight must be in [0, 1]")
        missing = [k for k in self.sources if not self.sources[k]]
        if missing:
            raise ConfigError(f"GPU profile {self.gpu}: entries without a source: {missing}")

    def efficiency(self, key: str) -> Eff:
        try:
            return self.eff[key]
        except KeyError:
            raise ConfigError(f"GPU profile {self.gpu} has no efficiency {key!r} "
                              f"(known: {', '.join(sorted(self.eff))})") from None


def _read(key: str) -> dict[str, Any]:
    path = PROFILES / f"{key}.json"
    if not path.exists():
        known = ", ".join(shipped_profiles())
        raise ConfigError(f"no model profile for GPU {key!r} (cost/data/profiles/{key}.json); "
                          f"profiles exist for: {known}")
    doc = json.loads(path.read_text())
    if doc.get("schema") != SCHEMA or doc.get("gpu") != key:
        raise ConfigError(f"{path}: not a {SCHEMA} file for GPU {key!r}")
    return doc


def _flatten(key: str, seen: tuple[str, ...] = ()) -> tuple[dict[str, Eff], dict[str, Any], dict[str, str]]:
    """(eff, scalar entries, sources) of profile `key` with its ancestors' entries below it."""
    if key in seen:
        raise ConfigError(f"GPU profiles inherit in a circle: {' -> '.join(seen + (key,))}")
    doc = _read(key)
    parent = doc.get("inherits")
    eff: dict[str, Eff] = {}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if parent:
        eff, values, p_sources = _flatten(parent, seen + (key,))
        sources = {k: s if s.startswith("inherited from ") else f"inherited from {parent}: {s}"
                   for k, s in p_sources.items()}
    for name, e in doc.get("eff", {}).items():
        eff[name] = Eff(mem=e["mem"], compute=e["compute"], t0_ns=e["t0_ns"])
        sources[f"eff.{name}"] = e.get("source", "")
    for section in ("kernel", "engine"):
        for name, entry in doc.get(section, {}).items():
            values[name] = entry["value"]
            sources[name] = entry.get("source", "")
    return eff, values, sources


@lru_cache(maxsize=None)
def load_profile(key: str) -> GpuProfile:
    """The profile of the GPU with table key `key` ("h200", "h100", "a100")."""
    eff, values, sources = _flatten(key)
    names = {f.name for f in fields(GpuProfile)} - {"gpu", "eff", "sources"}
    unknown = sorted(set(values) - names)
    missing = sorted(names - set(values))
    if unknown or missing:
        raise ConfigError(f"GPU profile {key}: unknown entries {unknown}, missing entries {missing}")
    for name, v in list(values.items()):
        if isinstance(v, dict):
            values[name] = MappingProxyType(dict(v))
    return GpuProfile(gpu=key, eff=MappingProxyType(eff), sources=MappingProxyType(sources), **values)


def profile_for(gpu: Any) -> GpuProfile:
    """The profile of a GpuSpec (by its table key)."""
    return load_profile(gpu.key)


def shipped_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES.glob("*.json"))
