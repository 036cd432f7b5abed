"""torch.profiler inside the user's script, answered with the simulated profile.

Running the real profiler on fake CUDA tensors records nothing useful (no CUPTI), floods the
log with "Failed to record CUDA event" and runs ~60x slower. Instead:
- `torch.profiler.profile` keeps torch's own state machine (schedule, warm-up, active
  windows, `ProfilerStep#N` ranges, on_trace_ready, tensorboard_trace_handler file names);
  only the hooks that talk to Kineto are replaced: a window is a span of simulated host
  time, and exporting it asks the coordinator to write the trace of that window;
- `record_function` (and therefore the optimizers' `Optimizer.step#AdamW.step` ranges)
  becomes a user annotation on the host and, mirrored, on the GPU;
- `key_averages()` / `events()` build torch's own FunctionEvent/EventList from the simulated
  window, so `.table()` prints simulated CPU and CUDA times.
"""
from __future__ import annotations

import inspect
import logging
import os
import warnings
from typing import Any

import torch
import torch.autograd.profiler as autograd_profiler
import torch.profiler as torch_profiler
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent

from phantora_prof.protocol import MemoryEvent, ProfileExportRequest, ProfileStatsRequest, ProfilerStarted
from phantora_prof.runtime.dispatch import annotations
from phantora_prof.runtime.patches import sharding_memo
from phantora_prof.runtime.process import state as _state

log = logging.getLogger(__name__)

_RealRecordFunction = autograd_profiler.record_function


class SimRecordFunction(_RealRecordFunction):
    """record_function as a simulated annotation (context manager and decorator, like torch's)."""

    def __enter__(self):
        self._sim_range = annotations.range_start(self.name)
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        annotations.range_end(self._sim_range)  # its own range, not the innermost (torch ends by handle)

    def _call_end_callbacks_on_future(self, fut):
        return fut


class _SimSession:
    """What Kineto would hold for one profiling cycle: the recorded window."""

    def __init__(self, owner: "SimProfile") -> None:
        self.owner = owner
        self.start_ns: int | None = None
        self.end_ns: int | None = None
        self.trace_id = None
        self._events: EventList | None = None

    def window(self) -> tuple[int, int]:
        st = _state.get()
        start = self.start_ns if self.start_ns is not None else st.clock.now_ns
        end = self.end_ns if self.end_ns is not None else st.clock.now_ns
        return start, end


class SimProfile(torch_profiler.profile):
    """torch.profiler.profile over the simulated timeline (see the module docstring)."""

    def prepare_trace(self) -> None:
        if self.profiler is None or self.profiler.end_ns is not None:
            self.profiler = _SimSession(self)
            st = _state.get()
            st.channel.send(ProfilerStarted(st.config.rank, st.clock.now_ns))
            sharding_memo.records_wanted()  # ops are recorded from now on: none answered from a memo
        if self.profile_memory:
            _memory_events(True)

    def start_trace(self) -> None:
        if self.profiler is None:
            self.prepare_trace()
        self.profiler.start_ns = _state.get().clock.now_ns

    def stop_trace(self) -> None:
        if self.profiler is not None and self.profiler.start_ns is not None:
            annotations.flush_open()
            self.profiler.end_ns = _state.get().clock.now_ns
        if self.profile_memory:
            _memory_events(False)

    def export_chrome_trace(self, path: str, use_python_export: bool = False) -> str:
        if self.profiler is None:
            raise RuntimeError("the profiler has not recorded a trace yet")
        st = _state.get()
        start, end = self.profiler.window()
        st.channel.flush()
        return st.channel.request(ProfileExportRequest(
            st.config.rank, start, end, os.path.abspath(path), record_shapes=bool(self.record_shapes),
            profile_memory=bool(self.profile_memory)))

    def events(self) -> EventList:
        if self.profiler is None:
            raise RuntimeError("the profiler has not recorded anything yet")
        if self.profiler._events is None:
            self.profiler._events = _event_list(*self.profiler.window(), self.profile_memory, self.with_flops)
        return self.profiler._events

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                     group_by_overload_name: bool = False):
        events = self.events()
        if "group_by_overload_name" in inspect.signature(events.key_averages).parameters:
            return events.key_averages(group_by_input_shape, group_by_stack_n, group_by_overload_name)
        return events.key_averages(group_by_input_shape, group_by_stack_n)  # torch < 2.6

    def export_stacks(self, path: str, metric: str = "self_cpu_time_total") -> None:
        warnings.warn("phantora-prof: export_stacks is not simulated (no Python stacks are recorded)", stacklevel=2)

    def export_memory_timeline(self, path: str, device: str | None = None) -> None:
        warnings.warn("phantora-prof: export_memory_timeline is not simulated yet", stacklevel=2)

    def _get_distributed_info(self):
        return None


def _memory_events(enabled: bool) -> None:
    """Send every simulated allocation and free to the coordinator while a profile_memory
    window may be recording (the `[memory]` instant events of the trace)."""
    from phantora_prof.runtime.device import memory_counters

    if not enabled:
        memory_counters.listener = None
        return
    st = _state.get()

    def on_event(device: int, addr: int, delta: int, allocated: int, reserved: int) -> None:
        st.channel.send(MemoryEvent(st.config.rank, st.tid(), st.clock.now_ns, device, addr, delta,
                                    allocated, reserved))

    memory_counters.listener = on_event


def _event_list(start_ns: int, end_ns: int, profile_memory: bool, with_flops: bool) -> EventList:
    st = _state.get()
    st.channel.flush()
    ops = st.channel.request(ProfileStatsRequest(st.config.rank, start_ns, end_ns))
    events = []
    device_events = []
    next_id = len(ops)
    for i, (name, tid, s, e, dims, is_annotation, kernels) in enumerate(ops):
        if tid is None:  # a GPU activity no host op launched (a CUDA graph's node): the device-side event only
            for kname, device, dur_ns, k_start, stream in kernels:
                device_events.append(FunctionEvent(
                    id=next_id, name=kname, thread=stream, start_us=k_start / 1e3,
                    end_us=(k_start + dur_ns) / 1e3, input_shapes=[], stack=[], use_device="cuda",
                    device_type=DeviceType.CUDA, device_index=device))
                next_id += 1
            continue
        fe = FunctionEvent(id=i, name=name, thread=tid, start_us=s / 1e3, end_us=e / 1e3,
                           input_shapes=[list(d) for d in dims], stack=[], use_device="cuda",
                           is_user_annotation=is_annotation)
        for kname, device, dur_ns, k_start, stream in kernels:
            fe.append_kernel(kname, device, dur_ns / 1e3)
            # Kineto results also list each GPU activity as its own device-side event.
            device_events.append(FunctionEvent(
                id=next_id, name=kname, thread=stream, start_us=k_start / 1e3, end_us=(k_start + dur_ns) / 1e3,
                input_shapes=[], stack=[], use_device="cuda", device_type=DeviceType.CUDA, device_index=device,
                is_user_annotation=is_annotation))
            next_id += 1
        events.append(fe)
    events.extend(device_events)
    result = EventList(events, use_device="cuda", profile_memory=profile_memory, with_flops=with_flops)
    result._build_tree()
    return result


def install() -> None:
    autograd_profiler.record_function = SimRecordFunction
    torch_profiler.record_function = SimRecordFunction
    torch_profiler.profile = SimProfile
    torch.profiler.profiler.profile = SimProfile
    # torch.profiler.profiler.record_function is looked up as prof.record_function at call time
