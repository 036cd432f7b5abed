"""The dispatcher's op stream, recorded natively (native/op_recorder.cpp) in simulated time.

torch.profiler writes one `cpu_op` per at::RecordFunction: composite ops around their
children (aten::linear > aten::t, aten::addmm), ops on CPU tensors, autograd nodes. The
capture mode sees only the ops that reach the Python dispatch key; the native library's
global RecordFunction callback sees the rest, and stamps each call with the simulated host
clock, which the clock mirrors into the library on every change (`VirtualClock.mirror`).

The capture mode talks to the recorder through per-thread flags (`RecTls`, shared memory)
and `quiet`: `quiet(1)` hides what the mode itself dispatches while it fakes an op
(FakeTensorMode's own calls are not the CUDA kernel's; RecordFunction is switched off for the
thread meanwhile, so they cost nothing), `skip_next` hides the mode's
re-dispatch of a CPU op (it would record the op twice), and `open_id`/`open_name` name the
innermost recorded call, i.e. the op the mode is handling: its record id becomes the
captured op's External id, so the coordinator keeps one span for it (the OpCall) and nests
the recorded parents around it.

Finished records are drained as one JSON array (`drain`) whenever the channel sends a batch
and travel to the coordinator as `HostOps` messages. Only CPU builds of torch load the
library; elsewhere `get()` is None and nothing is recorded.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading

log = logging.getLogger(__name__)

ENV_DISABLE = "PHANTORA_NO_OP_TREE"  # "1": do not record (the trace has captured ops only)


class RecTls(ctypes.Structure):
    """struct RecTls in native/op_recorder.cpp (keep in sync)."""

    _fields_ = [("suppress", ctypes.c_int32), ("skip_next", ctypes.c_int32), ("open_id", ctypes.c_int64),
                ("open_name", ctypes.c_void_p), ("depth", ctypes.c_int32), ("is_main", ctypes.c_int32),
                ("outer_id", ctypes.c_int64), ("outer_name", ctypes.c_void_p), ("subclass_open", ctypes.c_int32)]


class Recorder:
    def __init__(self, lib: ctypes.CDLL, with_inputs: bool = True):
        self.lib = lib
        lib.phantora_rec_enable.argtypes = [ctypes.c_int]
        lib.phantora_rec_enable.restype = ctypes.c_int
        lib.phantora_rec_tls.restype = ctypes.c_void_p
        lib.phantora_rec_next_id.restype = ctypes.c_int64
        lib.phantora_rec_pending.restype = ctypes.c_int64
        lib.phantora_rec_drain.restype = ctypes.c_int64
        lib.phantora_rec_drain.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
        lib.phantora_rec_quiet.argtypes = [ctypes.c_int]
        lib.phantora_rec_quiet.restype = ctypes.c_int
        self.quiet = lib.phantora_rec_quiet  # quiet(1): hide this thread's calls; returns the previous state
        lib.phantora_rec_open_subclass.restype = ctypes.c_int64
        # open_subclass(): a "PythonSubclass" record inside the op being dispatched (a tensor
        # subclass's own dispatch, as torch.profiler shows it on a GPU); it ends with that op
        self.open_subclass = lib.phantora_rec_open_subclass
        self.now = ctypes.c_int64.in_dll(lib, "phantora_sim_now_ns")
        self._next_id = lib.phantora_rec_next_id
        self._local = threading.local()
        self._names: dict[int, str] = {}
        self._lock = threading.Lock()
        self.with_inputs = with_inputs
        self.enabled = False

    def enable(self) -> None:
        self.lib.phantora_rec_set_main()
        self.lib.phantora_rec_enable(1 if self.with_inputs else 0)
        self.enabled = True

    def disable(self) -> None:
        self.lib.phantora_rec_disable()
        self.enabled = False

    def tls(self) -> RecTls:
        """The calling thread's flags (cached per thread)."""
        t = getattr(self._local, "t", None)
        if t is None:
            t = self._local.t = RecTls.from_address(self.lib.phantora_rec_tls())
        return t

    def name(self, ptr: int | None) -> str | None:
        """The op name behind a `const char*` the recorder reports (interned, stable)."""
        if not ptr:
            return None
        n = self._names.get(ptr)
        if n is None:
            n = self._names[ptr] = ctypes.string_at(ptr).decode("utf-8", "replace")
        return n

    def set_charge(self, address: int) -> None:
        """Call the C function at `address` before every record is stamped (start and end):
        pyhost's trampoline to the clock read that charges the thread's pending Python
        (runtime/host/pyhost.py), so that host work lies between records, as in a real
        profile, and not inside the record that follows it."""
        self.lib.phantora_rec_set_charge.argtypes = [ctypes.c_void_p]
        self.lib.phantora_rec_set_charge(ctypes.c_void_p(address))

    def next_id(self) -> int:
        return self._next_id()

    def drain(self) -> bytes | None:
        """Finished records (a JSON array), or None when there are none."""
        with self._lock:
            ptr = ctypes.c_char_p()
            n = self.lib.phantora_rec_drain(ctypes.byref(ptr))
            if n <= 2:
                return None
            return ctypes.string_at(ptr, n)


_recorder: Recorder | None = None


def install() -> Recorder | None:
    """Attach to the loaded fake-CUDA library and start recording (CPU builds of torch only)."""
    global _recorder
    if _recorder is not None:
        return _recorder
    if os.environ.get(ENV_DISABLE, "") not in ("", "0"):
        return None
    from phantora_prof.runtime.process import native_loader

    lib = native_loader.loaded_library()
    if lib is None or not hasattr(lib, "phantora_rec_enable"):
        return None
    _recorder = Recorder(lib)
    return _recorder


def get() -> Recorder | None:
    return _recorder
