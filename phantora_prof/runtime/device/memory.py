"""Simulated GPU memory as torch.cuda shows it: the memory API over the allocator models.

The allocator (PyTorch's CUDA caching allocator, block for block) is runtime/device/allocator.py;
the allocations ops make besides their outputs (workspaces, reduction scratch, embedding
backward's sort buffers) are runtime/device/op_allocations.py. This module answers
`torch.cuda.memory_allocated()`, `memory_stats()`, `empty_cache()`, ... and re-exports both
(the allocator's models are made here, on the first call, for every simulated device).

Calibration: GPT-2 124M, bf16 autocast, fused AdamW, batch 8 x 1024 on an H200 (torch 2.11;
shared/reference/h200/gpt_small_memory/memory_probe.log), simulated with
tests/scripts/memory_probe_noprof.py (bytes; sim - real):

    phase          allocated (real)  sim-real   reserved (real)  sim-real  max_allocated (real)  sim-real
    model               498,558,976        0       555,745,280        0         498,558,976        0
    data                498,690,048        0       555,745,280        0         498,690,048        0
    forward0          6,029,360,128        0     6,922,698,752        0       6,853,706,752        0
    backward0         1,074,188,800        0     8,571,060,224        0       7,677,722,112        0
    optimizer0        2,077,936,128        0     8,571,060,224        0       7,677,722,112        0
    zero_grad0        1,570,595,328        0     8,571,060,224        0       7,677,722,112        0
    forward1          7,057,814,528 +262,144     8,573,157,376        0       7,882,161,664 +262,144
    backward1         2,074,003,968 -393,216    10,221,518,848        0       8,706,176,512 +262,144
    optimizer1        2,074,003,968 -393,216    10,221,518,848        0       8,706,176,512 +262,144
    zero_grad1        1,570,595,328        0    10,221,518,848        0       8,706,176,512 +262,144
    forward2, backward2, optimizer2, zero_grad2: as in step 1

The peak (8,706,176,512) is reached in the first op of the backward (the fp32 gradient of the
logits, 1.65 GB, on top of the forward's activations).  Step 2's 906 allocations match the
reference trace's `[memory]` events one for one in size and order, except that a few bf16
weight copies and weight-gradient matmuls get a block of a neighbouring size (4.5 vs 5.25 MiB)
from cached blocks placed slightly differently; memory_stats() agrees within 0.01% on bytes
allocated/freed/requested, exactly on segments and allocation counts, within 7% on the
inactive-split block counts.  Without the modelling above the first version
was 1% low on max_allocated (no workspaces, no unsplit remainders).  streams.py
(shared/reference/h200/streams) peaks at 2,081,523,200 B, as the real run.
"""
from __future__ import annotations

from typing import Any, Callable

from phantora_prof.runtime.device.allocator import AllocatorModel, Block, _models


def record_stream(tensor: Any, stream: Any) -> None:
    """Tensor.record_stream(stream) for a simulated CUDA tensor: its block is used on `stream`."""
    block = getattr(tensor.untyped_storage(), "_phantora_block", None)
    if block is None:
        return
    sid = getattr(stream, "stream_id", stream)
    if isinstance(sid, int):
        dev = tensor.device.index or 0
        m = _models.get(dev)
        if m is not None:
            m.record_stream(block, sid)


def note_host_sync(device: int | None = None) -> None:
    """The host waited for the GPU; see AllocatorModel.note_host_sync."""
    for d, m in _models.items():
        if device is None or d == device:
            m.note_host_sync()


def api(st: Any, capacity: int) -> dict[str, Any]:
    """The torch.cuda memory functions, answered from the allocator models."""
    try:
        major, minor = (int(x) for x in st.gpu.compute_capability)
    except (AttributeError, TypeError, ValueError):
        major, minor = 9, 0
    for d in range(st.config.device_count):
        if d not in _models:
            m = AllocatorModel(capacity, device=d, capability=(major, minor))
            m.num_sms = int(getattr(st.gpu, "num_sms", 132) or 132)
            m.current_stream = (lambda dd: lambda: st.stream_of(dd))(d)
            _models[d] = m

    def dev(device: Any = None) -> AllocatorModel:
        return _models[st.device_index(device)]

    def empty_cache() -> None:
        for m in _models.values():
            m.empty_cache()

    def set_fraction(fraction: float, device: Any = None) -> None:
        if not 0 <= fraction <= 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        m = dev(device)
        m.allowed_memory_maximum = int(fraction * m.capacity)

    def caching_allocator_alloc(size: int, device: Any = None, stream: Any = None) -> int:
        m = dev(device)
        sid = getattr(stream, "stream_id", stream)
        b = m.allocate(size, sid if isinstance(sid, int) else None)
        if b is None:
            return 0
        _raw[b.addr] = (m, b)
        return b.addr

    def caching_allocator_delete(mem_ptr: int) -> None:
        entry = _raw.pop(mem_ptr, None)
        if entry is not None:
            entry[0].free(entry[1])

    _raw: dict[int, tuple[AllocatorModel, Block]] = {}

    return {
        "memory_allocated": lambda device=None: dev(device).allocated,
        "max_memory_allocated": lambda device=None: dev(device).peak_allocated,
        "memory_reserved": lambda device=None: dev(device).reserved,
        "max_memory_reserved": lambda device=None: dev(device).peak_reserved,
        "memory_cached": lambda device=None: dev(device).reserved,
        "max_memory_cached": lambda device=None: dev(device).peak_reserved,
        "memory_stats": lambda device=None: dev(device).stats_dict(),
        "memory_stats_as_nested_dict": lambda device=None: dev(device).nested_stats(),
        "reset_peak_memory_stats": lambda device=None: dev(device).reset_peak(),
        "reset_max_memory_allocated": lambda device=None: dev(device).reset_peak(),
        "reset_max_memory_cached": lambda device=None: dev(device).reset_peak(),
        "reset_accumulated_memory_stats": lambda device=None: dev(device).reset_accumulated(),
        "empty_cache": empty_cache,
        "mem_get_info": lambda device=None: (dev(device).device_free, dev(device).capacity),
        "memory_summary": _torch_memory_summary(),
        "memory_snapshot": lambda *a, **k: [s for m in _models.values() for s in m.snapshot()],
        "set_per_process_memory_fraction": set_fraction,
        "caching_allocator_alloc": caching_allocator_alloc,
        "caching_allocator_delete": caching_allocator_delete,
    }


def _torch_memory_summary() -> Callable[..., str]:
    """torch's own memory_summary: it formats torch.cuda.memory.memory_stats, which the runtime
    points at the model."""
    import torch.cuda.memory as tcm

    original = getattr(tcm, "_phantora_original_summary", None) or tcm.memory_summary
    tcm._phantora_original_summary = original
    return original
