"""Patches to torch.nn and friends that moving a model to a fake device needs.

- `nn.Module._apply` (behind .to/.cuda/.half): converting a real CPU parameter to a fake
  CUDA tensor cannot reuse the Parameter object (different tensor types), so torch makes a
  new Parameter per module, which unties tied weights (GPT's embedding and LM head:
  124,475,904 parameters would become 163,109,376). We convert each distinct tensor once
  and put the same new Parameter back everywhere the old one was.
- The "foreach supported types" lists of torch.optim and torch.utils._foreach_utils learn
  the fake tensor type, so defaults pick the same implementation as on a GPU.
- `param.data = <simulated CUDA tensor>` keeps the Parameter object, now on the GPU (_set_data).
- `nn.TransformerEncoder`'s nested-tensor fast path runs dense (see _dense_transformer_encoder).
"""
from __future__ import annotations

import ctypes
import functools
import logging
import sys
import threading
import weakref
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.nn.parameter import UninitializedTensorMixin

log = logging.getLogger(__name__)
_tls = threading.local()


def _patched_apply(orig: Callable) -> Callable:
    @functools.wraps(orig)
    def _apply(self: nn.Module, fn: Callable, recurse: bool = True):
        if getattr(_tls, "active", False):
            return orig(self, fn, recurse)
        # Remember where each distinct parameter / buffer lives before conversion.
        places: dict[int, list[tuple[nn.Module, str, str]]] = {}
        originals: dict[int, nn.Parameter] = {}
        modules = list(self.modules()) if recurse else [self]
        for m in modules:
            for key, p in m._parameters.items():
                if p is not None:
                    places.setdefault(id(p), []).append((m, "_parameters", key))
                    originals[id(p)] = p
            for key, b in m._buffers.items():
                if b is not None:
                    places.setdefault(id(b), []).append((m, "_buffers", key))
        memo: dict[int, Any] = {}

        def once(t):
            r = memo.get(id(t))
            if r is None:
                if isinstance(t, UninitializedTensorMixin):
                    return _placeholder_moved(t, fn)
                r = fn(t)
                memo[id(t)] = (r, t)  # keep t alive so its id stays unique
                return r
            return r[0]

        _tls.active = True
        try:
            result = orig(self, once, recurse)
        finally:
            _tls.active = False
        for pid, occurrences in places.items():
            m0, d0, k0 = occurrences[0]
            first = getattr(m0, d0)[k0]
            old = originals.get(pid)
            if old is not None and first is not old and _keep_identity(old, first):
                first = old
            elif len(occurrences) < 2:
                continue
            for m, d, k in occurrences:
                getattr(m, d)[k] = first
        return result

    return _apply


def _placeholder_moved(t: torch.Tensor, fn: Callable) -> torch.Tensor:
    """A lazy module's placeholder (UninitializedParameter / UninitializedBuffer) under `.cuda()`,
    `.to()`, `.half()`: on a GPU machine it stays a placeholder whose empty data moved. Here its
    data stays on the CPU (a simulated CUDA tensor cannot be a placeholder) and where `fn` would
    have sent it is remembered for `_materialize`; `fn` runs on an empty tensor of its kind."""
    from torch._subclasses.fake_tensor import FakeTensor

    target = t.__dict__.get("_phantora_materialize")  # moved before: from where it went
    with torch.no_grad(), torch._C.DisableTorchFunctionSubclass():
        probe = fn(torch.empty(0, dtype=target[1], device=target[0]) if target else torch.empty(0, dtype=t.dtype))
    if isinstance(probe, FakeTensor):
        t._phantora_materialize = (probe.device, probe.dtype)
    elif isinstance(probe, torch.Tensor):
        t.__dict__.pop("_phantora_materialize", None)
        if probe.dtype != t.dtype:
            t.data = torch.empty(0, dtype=probe.dtype)
    return t


def _keep_identity(old: torch.Tensor, new: torch.Tensor) -> bool:
    """Make the Parameter object `old` (a real CPU tensor) hold the fake CUDA tensor `new`.

    On a GPU, `.to("cuda")` keeps each Parameter object (`param.data = ...`); torch cannot do
    that for a fake result, so it makes new Parameters, and whatever refers to the parameters
    by object from before the move (an optimizer built first, a framework's name map keyed
    by `id`, hooks) would lose them. Swapping the two tensors' contents, as
    `torch.utils.swap_tensors` does, restores the identity. swap_tensors refuses tensors with
    weak references; here the weak references (the fake converter's memo, a framework's
    `weakref.finalize` name map) are about the Python object, which lives on, so they are
    kept, except the converter's entry describing the real tensor, which is forgotten. The
    parameter's own attributes stay with it (until 2026-12-05 they went with the swap and were
    lost: a param-group rule reading `param.no_weight_decay` saw nothing after `.cuda()`)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(old, FakeTensor) or not isinstance(new, FakeTensor) or not isinstance(old, nn.Parameter):
        return False
    if old._use_count() != 1 or new._use_count() != 1:  # another at::Tensor holds it (e.g. autograd)
        log.debug("parameter not swapped: use counts %d, %d", old._use_count(), new._use_count())
        return False
    import copyreg

    slots = set(copyreg._slotnames(old.__class__))  # type: ignore[attr-defined]
    if slots != set(copyreg._slotnames(new.__class__)) or slots:  # type: ignore[attr-defined]
        return False
    converter = getattr(new.fake_mode, "fake_tensor_converter", None)
    describer = getattr(getattr(converter, "meta_converter", None), "describer", None)
    lookup = getattr(describer, "lookup_tensor", None)
    if lookup is not None and old in lookup:
        del lookup[old]
    attributes = dict(old.__dict__)  # the program's own (`param.no_weight_decay = True`, Megatron's
    _swap_contents(old, new)  # `tensor_model_parallel`): kept, as `param.data = ...` keeps them on a GPU
    old.__dict__.update(attributes)
    return True


def _swap_contents(a: torch.Tensor, b: torch.Tensor) -> None:
    """What torch.utils.swap_tensors does once its checks pass (class, attributes, TensorImpl),
    without its refusal of weakly referenced tensors; the callers check the rest."""
    a.__class__, b.__class__ = b.__class__, a.__class__
    a.__dict__, b.__dict__ = b.__dict__, a.__dict__
    torch._C._swap_tensor_impl(a, b)


_TENSOR_DATA = torch._C.TensorBase.data  # the C getset behind `t.data`


def _set_data(self: torch.Tensor, value: torch.Tensor) -> None:
    """`param.data = x.to("cuda")` (FSDP1's and DeepSpeed's moves, older scripts' casts) keeps
    the Parameter object and gives it the new tensor's data. With a simulated CUDA tensor torch
    copies the fake's meta TensorImpl into the real parameter without the fake's Python identity:
    the parameter then said `device='meta'` (FSDP1: "Inconsistent compute device and `device_id`:
    meta vs cuda:0"). Here the parameter becomes a fake tensor sharing `x`'s storage (the
    identity swap `_keep_identity` does for `.to()`), keeping its requires_grad; where the swap
    is not possible, torch's own setter runs as before."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(value, FakeTensor) and not isinstance(self, FakeTensor):
        if isinstance(self, UninitializedTensorMixin):
            # a lazy module's placeholder moved by `.cuda()` / `.to()`: it stays a placeholder,
            # to be materialised on the simulated GPU (`_materialize`)
            self._phantora_materialize = (value.device, value.dtype)
            return
        requires_grad = self.requires_grad
        with torch.no_grad():
            alias = value.detach()
        if _keep_identity(self, alias):
            self._is_param = True  # still an nn.Parameter to isinstance (torch's mark for subclasses)
            if self.requires_grad != requires_grad:
                self.requires_grad_(requires_grad)
            return
        _TENSOR_DATA.__set__(self, value)
        _enter_the_simulated_gpu(self, value)
        return
    _TENSOR_DATA.__set__(self, value)
    if isinstance(self, FakeTensor) and isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
        _leave_the_simulated_gpu(self)


_FAKE_KEYS: frozenset[str] | None = None


def _fake_keys(mode: Any) -> frozenset[str]:
    """The instance attributes every FakeTensor has (torch's constructor sets them)."""
    global _FAKE_KEYS
    if _FAKE_KEYS is None:
        from torch._subclasses.fake_tensor import FakeTensor

        with torch._C._DisableTorchDispatch():
            ref = FakeTensor(mode, torch.empty(0, device="meta"), torch.device("cpu"))
        _FAKE_KEYS = frozenset(ref.__dict__)
    return _FAKE_KEYS


def _enter_the_simulated_gpu(t: torch.Tensor, value: torch.Tensor) -> None:
    """`param.data = x.to("cuda")` where the identity swap is refused (something else holds the
    parameter's TensorImpl, e.g. autograd after the parameter was used): torch has just copied
    the fake tensor's state into `t`'s TensorImpl without what makes it one (the parameter said
    `device='meta'`). It becomes a FakeTensor in place, as `_keep_identity` would have made it:
    the Python dispatch key and device (native/fake_cuda.cpp), the class and FakeTensor's
    attributes from `value`, and the Parameter mark."""
    from phantora_prof.runtime.process import native_loader

    lib = native_loader.loaded_library()
    if lib is None:
        return
    was_param = isinstance(t, nn.Parameter)
    keys = _fake_keys(value.fake_mode)
    lib.phantora_fake_tensor_impl(ctypes.c_void_p(t._cdata))
    t.__class__ = type(value)
    t.__dict__.update({k: v for k, v in value.__dict__.items() if k in keys})
    if was_param:
        t._is_param = True


def _leave_the_simulated_gpu(t: torch.Tensor) -> None:
    """`param.data = param.data.cpu()` (FSDP1's CPU offload of a full state dict, EMA or
    optimizer-state offloading, hand-written `.to()` loops): torch has just given `t`'s
    TensorImpl the real CPU tensor's data, as on a GPU, but the Python object was still a
    FakeTensor that called itself `cuda:0`, and its next op failed ("elem.device.type must be
    'meta', got cpu"). It becomes what it is on a GPU machine: a plain tensor (an nn.Parameter
    if it was one) on the new device, keeping its identity, its autograd state and every
    attribute but FakeTensor's own; its TensorImpl loses the Python dispatch key and the
    Python-answered device torch's `.data =` keeps for a subclass (native/fake_cuda.cpp)."""
    from phantora_prof.runtime.process import native_loader

    lib = native_loader.loaded_library()
    if lib is None:  # no fake CUDA device (a real GPU's run): nothing of the simulator's to undo
        return
    keys = _fake_keys(t.fake_mode)
    was_param = bool(t.__dict__.get("_is_param"))
    for key in keys:
        t.__dict__.pop(key, None)
    if was_param:
        del t.__dict__["_is_param"]
    t.__class__ = nn.Parameter if was_param else torch.Tensor
    lib.phantora_plain_tensor_impl(ctypes.c_void_p(t._cdata))


_SWAP_TENSORS = torch.utils.swap_tensors


def _swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
    """torch.utils.swap_tensors, also for a parameter leaving the simulated GPU while something
    holds a weak reference to it (`model.cpu()` after torch.compile: Dynamo's guards do; Lightning
    moves the model to the CPU at teardown). On a GPU, `Module._apply` keeps such a parameter
    object with `param.data = ...`, weak references and all; here the parameter is a FakeTensor,
    for which torch swaps the two tensors instead, and swap_tensors refuses weakly referenced
    tensors. The weak references are about the Python object, which keeps its identity, so the
    swap goes ahead as `_keep_identity` does the other way (use counts still checked by torch's
    function for every other case)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if not (isinstance(t1, FakeTensor) and not isinstance(t2, FakeTensor) and weakref.getweakrefs(t1)
            and not weakref.getweakrefs(t2)):
        return _SWAP_TENSORS(t1, t2)
    import copyreg

    if set(copyreg._slotnames(t1.__class__)) != set(copyreg._slotnames(t2.__class__)):  # type: ignore[attr-defined]
        raise RuntimeError("Cannot swap t1 and t2 if they have different slots")
    if t1._use_count() != 1 or t2._use_count() != 1:
        return _SWAP_TENSORS(t1, t2)  # torch's own checks and message
    _swap_contents(t1, t2)


def _record_stream(self: torch.Tensor, stream: Any) -> None:
    """Tensor.record_stream with a simulated stream: the allocator model keeps the block from
    being reused by another stream until the host next synchronizes."""
    from phantora_prof.runtime.device import memory

    if self.device.type == "cuda":
        memory.record_stream(self, stream)


def _foreach_accepts_fake_tensors() -> None:
    """Let torch's foreach defaults see simulated CUDA tensors as plain tensors.

    Optimizers built with `foreach=None` (the default of Adam, AdamW, SGD, ...) and
    `clip_grad_norm_` pick the multi-tensor (foreach) kernels only when `type(p)` is in a
    short list (Tensor, Parameter, and DTensor, which adds itself the same way). Simulated
    parameters are FakeTensors, so without this they took the per-parameter for-loop: ~10
    kernels per parameter instead of a few multi-tensor launches (a Llama step launched 43%
    more kernels than on the H200 and an SGD step's optimizer time was 2.3x).
    """
    import importlib

    from torch._subclasses.fake_tensor import FakeTensor

    for name in ("torch.optim.optimizer", "torch.utils._foreach_utils"):
        try:
            types = getattr(importlib.import_module(name), "_foreach_supported_types")
        except (ImportError, AttributeError):  # other torch versions: nothing to teach
            log.debug("%s._foreach_supported_types not found", name)
            continue
        if isinstance(types, list) and FakeTensor not in types:
            types.append(FakeTensor)


_NESTED_WARNED = False


def _dense_transformer_encoder(orig: Callable) -> Callable:
    """`nn.TransformerEncoder` in inference with a padding mask converts its input to a nested
    tensor (`torch._nested_tensor_from_mask`) and runs its layers' fused kernels on the valid
    tokens only. Nested tensors do not exist on the simulated device (FakeTensor has no nested
    layout), so there the encoder takes the path it takes with `enable_nested_tensor=False`:
    the same fused layer kernels on the padded tensor, which does the padding's work too (more GPU
    time than the GPU spends, up to the padded share of the tokens) and skips the mask check's
    host sync. Said once per run; training and unmasked calls are not affected."""

    @functools.wraps(orig)
    def forward(self: nn.Module, src: torch.Tensor, *args: Any, **kwargs: Any):
        global _NESTED_WARNED
        if not getattr(self, "use_nested_tensor", False) or not isinstance(src, torch.Tensor) \
                or src.device.type != "cuda":
            return orig(self, src, *args, **kwargs)
        masked = kwargs.get("src_key_padding_mask", args[1] if len(args) > 1 else None) is not None
        if masked and not _NESTED_WARNED and not self.layers[0].training:
            _NESTED_WARNED = True
            log.warning("nn.TransformerEncoder: the nested-tensor fast path (inference with a padding mask) is "
                        "simulated on the padded tensor: its GPU time includes the padding's work")
        self.use_nested_tensor = False
        try:
            return orig(self, src, *args, **kwargs)
        finally:
            self.use_nested_tensor = True

    return forward


_PACKAGE_DIR = str(Path(__file__).resolve().parents[2])  # phantora_prof/


def _materialize(orig: Callable) -> Callable:
    """`UninitializedParameter.materialize` (a lazy module's first forward) for a placeholder that
    `.cuda()` / `.to()` sent to the simulated GPU: on a GPU machine the placeholder's data is an
    empty CUDA tensor, whose device and dtype materialize takes; here the placeholder kept its
    CPU data (a fake tensor would have made it a FakeTensor, no longer a placeholder) and the
    target is remembered. Materialised on the simulated GPU, it becomes a parameter (buffer)
    like any other there."""

    @functools.wraps(orig)
    def materialize(self: torch.Tensor, shape: Any, device: Any = None, dtype: Any = None) -> None:
        target = self.__dict__.pop("_phantora_materialize", None)
        if target is None:
            return orig(self, shape, device, dtype)
        device = target[0] if device is None else device
        dtype = target[1] if dtype is None else dtype
        self.__class__ = self.cls_to_become  # a plain (empty) parameter or buffer first
        self.data = torch.empty(shape, device=device, dtype=dtype)  # then onto the GPU (_set_data)
        return None

    return materialize


def _uninitialized_shape(orig: property) -> property:
    """`UninitializedParameter.shape` (a lazy module's weight before its first forward) raises by
    design, but the capture mode reads the shape of every tensor an op gets, and `.cuda()` of a
    lazy module (torch's documented pattern) dispatches `_to_copy` of its empty placeholders: on
    a GPU no Python reads that shape. For the simulator's own code the placeholder's shape is
    that of its (empty) tensor; for the program's, the property raises as always."""

    def shape(self: torch.Tensor):
        if sys._getframe(1).f_code.co_filename.startswith(_PACKAGE_DIR):
            return _TENSOR_SHAPE.__get__(self)
        return orig.fget(self)

    return property(shape, doc=orig.__doc__)


_TENSOR_SHAPE = torch._C.TensorBase.shape


def install() -> None:
    if isinstance(UninitializedTensorMixin.__dict__.get("shape"), property):
        UninitializedTensorMixin.shape = _uninitialized_shape(UninitializedTensorMixin.__dict__["shape"])
    UninitializedTensorMixin.materialize = _materialize(UninitializedTensorMixin.materialize)
    nn.Module._apply = _patched_apply(nn.Module._apply)
    torch.utils.swap_tensors = _swap_tensors
    _foreach_accepts_fake_tensors()
    torch.Tensor.record_stream = _record_stream
    nn.TransformerEncoder.forward = _dense_transformer_encoder(nn.TransformerEncoder.forward)
    # the getter stays torch's C one (no Python frame per read, none counted as the program's)
    torch.Tensor.data = property(_TENSOR_DATA.__get__, _set_data, doc=_TENSOR_DATA.__doc__)
