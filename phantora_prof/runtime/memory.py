"""Simulated GPU memory: a model of PyTorch's CUDA caching allocator (first version).

What it models: every fake CUDA storage is an allocation, rounded like the caching
allocator (multiples of 512 B); small requests (<= 1 MiB) are served from 2 MiB segments,
requests under 10 MiB from 20 MiB segments, larger ones from segments rounded up to 2 MiB;
freed blocks stay reserved (cached) for reuse until `empty_cache()`. Frees happen when the
storage dies (Python reference counting, like the real allocator).

What it does not model yet: block splitting/fragmentation inside a segment and stream-
ordered reuse (a freed block is reusable at once). Peaks therefore tend to be a little low
for reserved memory; allocated memory is exact up to rounding.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any

_KB = 1024
_MB = 1024 * 1024
SMALL_SIZE = 1 * _MB
SMALL_SEGMENT = 2 * _MB
MEDIUM_SEGMENT = 20 * _MB
MIN_LARGE_ALLOC = 10 * _MB
ROUND = 512


def round_size(nbytes: int) -> int:
    if nbytes < ROUND:
        return ROUND
    return ((nbytes + ROUND - 1) // ROUND) * ROUND


def segment_size(rounded: int) -> int:
    if rounded <= SMALL_SIZE:
        return SMALL_SEGMENT
    if rounded < MIN_LARGE_ALLOC:
        return MEDIUM_SEGMENT
    return ((rounded + 2 * _MB - 1) // (2 * _MB)) * (2 * _MB)


class AllocatorModel:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.allocated = 0
        self.peak_allocated = 0
        self.reserved = 0
        self.peak_reserved = 0
        self.free_small = 0
        self.free_large = 0
        self.num_allocs = 0
        self.num_frees = 0
        self.num_segments = 0
        self._lock = threading.Lock()

    def allocate(self, nbytes: int) -> int:
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        with self._lock:
            free = self.free_small if small else self.free_large
            if free >= size:
                free -= size
            else:
                seg = segment_size(size)
                while free < size:
                    free += seg
                    self.reserved += seg
                    self.num_segments += 1
                free -= size
            if small:
                self.free_small = free
            else:
                self.free_large = free
            self.allocated += size
            self.num_allocs += 1
            self.peak_allocated = max(self.peak_allocated, self.allocated)
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        return size

    def free(self, size: int) -> None:
        with self._lock:
            self.allocated -= size
            self.num_frees += 1
            if size <= SMALL_SIZE:
                self.free_small += size
            else:
                self.free_large += size

    def empty_cache(self) -> None:
        with self._lock:
            released = self.free_small + self.free_large
            self.reserved = max(self.allocated, self.reserved - released)
            self.free_small = self.free_large = 0

    def track_storage(self, storage: Any, nbytes: int) -> None:
        size = self.allocate(nbytes)
        weakref.finalize(storage, self.free, size)

    def stats(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for pool in ("all", "small_pool", "large_pool"):
            out[f"allocated_bytes.{pool}.current"] = self.allocated if pool == "all" else 0
            out[f"allocated_bytes.{pool}.peak"] = self.peak_allocated if pool == "all" else 0
            out[f"reserved_bytes.{pool}.current"] = self.reserved if pool == "all" else 0
            out[f"reserved_bytes.{pool}.peak"] = self.peak_reserved if pool == "all" else 0
        out["active_bytes.all.current"] = self.allocated
        out["active_bytes.all.peak"] = self.peak_allocated
        out["allocation.all.allocated"] = self.num_allocs
        out["allocation.all.freed"] = self.num_frees
        out["allocation.all.current"] = self.num_allocs - self.num_frees
        out["segment.all.current"] = self.num_segments
        out["num_alloc_retries"] = 0
        out["num_ooms"] = 0
        return dict(sorted(out.items()))


_models: dict[int, AllocatorModel] = {}


def model(device: int = 0) -> AllocatorModel:
    m = _models.get(device)
    if m is None:
        raise RuntimeError("simulated memory is not initialised")
    return m


def api(st: Any, capacity: int) -> dict[str, Any]:
    """The torch.cuda memory functions, reading the allocator model."""
    for d in range(st.config.device_count):
        _models.setdefault(d, AllocatorModel(capacity))

    def dev(device: Any = None) -> AllocatorModel:
        if device is None:
            return _models[st.current_device]
        idx = device if isinstance(device, int) else getattr(device, "index", None)
        if isinstance(device, str):
            import torch

            idx = torch.device(device).index
        return _models[st.current_device if idx is None else idx]

    def reset_peak(device: Any = None) -> None:
        m = dev(device)
        m.peak_allocated = m.allocated
        m.peak_reserved = m.reserved

    return {
        "memory_allocated": lambda device=None: dev(device).allocated,
        "max_memory_allocated": lambda device=None: dev(device).peak_allocated,
        "memory_reserved": lambda device=None: dev(device).reserved,
        "max_memory_reserved": lambda device=None: dev(device).peak_reserved,
        "memory_cached": lambda device=None: dev(device).reserved,
        "max_memory_cached": lambda device=None: dev(device).peak_reserved,
        "memory_stats": lambda device=None: dev(device).stats(),
        "memory_stats_as_nested_dict": lambda device=None: dev(device).stats(),
        "reset_peak_memory_stats": reset_peak,
        "reset_max_memory_allocated": reset_peak,
        "reset_max_memory_cached": reset_peak,
        "reset_accumulated_memory_stats": lambda device=None: None,
        "empty_cache": lambda: [m.empty_cache() for m in _models.values()] and None,
        "mem_get_info": lambda device=None: (dev(device).capacity - dev(device).reserved, dev(device).capacity),
        "memory_summary": lambda device=None, abbreviated=False: _summary(dev(device)),
    }


def _summary(m: AllocatorModel) -> str:
    return (f"|  Simulated CUDA memory (phantora-prof)\n|  allocated: {m.allocated / _MB:.1f} MiB "
            f"(peak {m.peak_allocated / _MB:.1f} MiB)\n|  reserved: {m.reserved / _MB:.1f} MiB "
            f"(peak {m.peak_reserved / _MB:.1f} MiB)\n")
