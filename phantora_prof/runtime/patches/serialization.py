"""`torch.save` / `torch.load` of simulated CUDA tensors, in the format a real GPU run writes.

A simulated CUDA tensor is a FakeTensor: pickling it the default way pickles its fake mode
too (weak dictionaries, locks) and fails. A checkpoint of the simulated run must instead be
the file the real run would have written: every storage in the zip archive with its real
size and its device location (`cuda:N`), so that `torch.load` reads it back here onto the
simulated GPU, and a plain CPU process reads it with `map_location="cpu"`, as it would a real
GPU checkpoint.

- Saving: each fake storage is copied to the host as the real save does (a D2H copy of the
  whole storage, timed like one) and written with the location `cuda:N`. Small storages
  (`values.MAX_BYTES`) hold their real values (step counters, scalars, small weights); large
  ones hold zeros: simulated tensors have no data. Tensors that share a storage (tied
  weights, views) still share it in the file.
- Loading: a `cuda:N` storage becomes a simulated CUDA storage (an H2D copy, allocated in the
  memory model; small ones keep their values), and tensors are rebuilt as views of it.
  `map_location` works as in torch (`"cpu"`, a device, a dict, a function).
- Plain `pickle` of a simulated tensor (outside `torch.save`) gives its host copy and moves
  it back to the device when unpickled.
- Time: beyond those copies, `torch.save` costs host time per byte of the file (pickling, the
  zip archive's crc32, writes into the page cache) and `torch.load` per storage read back, more
  for storages of 32 MiB and over (new host memory that large is fresh pages from the OS, each
  faulted in), measured on the GPU machine's host (hostcost.save_ns / storage_read_ns,
  host_model.json "serialization").
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections import OrderedDict
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

log = logging.getLogger(__name__)

_DEVICE_ATTR = "_phantora_saved_from"  # on a host copy: the CUDA device it was saved from
_tls = threading.local()


def _scope(name: str) -> dict | None:
    stack = getattr(_tls, name, None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def _scoped(name: str):
    stack = getattr(_tls, name, None)
    if stack is None:
        stack = []
        setattr(_tls, name, stack)
    stack.append({})
    try:
        yield
    finally:
        stack.pop()


def _host_copy(t: torch.Tensor, tag: bool) -> torch.UntypedStorage:
    """The whole storage of the fake CUDA tensor `t` on the host: a D2H copy (values where
    the storage has them, zeros otherwise), as `storage.cpu()` in a real save."""
    from phantora_prof.runtime.dispatch import values

    storage = t.untyped_storage()
    itemsize = t.element_size()
    whole = torch.as_strided(t.detach(), (storage.nbytes() // itemsize,), (1,), 0)
    host = whole.cpu()
    if isinstance(host, FakeTensor) or host.device.type != "cpu":  # called with the capture mode off
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            real = values.shadow(whole)
            host = real.clone() if real is not None else torch.zeros(whole.shape, dtype=whole.dtype)
    out = host.untyped_storage()
    if out.nbytes() < storage.nbytes():  # a storage whose size is no multiple of the dtype's
        padded = torch.UntypedStorage(storage.nbytes())
        padded.fill_(0)
        padded[: out.nbytes()].copy_(out)
        out = padded
    if tag:  # written by torch.save with the device's location (see _location_tag)
        setattr(out, _DEVICE_ATTR, str(t.device))
    return out


def _reduce_ex(original, self: torch.Tensor, proto: int):
    if type(self) is not FakeTensor or self.device.type != "cuda":
        return original(self, proto)
    if getattr(self, "_is_param", False):  # an nn.Parameter on the simulated GPU (runtime/patches/modules.py)
        return (torch._utils._rebuild_parameter, (self.detach(), self.requires_grad, OrderedDict()))
    scope = _scope("save")
    key = self.untyped_storage()._cdata
    host = scope.get(key) if scope is not None else None
    if host is None:
        host = _host_copy(self, tag=scope is not None)
        if scope is not None:
            scope[key] = host  # one host storage per device storage: sharing survives the save
    if scope is None:  # plain pickle: back on the device when unpickled
        cpu = torch.empty(0, dtype=self.dtype).set_(host, self.storage_offset(), tuple(self.size()),
                                                    self.stride())
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (cpu, self.dtype, str(self.device), self.requires_grad))
    args = (self.storage_offset(), tuple(self.size()), self.stride(), self.requires_grad, OrderedDict())
    if self.dtype in torch.storage._new_dtypes():
        return (torch._utils._rebuild_tensor_v3, (host, *args, self.dtype))
    typed = torch.storage.TypedStorage(wrap_storage=host, dtype=self.dtype, _internal=True)
    return (torch._utils._rebuild_tensor_v2, (typed, *args))


def _location_tag(storage: Any) -> str | None:
    """Where a host copy of a simulated storage came from (torch.serialization tagger)."""
    if isinstance(storage, torch.storage.TypedStorage):
        storage = storage._untyped_storage
    return getattr(storage, _DEVICE_ATTR, None)


def _to_device(storage: Any, location: str):
    """Deserializer: a `cuda:N` storage read from a file becomes a simulated CUDA storage. Called
    for every storage torch.load reads (ours is the first deserializer asked), so it also charges
    the reading of each one; not when a `map_location` function places the
    storage itself (it returns one), whose reading is then free (approximate)."""
    if isinstance(storage, torch.storage.TypedStorage):
        storage = storage._untyped_storage
    scope = _scope("load")
    if scope is not None and not scope.get(_LAZY):  # reading the storage back into new host memory
        from phantora_prof import hostcost

        _charge_host(hostcost.storage_read_ns(storage.nbytes()))
    if not location.startswith("cuda"):
        return None
    if storage.device.type != "cpu":
        return None
    device = torch.serialization.validate_cuda_device(location)  # as torch: a clear error for a missing GPU
    return _upload(storage, device)


def _upload(storage: torch.UntypedStorage, device: int):
    """An H2D copy of a host storage into a new simulated CUDA storage (kept for the rebuild)."""
    host = torch.empty(0, dtype=torch.uint8).set_(storage)
    dev = torch.empty(storage.nbytes(), dtype=torch.uint8, device=torch.device("cuda", device))
    dev.copy_(host)
    out = dev.untyped_storage()
    scope = _scope("load")
    if scope is not None:
        scope[out._cdata] = dev
    return out


def _rebuild_from(dev: torch.Tensor, dtype: torch.dtype, offset: int, size, stride) -> torch.Tensor:
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = dev.numel()
    if nbytes % itemsize:
        dev = dev[: nbytes - nbytes % itemsize]
    return torch.as_strided(dev.view(dtype), tuple(size), tuple(stride), offset)


def _loaded(untyped: Any) -> torch.Tensor | None:
    scope = _scope("load")
    if scope is None or untyped.device.type != "meta":
        return None
    return scope.get(untyped._cdata)


def _patched_rebuild_tensor(original):
    # functools.wraps keeps torch's module and name: pickle refers to these functions by name
    @functools.wraps(original)
    def _rebuild_tensor(storage, storage_offset, size, stride):
        dev = _loaded(storage._untyped_storage)
        if dev is None:
            return original(storage, storage_offset, size, stride)
        return _rebuild_from(dev, storage.dtype, storage_offset, size, stride)

    return _rebuild_tensor


def _patched_rebuild_v3(original):
    @functools.wraps(original)
    def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype,
                           metadata=None):
        dev = _loaded(storage._untyped_storage)
        if dev is None:
            return original(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata)
        t = _rebuild_from(dev, dtype, storage_offset, size, stride)
        t.requires_grad_(requires_grad)
        t._backward_hooks = backward_hooks
        return t

    return _rebuild_tensor_v3


def _patched_data_ptr(original):
    def _data_ptr(self) -> int:
        dev = _loaded(self._untyped_storage)
        if dev is not None:  # torch.load keeps a storage for the tensors that share it only if this is not 0
            return dev.data_ptr()
        return original(self)

    return _data_ptr


def _size_of(f: Any) -> int | None:
    """The size of the file `f` (a path), or the position of a file object; None if unknown."""
    try:
        if isinstance(f, (str, os.PathLike)):
            return os.path.getsize(f)
        return int(f.tell())
    except (OSError, AttributeError, ValueError, TypeError):
        return None


_LAZY = "lazy"  # in a load's scope: torch.load(mmap=True), whose storages are read as they are touched


def _charge_host(ns: int) -> None:
    """Advance the rank's simulated host clock by `ns` (nothing outside a simulated rank)."""
    from phantora_prof.runtime.process import state

    if ns > 0 and state.installed():
        state.get().clock.advance(ns)


def _file_arg(name: str, args: tuple, kwargs: dict) -> Any:
    """torch.save(obj, f, ...) / torch.load(f, ...): the file argument."""
    if "f" in kwargs:
        return kwargs["f"]
    index = 1 if name == "save" else 0
    return args[index] if len(args) > index else None


def _wrap(fn, name: str):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if name == "load":  # charged per storage read (_to_device)
            with _scoped(name):
                if kwargs.get("mmap"):  # storages read lazily, as the program touches them: not charged
                    _scope(name)[_LAZY] = True
                return fn(*args, **kwargs)
        f = _file_arg(name, args, kwargs)
        before = 0 if isinstance(f, (str, os.PathLike)) else _size_of(f)
        with _scoped(name):
            out = fn(*args, **kwargs)
        after = _size_of(f)
        if after is not None and before is not None:
            # writing the file's bytes (pickling, the zip archive, the page cache); the simulated
            # CUDA tensors' copies are charged by the copy model
            from phantora_prof import hostcost

            _charge_host(hostcost.save_ns(after - before))
        return out

    wrapper._phantora_wrapped = fn
    return wrapper


def _storage_cuda(original):
    """`UntypedStorage.cuda()` of a host storage (e.g. `map_location=lambda s, loc: s.cuda(r)`)."""

    def cuda(self, device=None, non_blocking=False):
        if self.device.type != "cpu":
            return original(self, device, non_blocking)
        if device is None:
            device = torch.cuda.current_device()
        return _upload(self, torch.device("cuda", device).index if not isinstance(device, int) else device)

    return cuda


def install() -> None:
    ser = torch.serialization
    if getattr(ser.save, "_phantora_wrapped", None) is not None:
        return
    torch.save = ser.save = _wrap(ser.save, "save")
    torch.load = ser.load = _wrap(ser.load, "load")
    original = torch.Tensor.__reduce_ex__
    FakeTensor.__reduce_ex__ = lambda self, proto: _reduce_ex(original, self, proto)
    ser.register_package(1, _location_tag, _to_device)
    torch._utils._rebuild_tensor = _patched_rebuild_tensor(torch._utils._rebuild_tensor)
    torch._utils._rebuild_tensor_v3 = _patched_rebuild_v3(torch._utils._rebuild_tensor_v3)
    torch.UntypedStorage.cuda = _storage_cuda(torch.UntypedStorage.cuda)
    torch.storage.TypedStorage._data_ptr = _patched_data_ptr(torch.storage.TypedStorage._data_ptr)
