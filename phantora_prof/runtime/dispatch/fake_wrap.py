"""FakeTensor's hot paths without their general Python (issue #18): wrapping a meta tensor as
a FakeTensor, and running a meta kernel as FakeTensorMode runs one.

Every output of a captured op becomes a FakeTensor. torch's constructor is general Python
(argument forms for reconstruction, three spellings of the device, five memo descriptors
that each set three attributes): ~60 us of a captured op's ~300 under a profiler, 10% of a
GPT-2 backward. What it leaves behind is small: the C++ subclass made by
`Tensor._make_subclass` (dispatching on the fake device), the mutable-data-pointer guard, and
an instance dict whose entries are the device, the mode and `None`s.

`FakeWrapper` learns that dict from one tensor built by torch's own constructor (so it
follows the installed torch's attribute names) and then makes each output with
`_make_subclass` and one dict update. It checks at start-up that its tensor equals torch's
(dict, dispatch keys, type, metadata); if anything differs, or the constructor's shape is not
the one it knows, it falls back to `FakeTensor(...)` for good and says so in the log.
"""
from __future__ import annotations

import logging
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

log = logging.getLogger(__name__)

_MAKE = torch.Tensor._make_subclass
_THROW = getattr(torch._C, "_set_throw_on_mutable_data_ptr", None)
_WARN = getattr(torch._C, "_set_warn_deprecated_on_mutable_data_ptr", None)
_NORMALIZE = getattr(FakeTensor, "_normalize_fake_device", None)


class FakeWrapper:
    """`wrap(elem, device)` == `FakeTensor(mode, elem, device)`, faster (see module doc)."""

    def __init__(self, mode: Any) -> None:
        self._mode = mode
        self._templates: dict[torch.device, dict[str, Any]] = {}
        self._device_key: str | None = None
        self._keys: list[str] = []
        self.fast = self._learn()

    def _learn(self) -> bool:
        """Learn the instance dict from torch's constructor; whether the fast path is usable."""
        if _THROW is None or _WARN is None or _NORMALIZE is None or not hasattr(self._mode, "_allow_unsafe_data_ptr_access"):
            log.info("FakeTensor fast wrapping off: this torch lacks the attributes it relies on")
            return False
        if getattr(torch._subclasses.fake_tensor.FakeTensorConfig, "debug", False):
            return False  # torch's constructor records a traceback per tensor: keep it
        device = torch.device("cuda", 0)
        try:
            ref = FakeTensor(self._mode, torch.empty(2, 3, device="meta"), device)
        except Exception as exc:  # noqa: BLE001 - fall back to torch's constructor
            log.info("FakeTensor fast wrapping off: %s", exc)
            return False
        keys = [k for k, v in ref.__dict__.items() if v is not None]
        device_keys = [k for k in keys if isinstance(ref.__dict__[k], torch.device)]
        if len(device_keys) != 1 or sorted(keys) != sorted(device_keys + ["fake_mode"]) \
                or ref.__dict__["fake_mode"] is not self._mode:
            log.info("FakeTensor fast wrapping off: unexpected FakeTensor state %s", sorted(ref.__dict__))
            return False
        self._device_key = device_keys[0]
        self._keys = list(ref.__dict__)
        mine = self._fast(torch.empty(2, 3, device="meta"), device)
        if not _same(ref, mine):
            log.info("FakeTensor fast wrapping off: its tensors differ from FakeTensor's")
            return False
        return True

    def _template(self, device: torch.device) -> dict[str, Any]:
        t = self._templates.get(device)
        if t is None:
            t = dict.fromkeys(self._keys)
            t["fake_mode"] = self._mode
            t[self._device_key] = _NORMALIZE(device)
            if device.index is not None:  # "cuda" alone means the current device: not kept
                self._templates[device] = t
        return t

    def _fast(self, elem: torch.Tensor, device: torch.device) -> FakeTensor:
        template = self._template(device)
        t = _MAKE(FakeTensor, elem, elem.requires_grad, dispatch_device=True,
                  device_for_backend_keys=template[self._device_key])
        (_WARN if self._mode._allow_unsafe_data_ptr_access else _THROW)(t)
        t.__dict__.update(template)
        return t

    @property
    def device_key(self) -> str | None:
        """The instance-dict key of a fake tensor's device (the fast path's; None when off)."""
        return self._device_key if self.fast else None

    def device_of(self, t: Any) -> torch.device | None:
        """What `t.device` says for a fake tensor of this mode outside a kernel invocation (its
        fake device), read from its instance dict; None when that does not apply (another
        mode's tensor, inside a meta kernel, the fast path off): ask `t.device` then."""
        d = getattr(t, "__dict__", None)
        if not self.fast or not d or d.get("fake_mode") is not self._mode or self._mode.in_kernel_invocation:
            return None
        return d.get(self._device_key)

    def wrap(self, elem: torch.Tensor, device: torch.device) -> FakeTensor:
        if self.fast and elem.device.type == "meta":
            return self._fast(elem, device)
        return FakeTensor(self._mode, elem, device)


def _same(a: FakeTensor, b: FakeTensor) -> bool:
    return (type(a) is type(b) and a.__dict__ == b.__dict__
            and torch._C._dispatch_keys(a) == torch._C._dispatch_keys(b)
            and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
            and a.device == b.device and a.requires_grad == b.requires_grad)


class KernelInvocation:
    """`with KernelInvocation(mode):` does what torch's `in_kernel_invocation_manager(mode)`
    does (run a kernel on the meta tensors inside fake tensors: torch dispatch off, the Meta
    key in the TLS include set, the mode flagged), as a plain class: the generator-based
    context manager cost ~20 us per call under a profiler, on most captured ops."""

    __slots__ = ("_mode", "_prev", "_no_dispatch", "_keys")

    def __init__(self, mode: Any) -> None:
        self._mode = mode

    def __enter__(self) -> None:
        mode = self._mode
        self._prev = mode.in_kernel_invocation
        self._no_dispatch = torch._C._DisableTorchDispatch()
        self._no_dispatch.__enter__()
        mode.in_kernel_invocation = True
        self._keys = torch._C._PreserveDispatchKeyGuard()
        self._keys.__enter__()
        torch._C._set_meta_in_tls_dispatch_include(True)

    def __exit__(self, *exc: Any) -> None:
        self._mode.in_kernel_invocation = self._prev
        self._keys.__exit__(None, None, None)
        self._no_dispatch.__exit__(None, None, None)


def _torch_manager_is_known() -> bool:
    """Whether torch's in_kernel_invocation_manager still does exactly what KernelInvocation
    does (checked on its source once; a torch that changes it gets its own manager back)."""
    import inspect

    try:
        src = inspect.getsource(torch._subclasses.fake_tensor.in_kernel_invocation_manager)
    except (OSError, TypeError, AttributeError):
        return False
    needed = ("_DisableTorchDispatch()", "in_kernel_invocation = True", "_PreserveDispatchKeyGuard()",
              "_set_meta_in_tls_dispatch_include(True)", "in_kernel_invocation = prev_in_kernel")
    calls = [line.strip() for line in src.splitlines()
             if ("torch._C." in line or "in_kernel_invocation =" in line) and not line.strip().startswith("#")]
    return all(any(n in c for c in calls) for n in needed) and len(calls) == 6


def kernel_invocation_factory() -> Any:
    """KernelInvocation where it matches the installed torch, else torch's own manager."""
    if _torch_manager_is_known():
        return KernelInvocation
    log.info("FakeTensor kernel invocation: torch's own manager (its code is not the one known here)")
    return torch._subclasses.fake_tensor.in_kernel_invocation_manager
