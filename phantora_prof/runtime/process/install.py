"""Install the interception runtime into this (rank) process; torch must be importable."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import logging
import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from phantora_prof import cost
from phantora_prof.cost.model import CostModel
from phantora_prof.errors import ConfigError
from phantora_prof.protocol import Goodbye, Hello
from phantora_prof.runtime.process import clock as _clock
from phantora_prof.runtime.device import cuda_api
from phantora_prof.runtime.dispatch import sdpa
from phantora_prof.runtime.patches import fake_identity, modules, mp_spawn, profiler
from phantora_prof.runtime.process import state as _state
from phantora_prof.runtime.process.channel import connect_from_env
from phantora_prof.runtime.process.state import RankConfig, RuntimeState

log = logging.getLogger(__name__)


@dataclass
class InstalledRuntime:
    state: RuntimeState
    mode: Any

    def _summary(self) -> dict:
        st = self.state
        from phantora_prof.runtime.device import allocator

        models = [allocator.model(d) for d in range(st.config.device_count)]
        return {"ops": st.ops_captured, "syncs": st.syncs, "placeholders": st.placeholders_used,
                "compile_ns": st.compile_ns,
                "peak_allocated": max(m.run_peak_allocated for m in models),
                "peak_reserved": max(m.run_peak_reserved for m in models),
                "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}

    def abort(self, signum: int) -> None:
        """The rank is being stopped by a signal (the CLI was interrupted): send the coordinator
        what was captured so far, without touching the capture mode (the signal may have come
        in the middle of an op). Called from the signal handler."""
        from phantora_prof.runtime.device import memory_counters

        st = self.state
        try:
            last = memory_counters.final_message(st.config.rank, blocking=False)
            st.channel.close_from_signal_handler(Goodbye(st.config.rank, st.clock.now_ns, 128 + signum,
                                                         self._summary()), before=[last] if last else [])
        except Exception:  # noqa: BLE001 - the process ends anyway
            pass

    def finish(self, exit_code: int) -> None:
        st = self.state
        try:
            self.mode.flush()
        except Exception:  # noqa: BLE001 - never lose the trace because of the flush
            log.exception("flushing the capture mode failed")
        summary = self._summary()
        try:
            st.cost_model.close()  # a measuring source merges what it measured into the database file
        except Exception:  # noqa: BLE001 - the run's own outcome comes first
            log.exception("saving the kernel database failed")
        from phantora_prof.runtime.device import memory_counters

        last = memory_counters.final_message(st.config.rank)
        if last is not None:
            st.channel.send(last)
        st.channel.close(Goodbye(st.config.rank, st.clock.now_ns, exit_code, summary))


def _cost_model(config: RankConfig, gpu) -> CostModel:
    """The rank's kernel-time model: the GPU, --op-cost, and with --kernel-db / --kernel-times
    measure a kernel database consulted before the built-in sources."""
    from pathlib import Path

    from phantora_prof.cost.kernel_db import KernelDB
    from phantora_prof.measure.source import DatabaseSource, MeasuringSource

    source = None
    if config.kernel_times == "measure":
        source = MeasuringSource(Path(config.kernel_db))
    elif config.kernel_db:
        source = DatabaseSource(KernelDB.load(config.kernel_db), Path(config.kernel_db))
    return CostModel(gpu, source=source, op_costs=config.op_costs)


def _install_host_python(st: RuntimeState, clock: _clock.VirtualClock) -> None:
    """The interpreter's work and DataLoader workers in simulated time (runtime/host/pyhost.py, dataloader.py)."""
    from phantora_prof import hostcost
    from phantora_prof.runtime.host import autograd_engine, dataloader, pyhost

    if st.config.host_python:
        host = pyhost.install(hostcost.PY_CALL_NS, hostcost.OPCODE_NS, hostcost.PYTHON_FILE_WEIGHTS)
        if host is not None:
            pyhost.own_generated_code()  # the simulator's dataclass methods are not the program's Python
            clock.set_pending(host.pending_ns)
            st.pyhost = host
            from phantora_prof.runtime.device import allocator

            allocator.set_simulator_section(host.native.pause, host.native.resume)
    dataloader.install(clock, st.pyhost)
    autograd_engine.install(clock)


def check_real_cuda(device_count: int, cuda_version: str | None, real_gpus: int, torch_version: str) -> None:
    """A CUDA build of torch simulates only as many GPUs per node as the machine has.

    The fake-CUDA library (native/) is loaded only into CPU builds of torch; in a CUDA build
    the real CUDA device guard handles `cuda:N`, and an N the machine lacks fails at the first
    op with "CUDA error: invalid device ordinal". Say so at start-up, with the ways out.
    """
    if cuda_version is None or device_count <= real_gpus:
        return
    raise ConfigError(
        f"this torch ({torch_version}) is a CUDA build and sees {real_gpus} GPU(s), but the simulation has "
        f"{device_count} GPU(s) per node: a CUDA build can only simulate as many GPUs per node as it sees. "
        f"Use --nproc-per-node {max(real_gpus, 1)} or fewer, or run phantora-prof from an environment with the "
        f"CPU build of torch (pip install torch --index-url https://download.pytorch.org/whl/cpu), which "
        f"simulates any number.")


def preload() -> None:
    """Import now what install() would import when it runs: the fork server calls this before
    it forks any rank (runtime/process/fork_server.py), so that every rank shares these modules'
    pages instead of importing its own copy: 562 modules with torch 2.13 (symbolic shapes with
    sympy and mpmath, DTensor, torch.utils.cpp_extension with setuptools, the simulator's own
    runtime), imported once per run instead of once per rank.

    Nothing rank-specific happens here (no state, clock, connection or patch: those are
    install()'s), and install() runs unchanged in each rank, finding its modules loaded. The
    list is read from this file's own function bodies (`_deferred_imports`), so it cannot drift
    from what install() imports."""
    from phantora_prof.runtime.process import lazy_dynamo

    lazy_dynamo.defer()  # first, as install() does: nothing below may load all of Dynamo
    for name in _deferred_imports():
        importlib.import_module(name)


def _deferred_imports() -> list[str]:
    """Modules imported inside this file's functions (`from X import Y` where X.Y may be a module,
    `import X`), in source order."""
    names: list[str] = []
    tree = ast.parse(Path(__file__).read_text())
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name == "preload":
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                names.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.append(node.module)
                pkg = importlib.import_module(node.module)
                if hasattr(pkg, "__path__"):  # a package: its imported names may be submodules
                    names.extend(f"{node.module}.{a.name}" for a in node.names
                                 if f"{node.module}.{a.name}" in sys.modules
                                 or importlib.util.find_spec(f"{node.module}.{a.name}") is not None)
    return list(dict.fromkeys(names))


def install(config: RankConfig) -> InstalledRuntime:
    from phantora_prof.runtime.process import lazy_dynamo

    lazy_dynamo.defer()  # FakeTensorMode needs only Dynamo's config; the rest loads when the program uses it
    from phantora_prof.runtime.process import interrupts

    interrupts.install(config.rank)  # Ctrl-C's SIGINT noted for the coordinator (before any Python is counted)
    real_gpus = torch._C._cuda_getDeviceCount() if torch.version.cuda and hasattr(torch._C, "_cuda_getDeviceCount") else 0
    check_real_cuda(config.device_count, torch.version.cuda, real_gpus, torch.__version__)
    clock = _clock.VirtualClock(epoch_ns=int(os.environ.get("PHANTORA_EPOCH_NS", "0")) or None)
    channel = connect_from_env()
    gpu = cost.get_gpu(config.gpu)
    st = RuntimeState(config=config, clock=clock, channel=channel, gpu=gpu, cost_model=_cost_model(config, gpu))
    st.cost_model.load_tables()  # before the start-up objects are frozen (bootstrap.py)
    from phantora_prof.cost.profiles import profile_for
    from phantora_prof.runtime.device.launch_queue import LaunchQueue

    st.launch_queue = LaunchQueue(profile_for(gpu).launch_queue_depth, clock)
    st.current_device = config.local_rank % config.device_count
    _state.set_state(st)
    channel.send(Hello(config.rank, config.world_size, os.getpid()))
    _clock.install(clock)
    _install_host_python(st, clock)
    from phantora_prof.runtime.host import pyhost

    # The rest is the simulator's work, but install() began before the host model's hook did, so
    # the hook never saw it start: the Python its imports ran outside frozen importlib (setuptools'
    # _distutils_hack finder) and TorchDispatchMode.__enter__ were counted as the program's.
    with pyhost.simulator_work(st.pyhost):
        mode = _patch_torch_and_enter_the_mode(st)
    return InstalledRuntime(st, mode)


def _patch_torch_and_enter_the_mode(st: RuntimeState) -> Any:
    """Everything after the clock and the host model: torch's CUDA surface, the patches, the
    capture mode (entered, and left on the mode stack for the whole program)."""
    cuda_api.install()
    from phantora_prof.runtime.device import legacy_types

    legacy_types.install()  # torch.cuda.FloatTensor(3, 4) and the other legacy constructors
    from phantora_prof.runtime.device import memory_counters

    memory_counters.install()  # GPU memory over the run: run.pftrace counters, the report's memory.png
    from phantora_prof.runtime.device import cuda_graphs

    cuda_graphs.install()  # torch.cuda.CUDAGraph: capture and replay
    from phantora_prof.runtime.device import pointers

    pointers.install()  # data_ptr() of simulated CUDA tensors: distinct per storage
    from phantora_prof.runtime.device import comm

    comm.install()  # torch._C._scatter / _gather / _broadcast*: DataParallel, torch.cuda.comm
    modules.install()
    mp_spawn.install()  # torch.multiprocessing.spawn: each simulated rank runs fn(rank, ...)
    from phantora_prof.runtime.host import optim_host

    optim_host.install()  # measured per-parameter host work of optimizer steps and zero_grad
    sdpa.install()
    profiler.install()
    from phantora_prof.runtime.process import extensions

    extensions.install()  # CUDA extension builds stop with a clear error
    from phantora_prof.runtime.patches import serialization

    serialization.install()  # torch.save / torch.load of simulated CUDA tensors
    from phantora_prof.runtime.dispatch import values

    values.install()  # storage clones (copy.deepcopy) keep small tensors' values
    fake_identity.install()  # libraries asking "is this a FakeTensor (am I traced)?" get a CUDA run's answer
    torch._C._set_only_lift_cpu_tensors(True)
    from phantora_prof.runtime.dispatch import cuda_dispatch

    cuda_dispatch.install()  # ops a CUDA build runs as one kernel stop decomposing on this CPU build
    from phantora_prof.runtime.dispatch import autocast_rnn

    autocast_rnn.install()  # cuDNN RNNs under autocast: fp16 weights reflattened, as a CUDA build does
    from phantora_prof.runtime.dispatch import ctc_loss

    ctc_loss.install()  # CTC with CPU length tensors: ATen's plain-tensor path, not the subclass one
    from phantora_prof.runtime.device import cuda_fakes

    cuda_fakes.install()  # shapes of CUDA-only ops torch has no Meta kernel for (cuDNN RNNs)
    from phantora_prof.runtime.dispatch.capture import CaptureMode

    from phantora_prof.runtime import distributed

    distributed.install()
    from phantora_prof.runtime.patches import sharding_memo

    sharding_memo.install()  # DTensor's strided-shard arithmetic once per argument set (no trace)
    from phantora_prof.runtime.patches import nested_ints

    nested_ints.install()  # jagged nested tensors on the simulated GPU: plain nested ints, as for real tensors
    rec = _record_op_tree(st)
    mode = CaptureMode()
    from phantora_prof.runtime.compile import backend as compile_backend

    compile_backend.install(mode)  # torch.compile: Inductor's schedule replayed on the simulated GPU
    from phantora_prof.runtime.dispatch import backend_kernels

    backend_kernels.install(mode)
    from phantora_prof.runtime.patches import host_view

    own = mode.fake_mode  # print(loss), f"{loss:.4f}", t.numpy(): as for a CUDA tensor, not a FakeTensor
    host_view.install(lambda t: t.fake_mode is own and t.device.type == "cuda")
    from phantora_prof.runtime.dispatch import deferred_init

    deferred_init.install(mode.simulator_ops, st.pyhost)  # a model built on the CPU holds no host memory until read
    if rec is not None:
        rec.enable()
    mode.__enter__()  # stays on the mode stack for the whole program
    _threads_capture_too(mode)
    return mode


def _threads_capture_too(mode: Any) -> None:
    """Threads the program starts dispatch through the capture mode as well (torch's mode stack
    is per thread; autograd's workers inherit it, a `threading.Thread` does not, and a CUDA op
    there reached the CPU build's missing CUDA kernels). Their CUDA ops run one at a time with
    the other threads' (CaptureMode's lock) on the host timeline of autograd's thread:
    approximate, a real second thread runs its host work beside the main one. Their CPU-only
    ops (a DataLoader's pin-memory thread, the simulator's own threads) pass through as before."""
    import threading

    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        if threading.get_ident() == threading.main_thread().ident:
            return original(self)
        mode.adopt_thread()  # its CPU-only ops stay as they were: untimed, unrecorded
        with mode:
            return original(self)

    threading.Thread.run = run


def _record_op_tree(st: RuntimeState) -> Any:
    """The native op recorder (CPU builds of torch): the dispatcher's whole op stream in
    simulated time, sent with every batch (runtime/dispatch/op_recorder.py). Enabled by the caller."""
    from phantora_prof.protocol import HostOps
    from phantora_prof.runtime.dispatch import op_recorder

    rec = op_recorder.install()
    if rec is None:
        return None
    st.clock.mirror(rec.now)
    st.use_id_source(rec.next_id)
    if st.pyhost is not None:
        rec.set_charge(st.pyhost.native.set_charge(st.clock.charge_pending))
    rank = st.config.rank

    def host_ops():
        data = rec.drain()
        return HostOps(rank, data) if data is not None else None

    st.channel.before_send = host_ops
    return rec
