"""Memory snapshots of the simulated GPU: `torch.cuda.memory._record_memory_history()` and
`_dump_snapshot()` / `_snapshot()` / `memory_snapshot()`, in the format torch writes.

The pickled snapshot opens in https://pytorch.org/memory_viz (active memory timeline,
allocator state, segments) like one from a real GPU: `segments` (every segment of the
allocator model with its blocks, and the Python stack that allocated each block), and
`device_traces` (per device, the allocator's actions in order: `segment_alloc`, `alloc`,
`free_requested`, `free_completed`, `segment_free`, `oom`), each with its size, stream,
simulated time and stack. torch's C++ allocator records them in the same places
(CUDACachingAllocator.cpp's record_trace); here runtime/device/allocator.py calls `record`.

What differs from a real snapshot, on purpose:
- stacks are Python frames only (`stacks="all"` on a GPU adds C++ frames), innermost first,
  without the simulator's own frames and the dispatch-mode wrappers torch puts around it;
  an allocation on autograd's backward thread has no Python frames (as on a GPU, where only
  C++ frames would be there);
- `time_us` is the simulated wall clock;
- `compile_context` is "N/A" and `user_metadata` empty (as torch writes them when no compile
  context or metadata was set), `external_annotations` empty.
"""
from __future__ import annotations

import collections
import os
import sys
from typing import Any, Callable

from phantora_prof.runtime.device.allocator import AllocatorModel

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
# frames that exist only because the capture runs as a dispatch mode (not in a CUDA run)
_WRAPPER_SUFFIXES = (os.path.join("torch", "_compile.py"), os.path.join("torch", "_dynamo", "eval_frame.py"),
                     os.path.join("torch", "utils", "_python_dispatch.py"), "runpy.py", "<frozen runpy>")
_FRAMED_BY_CONTEXT = {"all": None, "alloc": {"alloc", "segment_alloc"}}  # None: every action
_ENABLED = (None, "state", "all")
_CONTEXTS = (None, "state", "alloc", "all")


class MemoryHistory:
    """What `_record_memory_history` asked for, and the trace it records."""

    def __init__(self, wall_us: Callable[[], int]) -> None:
        self.wall_us = wall_us
        self.enabled: str | None = None
        self.context: str | None = None
        self.max_entries = sys.maxsize
        self.traces: dict[int, collections.deque] = {}

    def configure(self, enabled: str | None, context: str | None, stacks: str, max_entries: int,
                  clear_history: bool, models: dict[int, AllocatorModel]) -> None:
        if enabled not in _ENABLED:
            raise ValueError(f"_record_memory_history: enabled={enabled!r}, expected one of {_ENABLED}")
        if context not in _CONTEXTS:
            raise ValueError(f"_record_memory_history: context={context!r}, expected one of {_CONTEXTS}")
        if stacks not in ("python", "all"):
            raise ValueError(f"_record_memory_history: stacks={stacks!r}, expected 'python' or 'all'")
        self.enabled, self.context = enabled, context if enabled is not None else None
        self.max_entries = max(1, int(max_entries))
        if clear_history:
            self.traces.clear()
        for device, trace in list(self.traces.items()):
            if trace.maxlen != self.max_entries:
                self.traces[device] = collections.deque(trace, maxlen=self.max_entries)
        for m in models.values():
            m.history = self if enabled is not None else None

    def record(self, device: int, action: str, addr: int, size: int, stream: int) -> list[dict] | None:
        """An allocator action; returns the stack recorded with it (for the block's frames)."""
        context = self.context
        framed = context is not None and context != "state" and (
            _FRAMED_BY_CONTEXT.get(context) is None or action in _FRAMED_BY_CONTEXT[context])
        frames = _python_frames() if framed or (context == "state" and action == "alloc") else None
        if self.enabled == "all":
            entry: dict[str, Any] = {"action": action, "device_free" if action == "oom" else "addr": addr,
                                     "size": size, "stream": stream, "time_us": self.wall_us(),
                                     "compile_context": "N/A", "user_metadata": ""}
            if framed and frames is not None:
                entry["frames"] = frames
            trace = self.traces.get(device)
            if trace is None:
                trace = self.traces[device] = collections.deque(maxlen=self.max_entries)
            trace.append(entry)
        return frames

    def snapshot(self, models: dict[int, AllocatorModel]) -> dict[str, Any]:
        segments = [s for d in sorted(models) for s in models[d].snapshot()]
        count = max(models) + 1 if models else 0
        settings = models[min(models)].config if models else None
        return {
            "segments": segments,
            "device_traces": [list(self.traces.get(d, ())) for d in range(count)],
            "allocator_settings": {
                "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                "max_split_size": getattr(settings, "max_split_size", -1),
                "garbage_collection_threshold": 0.0,
                "expandable_segments": False,
            },
            "external_annotations": [],
        }


def _python_frames() -> list[dict]:
    """The program's Python stack at this allocation, innermost first (torch's frame dicts)."""
    frames = []
    f = sys._getframe(2)
    while f is not None:
        code = f.f_code
        filename = code.co_filename
        if not filename.startswith(_PACKAGE_DIR) and not filename.endswith(_WRAPPER_SUFFIXES):
            frames.append({"filename": filename, "line": f.f_lineno, "name": code.co_name})
        f = f.f_back
    return frames


def install(history: MemoryHistory, models: dict[int, AllocatorModel]) -> None:
    """torch._C's memory-history entry points (both the current and the legacy signature) and
    its snapshot, which torch.cuda.memory's `_record_memory_history`, `_snapshot`,
    `_dump_snapshot` and `memory_snapshot` call."""
    import torch

    def record_memory_history(enabled: str | None = "all", context: str | None = "all", stacks: str = "all",
                              max_entries: int = sys.maxsize, clear_history: bool = False, *_: Any) -> None:
        history.configure(enabled, context, stacks, max_entries, clear_history, models)

    def record_memory_history_legacy(enabled: bool, record_context: bool = True, trace_alloc_max_entries: int = 1,
                                     trace_alloc_record_context: bool = False, record_context_cpp: bool = False,
                                     clear_history: bool = False, *_: Any) -> None:
        if not enabled:
            history.configure(None, None, "python", 1, clear_history, models)
            return
        context = "all" if trace_alloc_record_context else ("state" if record_context else None)
        history.configure("all" if trace_alloc_max_entries > 1 else "state", context, "python",
                          max(1, trace_alloc_max_entries), clear_history, models)

    torch._C._cuda_record_memory_history = record_memory_history
    torch._C._cuda_record_memory_history_legacy = record_memory_history_legacy
    torch._C._cuda_memorySnapshot = lambda *args, **kwargs: history.snapshot(models)
