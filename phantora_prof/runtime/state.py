"""Process-wide state of the rank runtime: config, clock, coordinator channel, streams."""
from __future__ import annotations

import itertools
import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from phantora_prof.errors import ConfigError
from phantora_prof.runtime.clock import VirtualClock

DEFAULT_STREAM_ID = 7  # what CUPTI reports for the legacy default stream (see the reference traces)
FIRST_USER_STREAM_ID = 13


@dataclass
class RankConfig:
    """What the launcher tells a rank process (JSON in PHANTORA_RANK_CONFIG)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device_count: int = 1
    gpu: str = "h200"
    kernel_times: str = "model"  # model: built-in data and models; measure: time new ops on this machine's GPU
    kernel_db: str | None = None  # a kernel database to read (and, when measuring, to fill)
    placeholder_float: float = 0.0
    placeholder_int: int = 1
    placeholder_bool: bool = True
    op_costs: dict = field(default_factory=dict)  # op name -> GPU time in ns (--op-cost)
    host_python: bool = True  # charge the interpreter's work between ops (runtime/pyhost.py)

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is outside world size {self.world_size}")
        if self.device_count < 1:
            raise ConfigError("device_count must be at least 1")
        if self.kernel_times not in ("model", "measure"):
            raise ConfigError(f"kernel_times must be 'model' or 'measure', not {self.kernel_times!r}")

    @classmethod
    def from_env(cls) -> "RankConfig":
        raw = os.environ.get("PHANTORA_RANK_CONFIG")
        if not raw:
            return cls()
        return cls(**json.loads(raw))

    def to_env(self) -> str:
        return json.dumps(self.__dict__)


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
    warned: set = field(default_factory=set)
    pyhost: Any = None  # runtime.pyhost.PythonHostTime when the interpreter's work is charged

    def stream_of(self, device: int | None = None) -> int:
        d = self.current_device if device is None else device
        return self.current_stream.get(d, DEFAULT_STREAM_ID)

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
