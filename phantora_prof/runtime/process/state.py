"""Process-wide state of the rank runtime: config, clock, coordinator channel, streams."""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from phantora_prof.protocol import RankConfig  # noqa: F401 - the launcher's contract, used here
from phantora_prof.runtime.process.clock import VirtualClock

DEFAULT_STREAM_ID = 7  # what CUPTI reports for the legacy default stream (see the reference traces)
FIRST_USER_STREAM_ID = 13


@dataclass
class RuntimeState:
    config: RankConfig
    clock: VirtualClock
    channel: Any  # runtime.channel.Channel
    gpu: Any  # cost.gpus.GpuSpec
    main_thread: int = field(default_factory=threading.get_ident)
    current_device: int = 0
    current_stream: dict[int, int] = field(default_factory=dict)  # device -> stream id
    stream_ids: Any = field(default_factory=lambda: itertools.count(FIRST_USER_STREAM_ID))
    event_ids: Any = field(default_factory=lambda: itertools.count(1))
    external_ids: Any = field(default_factory=lambda: itertools.count(1))
    ops_captured: int = 0
    syncs: int = 0
    placeholders_used: int = 0
    compile_ns: int = 0  # host time charged for torch.compile's compilation (runtime/compile/backend.py)
    warned: set = field(default_factory=set)
    pyhost: Any = None  # runtime.pyhost.PythonHostTime when the interpreter's work is charged
    cost_model: Any = None  # cost.model.CostModel: the run's kernel-time model (runtime/process/install.py)
    self_profile: Any = None  # runtime.process.self_profile.SelfProfile under PHANTORA_CPROFILE
    launch_queue: Any = None  # runtime.device.launch_queue.LaunchQueue: the bounded launch queue

    def stream_of(self, device: int | None = None) -> int:
        d = self.current_device if device is None else device
        return self.current_stream.get(d, DEFAULT_STREAM_ID)

    def device_index(self, device: Any = None, check: bool = False) -> int:
        """The CUDA device index `device` names (None, an int, "cuda:1", a torch.device or
        anything with `.index`); no index means the current device. `check`: an index the
        simulated node does not have is CUDA's "invalid device ordinal" error."""
        if device is None:
            idx = None
        elif isinstance(device, int):
            idx = device
        elif isinstance(device, str):
            import torch

            idx = torch.device(device).index
        else:
            idx = getattr(device, "index", None)
        if idx is None or (idx < 0 and not check):
            idx = self.current_device
        if check and not 0 <= idx < self.config.device_count:
            from phantora_prof.runtime.device.allocator import invalid_device_ordinal

            raise invalid_device_ordinal(idx, self.config.device_count)
        return idx

    def tid(self) -> int:
        return 0 if threading.get_ident() == self.main_thread else 1

    def next_external_id(self) -> int:
        return next(self.external_ids)

    def use_id_source(self, next_id) -> None:
        """Take External ids from `next_id()` (the native op recorder's counter, which its
        records share)."""
        self.next_external_id = next_id  # type: ignore[method-assign]


_state: RuntimeState | None = None


def get() -> RuntimeState:
    if _state is None:
        raise RuntimeError("the phantora-prof runtime is not installed in this process")
    return _state


def set_state(state: RuntimeState) -> None:
    global _state
    _state = state


def installed() -> bool:
    return _state is not None
