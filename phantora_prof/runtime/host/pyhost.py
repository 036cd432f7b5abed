"""Python's own work on the simulated host: counted calls turned into host time (issue #15).

The interpreter work of a training loop between captured ops (the script's code, framework
layers such as DTensor's dispatch or FSDP2's hooks, DDP's Python, optimizer loops, trainer
callbacks, DataLoader collate) is real host time on a GPU machine. It is measured here by
counting, per thread, the Python-level calls and the bytecode instructions the program
executes (native/pyhost/pyhost.c, a C trace hook that leaves the simulator's own frames out)
and charged as `py_call_ns * calls + opcode_ns * instructions` of the host profile
(cost/hostprofile.py), each instruction weighted by its file's cost (host_model.json
python_files: a framework's Python costs ~4x a user's loop per instruction), whenever the
simulated clock is read (an op is captured, the script reads the time, a sync). Counts do not
depend on the simulating machine, so runs stay reproducible.

The extension is compiled with the C compiler on first use (cached next to the fake-CUDA
library). Without a compiler, Python work is not charged and a warning says so.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
import types
from pathlib import Path
from typing import Any, Callable, Iterator

from phantora_prof import c_extensions

log = logging.getLogger(__name__)

MODULE = "phantora_pyhost"
WEIGHT_ONE = 1024  # native/pyhost/pyhost.c: the weight of one instruction at the profile's own rate
PACKAGE_DIR = Path(__file__).resolve().parents[2]  # phantora_prof/
# files of the package whose frames count as the program's: the bootstrap runs the script;
# signal_view stands for the stdlib's signal.signal / getsignal
PROGRAM_FILES = frozenset(str(PACKAGE_DIR / "runtime" / "process" / name) for name in ("bootstrap.py", "signal_view.py"))
_SOURCE_REL = Path("native") / "pyhost" / "pyhost.c"
# Diagnostics: a folder where each rank writes what Python it was charged for, per function
# (pyhost-rank<N>.json: [[file, first line, qualname, calls, opcodes], ...]). Slower.
ENV_PROFILE = "PHANTORA_PYHOST_PROFILE"


def build() -> Path | None:
    """The compiled extension for this Python (built once per source and interpreter)."""
    return c_extensions.build(_SOURCE_REL, MODULE)


def load() -> Any | None:
    return c_extensions.load(_SOURCE_REL, MODULE)


class PythonHostTime:
    """Turns each thread's counted calls into simulated host time, charged on demand."""

    def __init__(self, native: Any, py_call_ns: float, opcode_ns: float):
        self.native = native
        self.py_call_ns = py_call_ns
        # a user's Python; a framework's costs its file's weight times this (the native hook
        # sums the weights: `take`'s third count). Python inside a tensor subclass's dispatch
        # (DTensor's sharding propagation) is priced by its files too; until 2026-12-06 it had a
        # rate of its own (host_model.json subclass_dispatch).
        self.opcode_ns = opcode_ns
        self.charged_ns = 0  # total charged, for the summary
        # Threads whose work is on the simulated host's timeline: the script's thread and the
        # threads the capture mode has seen run ops (autograd's). Others (DataLoader's pinning
        # thread, a user's background thread) run in parallel: their Python is not charged.
        self.timeline: set[int] = {threading.get_ident()}

    def on_timeline(self) -> None:
        """The calling thread runs captured ops: its Python counts from now on."""
        ident = threading.get_ident()
        if ident not in self.timeline:
            self.timeline.add(ident)
            self.attach()

    def attach(self) -> None:
        """Count on the calling thread (threads the simulator sees are attached on first use)."""
        self.native.attach()
        self.native.take()  # what ran before is not charged

    def pending_ns(self) -> int:
        """Host time of the calling thread's Python work since the last charge (and mark it charged).

        The mark lives in the native module (`take`), so that the clock read the op recorder
        makes at every record's start and end skips this call in C when nothing is pending."""
        native = self.native
        delta = native.pending()  # one C call on the hot path (a thread counts only once attached,
        if not delta:             # and only timeline threads are)
            if delta is None and threading.get_ident() in self.timeline:
                native.attach()  # a timeline thread not counting yet (a new thread with a reused ident)
                native.take()
            return 0
        dpy, _, dw = delta  # calls, instructions, instructions weighted by their files' rates
        # rounded, not truncated: the clock is read at every record's start and end, and
        # truncating each charge lost ~0.4 us per step of a small DDP model. (Carrying the
        # remainder instead made ranks that ran different Python before the same code charge
        # it differently by 1 ns.)
        ns = int(dpy * self.py_call_ns + dw / WEIGHT_ONE * self.opcode_ns + 0.5)
        self.charged_ns += ns
        return ns

    def after_fork(self) -> None:
        """In a forked child (DataLoader worker): its own count starts at zero."""
        self.native.reset()
        self.timeline = {threading.get_ident()}
        self.attach()


def own_generated_code(package: str = "phantora_prof") -> int:
    """Give the methods that `dataclasses` generates for the simulator's own classes (their
    `__init__`, `__repr__`, ...: compiled from a string, so their file is "<string>") the file
    of the module that defines the class. The host model's hook tells the program's Python from
    the simulator's by file (native/pyhost/pyhost.c): a message the simulator built outside a
    paused section (an OpCall for a copy the program started) had its constructor counted as the
    program's Python, and one more field in a message moved the program's simulated time.
    Classes of modules loaded later keep "<string>" (none of them builds messages in the
    program's thread today). Returns how many methods were relabelled."""
    import dataclasses
    import sys

    done = 0
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == package or name.startswith(package + ".")) or not getattr(mod, "__file__", None):
            continue
        for obj in list(vars(mod).values()):
            if not (isinstance(obj, type) and obj.__module__ == name and dataclasses.is_dataclass(obj)):
                continue
            for fn in vars(obj).values():
                code = getattr(fn, "__code__", None)
                if code is not None and code.co_filename.startswith("<"):
                    fn.__code__ = code.replace(co_filename=mod.__file__)
                    done += 1
    return done


@contextlib.contextmanager
def simulator_work(host: PythonHostTime | None) -> Iterator[None]:
    """The Python run inside is the simulator's, not the program's: not counted (no-op
    without the host model). Pauses nest; the outermost resume restores counting."""
    if host is None:
        yield
        return
    host.native.pause()
    try:
        yield
    finally:
        host.native.resume()


def run_as_program(host: PythonHostTime | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)`, its Python counted as the program's although a wrapper of the
    simulator's calls it (a DataLoader worker's fetch, a torch function the simulator
    memoises), as if the call had not passed through the wrapper (plain call without the host
    model). A plain function, not a context manager: contextlib's own Python would count."""
    if host is None:
        return fn(*args, **kwargs)
    depth = host.native.user_begin()
    try:
        return fn(*args, **kwargs)
    finally:
        host.native.user_end(depth)


def install(py_call_ns: float, opcode_ns: float, file_weights: dict[str, float] | None = None) -> PythonHostTime | None:
    """Count the program's Python from now on. `file_weights`: per file below site-packages (or
    top-level package, "torch/"), its cost per instruction over `opcode_ns`."""
    native = load()
    if native is None:
        log.warning("no C compiler found: Python code between ops costs no simulated time in this run "
                    "(install gcc or clang to have it counted)")
        return None
    native.configure(str(PACKAGE_DIR) + os.sep, sorted(PROGRAM_FILES))
    for code in _mode_only_code() + _blocking_wait_code():
        native.mark_ours(code)
    _replace_rule_lookup(native)
    if getattr(native, "WEIGHT_ONE", None) != WEIGHT_ONE:
        raise RuntimeError(f"{MODULE}: its WEIGHT_ONE is {getattr(native, 'WEIGHT_ONE', None)}, this module's {WEIGHT_ONE}")
    native.set_rates({k: int(round(w * WEIGHT_ONE)) for k, w in file_weights.items()} if file_weights else None)
    host = PythonHostTime(native, py_call_ns, opcode_ns)
    profile_dir = os.environ.get(ENV_PROFILE)
    if profile_dir:
        _profile_by_code(native, Path(profile_dir))
    host.attach()
    os.register_at_fork(after_in_child=host.after_fork)
    gc.callbacks.append(_gc_pause(native))
    return host


def _blocking_wait_code() -> list[Any]:
    """threading's blocking waits (`Event.wait`, `Condition.wait`: Thread.start waiting for the
    thread to run, queues, DataLoader's workers). How much of their Python runs depends on
    whether the other thread got there first (an Event already set returns at once), so
    counting it made two runs differ (a DataLoader's start-up by ~0.7 us, under load); a
    blocked thread uses no CPU, and how long it waits is the simulation's to model."""
    import threading

    return [threading.Event.wait.__code__, threading.Condition.wait.__code__]


def _mode_only_code() -> list[Any]:
    """Code of torch's that runs only because the simulator's dispatch mode is on: the C++
    dispatcher asks `find_torch_dispatch_rule(op, type(mode))` before every call into a Python
    mode. A real CUDA run has no mode. (A tensor subclass's dispatch asks it too; those ~36
    instructions are left in the subclass-dispatch constant, cost/data/host_model.json.)"""
    try:
        from torch._library import simple_registry
    except ImportError:  # torch < 2.4
        return []
    fn = getattr(simple_registry, "find_torch_dispatch_rule", None)
    return [fn.__code__] if fn is not None and hasattr(fn, "__code__") else []


def _replace_rule_lookup(native: Any) -> None:
    """torch's C++ calls `find_torch_dispatch_rule(op, mode_class)` before every call into a
    Python mode (~6,000 times per GPT-2 step, prim::device queries included), with the hook on:
    three frames of torch's registry Python, which then ran on CPython's slow tracing path
    (not counted: _mode_only_code). Replaced by the extension's `rule_lookup` (C, no frame):
    it reads the live dict of rules torch's registry keeps per op (class -> rule, remembered
    per op), so rules registered later are seen; where this torch's registry is not shaped
    as expected, the function runs paused instead (`paused_call`). torch keeps the function
    it finds at its first mode dispatch, so this runs before any (issue #18)."""
    if not hasattr(native, "paused_call"):
        return
    try:
        from torch._library import simple_registry
    except ImportError:  # torch < 2.4
        return
    fn = getattr(simple_registry, "find_torch_dispatch_rule", None)
    if not isinstance(fn, types.FunctionType):
        return
    rules_of = _rules_of(simple_registry)
    if rules_of is not None and hasattr(native, "rule_lookup"):
        simple_registry.find_torch_dispatch_rule = types.MethodType(native.rule_lookup, (rules_of, {}, fn))
    else:
        simple_registry.find_torch_dispatch_rule = types.MethodType(native.paused_call, fn)


def _rules_of(simple_registry: Any) -> Callable[[Any], dict] | None:
    """`op -> the registry's own dict of its torch-dispatch rules` when this torch's registry
    is the one known (singleton.find(qualname).torch_dispatch_rules._data, looked up by the
    mode's exact class, as find_torch_dispatch_rule does); None otherwise."""
    import torch

    singleton = getattr(simple_registry, "singleton", None)
    op = torch.ops.aten.add.Tensor

    class Probe:
        pass

    try:
        holder = singleton.find(op.__qualname__).torch_dispatch_rules
        holder._data[Probe] = rule = object()
        try:
            ok = simple_registry.find_torch_dispatch_rule(op, Probe) is rule
        finally:
            del holder._data[Probe]
    except Exception:  # noqa: BLE001 - another shape of registry: leave it as it is
        return None
    if not ok:
        return None

    def rules_of(op: Any) -> dict:
        return singleton.find(op.__qualname__).torch_dispatch_rules._data

    return rules_of


def _profile_by_code(native: Any, folder: Path) -> None:
    """Count per code object and write the counts when the process exits (ENV_PROFILE)."""
    import atexit
    import json

    native.by_code(True)
    rank = os.environ.get("RANK", "0")

    def write() -> None:
        rows = sorted(native.code_counts(), key=lambda r: (-r[4], r[0], r[1]))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"pyhost-rank{rank}.json").write_text(json.dumps(rows, indent=0))

    atexit.register(write)


def _gc_pause(native: Any):
    """Python's cyclic collector runs when allocation counts cross thresholds, which other
    threads (the simulator's own) move: where it runs, and the finalizers it calls, differ from
    run to run. Its work is not counted, so the counts, and the traces, stay reproducible."""
    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            native.pause()
        else:
            native.resume()

    return on_gc
