"""`torch.cuda` answered from the simulated GPU.

On a CPU-only build `torch.cuda` would say there is no GPU, and `torch.autocast('cuda')`,
`GradScaler('cuda')` and DataLoader's pinning would quietly switch themselves off. Here every
query a training script or a framework makes is answered from the GPU spec of the cluster:
name, capability, properties, device count, memory, streams, events, RNG, synchronize.
"""
from __future__ import annotations

import contextlib
import logging
from types import SimpleNamespace
from typing import Any

import torch
from torch.backends import ContextProp

from phantora_prof.protocol import SyncKind
from phantora_prof.runtime.device import cuda_rng, memory, streams
from phantora_prof.runtime.process import state as _state
from phantora_prof.runtime.device.streams import SimEvent, SimStream, host_sync

log = logging.getLogger(__name__)


def _index(device: Any = None) -> int:
    return _state.get().device_index(device, check=True)


class _DeviceProperties(SimpleNamespace):
    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count}, L2_cache_size="
                f"{self.L2_cache_size // (1024 * 1024)}MB)")


class device:  # noqa: N801 - mirrors torch.cuda.device
    """Context manager that changes the current simulated device."""

    def __init__(self, device: Any):
        self.idx = -1 if device is None else _index(device)
        self.prev = -1

    def __enter__(self):
        st = _state.get()
        self.prev = st.current_device
        if self.idx >= 0:
            st.current_device = self.idx
        return self

    def __exit__(self, *exc: Any) -> bool:
        _state.get().current_device = self.prev
        return False


def install() -> None:
    st = _state.get()
    gpu = st.gpu
    cuda = torch.cuda
    props = gpu.cuda_properties()

    def get_device_properties(device: Any = None) -> _DeviceProperties:
        _index(device)
        return _DeviceProperties(**props)

    def synchronize(device: Any = None) -> None:
        host_sync(SyncKind.DEVICE, 0, _index(device))

    def set_device(device: Any) -> None:
        idx = _index(device)
        if idx >= 0:
            st.current_device = idx
            # the native guard's current device too: C++ resolves `.cuda()` / `.to("cuda")` with it
            native_set = getattr(torch._C, "_accelerator_setDeviceIndex", None)
            if native_set is not None and idx < st.config.device_count:
                try:
                    native_set(idx)
                except Exception:  # noqa: BLE001 - a CUDA build without the fake guard
                    pass

    def exchange_device(device: int) -> int:
        """torch.cuda._exchange_device: set the device, return the previous one (-1: leave it)."""
        prev = st.current_device
        if device >= 0:
            set_device(device)
        return prev

    def maybe_exchange_device(device: int) -> int:
        """torch.cuda._maybe_exchange_device: a function of its own, not an alias of
        exchange_device (Dynamo keeps one handler per function object and refuses a second)."""
        return exchange_device(device)

    # per-device generators: frameworks index torch.cuda.default_generators and save/restore states
    generators = tuple(cuda_rng.SimCudaGenerator(i) for i in range(st.config.device_count))

    patches: dict[str, Any] = {
        "is_available": lambda: True,
        "device_count": lambda: st.config.device_count,
        "_lazy_init": lambda: None,
        "is_initialized": lambda: True,
        "init": lambda: None,
        "set_device": set_device,
        "_exchange_device": exchange_device,  # torch.cuda.device / device_of (nn.RNN.flatten_parameters)
        "_maybe_exchange_device": maybe_exchange_device,
        "current_device": lambda: st.current_device,
        "get_device_name": lambda device=None: get_device_properties(device).name,
        "get_device_capability": lambda device=None: (props["major"], props["minor"]),
        "get_device_properties": get_device_properties,
        "is_bf16_supported": lambda including_emulation=True: props["major"] >= 8,
        "is_tf32_supported": lambda: props["major"] >= 8,
        "get_arch_list": lambda: [f"sm_{props['major']}{props['minor']}"],
        "get_gencode_flags": lambda: f"-gencode compute=compute_{props['major']}{props['minor']},code=sm_{props['major']}{props['minor']}",
        "synchronize": synchronize,
        "Stream": SimStream,
        "Event": SimEvent,
        "current_stream": streams.current_stream,
        "default_stream": streams.default_stream,
        "set_stream": streams.set_stream,
        "stream": streams.stream_context,
        "device": device,
        **cuda_rng.api(generators, _index),
        "is_current_stream_capturing": lambda: False,
        "ipc_collect": lambda: None,
        "set_per_process_memory_fraction": lambda fraction, device=None: None,
        "utilization": lambda device=None: 0,
        "can_device_access_peer": lambda device, peer_device: True,
    }
    patches.update(memory.api(st, props["total_memory"]))
    from phantora_prof.runtime.device import memory_history
    from phantora_prof.runtime.device.allocator import _models

    # torch.cuda.memory._record_memory_history / _dump_snapshot (memory_viz's format)
    memory_history.install(memory_history.MemoryHistory(lambda: st.clock.wall_ns() // 1000), _models)
    for name, fn in patches.items():
        setattr(cuda, name, fn)
    cuda.default_generators = generators
    # the flag torch sets in _lazy_init, read directly by torch.utils.checkpoint to decide whether
    # to save and restore the CUDA RNG state around a recompute (without it, dropout inside a
    # checkpointed region drew another mask in the recompute over small tensors with values)
    cuda._initialized = True
    cuda_rng.install_generator_factory(lambda: st.current_device, st.config.device_count)
    # Same functions where torch re-exports or caches them.
    torch.cuda.memory.memory_allocated = cuda.memory_allocated
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                 "memory_stats", "reset_peak_memory_stats", "empty_cache", "mem_get_info",
                 "reset_max_memory_allocated", "reset_accumulated_memory_stats"):
        if hasattr(torch.cuda.memory, name):
            setattr(torch.cuda.memory, name, getattr(cuda, name))
    if hasattr(torch.cuda, "random"):
        for name in ("manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
                     "set_rng_state", "get_rng_state_all", "set_rng_state_all"):
            setattr(torch.cuda.random, name, patches[name])
    torch.cuda.graphs.is_current_stream_capturing = patches["is_current_stream_capturing"]
    _install_cuda_version()
    _install_cudnn()
    _install_nvtx()
    _install_accelerator(st)


CUDA_VERSION = "12.8"  # as native/fake_cuda.cpp's versionCUDART() reports it to C++ (12080)


def _install_cuda_version() -> None:
    """`torch.version.cuda` names a CUDA runtime, as on a CUDA wheel of torch.

    A CPU build says None, and code gated on it takes its no-CUDA path although
    `torch.cuda.is_available()` says yes: DDP refuses `bf16_compress_hook` ("requires CUDA"),
    `torch._scaled_mm`'s output loses its padded stride, transformers' `TrainingArguments(tf32=True)`
    raises (and with `torch_compile=True` warns that no Ampere GPU is there and leaves TF32 off).
    A build that has its own (CUDA, ROCm) keeps it."""
    if torch.version.cuda is None and torch.version.hip is None:
        torch.version.cuda = CUDA_VERSION


CUDNN_VERSION = 91900  # as native/fake_cuda.cpp reports it to C++ (the reference H200 machine's cuDNN)


def _install_cudnn() -> None:
    """torch.backends.cudnn says cuDNN is there, as on a CUDA build of torch.

    Python code asks it before taking cuDNN paths (nn.RNN flattens its weights for cuDNN only
    when `cudnn.is_acceptable`); C++ asks the CUDA hooks (native/fake_cuda.cpp). On a CPU
    build both would say no, and RNNs, batch norm and convolutions would take other kernels."""
    if torch.backends.cudnn.is_available():
        return  # a CUDA build with its own cuDNN
    wrapper = torch.backends.cudnn
    module = getattr(wrapper, "m", wrapper)  # a PropModule wraps the module whose globals its functions read
    for target in {id(wrapper): wrapper, id(module): module}.values():
        target.is_available = lambda: True
        target.version = lambda: CUDNN_VERSION
        target._init = lambda: True
    _install_cudnn_benchmark_limit(wrapper)
    # torch._C._cudnn's RNN modes (cudnnRNNMode_t), which torch.backends.cudnn.rnn reads
    modes = SimpleNamespace(rnn_relu=0, rnn_tanh=1, lstm=2, gru=3)
    from torch.backends.cudnn import rnn as cudnn_rnn

    namespace = cudnn_rnn.get_cudnn_mode.__globals__  # the module's own globals, whatever wraps it
    if namespace.get("_cudnn") is None:
        namespace["_cudnn"] = SimpleNamespace(RNNMode=modes)


_CUDNN_BENCHMARK_LIMIT = [10]  # cuDNN's default: algorithms tried per convolution under benchmark mode


def _install_cudnn_benchmark_limit(wrapper: Any) -> None:
    """`torch.backends.cudnn.benchmark_limit` and the `torch._C` functions behind it.

    A CUDA build has them; a CPU build does not, and once `is_available()` says yes,
    `torch.backends.cudnn.flags(...)` (HF wav2vec2's CTC loss runs inside it) reads them.
    The limit only matters to cuDNN's benchmark mode, which the simulator does not run."""
    if not hasattr(torch._C, "_cuda_get_cudnn_benchmark_limit"):
        torch._C._cuda_get_cudnn_benchmark_limit = lambda: _CUDNN_BENCHMARK_LIMIT[0]

        def set_limit(limit: int) -> None:
            _CUDNN_BENCHMARK_LIMIT[0] = int(limit)

        torch._C._cuda_set_cudnn_benchmark_limit = set_limit
    cls = type(wrapper)
    if cls.__dict__.get("benchmark_limit", 0) is None and isinstance(cls.__dict__.get("benchmark"), ContextProp):
        cls.benchmark_limit = ContextProp(torch._C._cuda_get_cudnn_benchmark_limit,
                                          torch._C._cuda_set_cudnn_benchmark_limit)


def _install_nvtx() -> None:
    """torch.cuda.nvtx ranges become user annotations in the trace."""
    from phantora_prof.runtime.dispatch import annotations

    nvtx = torch.cuda.nvtx
    nvtx.range_push = annotations.range_push
    nvtx.range_pop = annotations.range_pop
    nvtx.mark = lambda msg: None

    @contextlib.contextmanager
    def range(msg: str, *args: Any, **kwargs: Any):  # noqa: A001 - torch's name
        annotations.range_push(msg.format(*args, **kwargs) if (args or kwargs) else msg)
        try:
            yield
        finally:
            annotations.range_pop()

    nvtx.range = range


def _install_accelerator(st) -> None:
    """torch.accelerator (2.6+) answers like torch.cuda."""
    acc = getattr(torch, "accelerator", None)
    if acc is None:
        return
    for name, fn in {
        "is_available": lambda: True,
        "device_count": lambda: st.config.device_count,
        "current_accelerator": lambda check_available=False: torch.device("cuda"),
        "current_device_index": lambda: st.current_device,
        "current_device_idx": lambda: st.current_device,
        "set_device_index": lambda device: torch.cuda.set_device(device),
        "set_device_idx": lambda device: torch.cuda.set_device(device),
        "synchronize": lambda device=None: torch.cuda.synchronize(device),
        "current_stream": lambda device=None: streams.current_stream(device),
    }.items():
        setattr(acc, name, fn)
