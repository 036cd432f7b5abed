"""The capture mode: every aten op that touches a CUDA tensor is recorded, costed and faked.

`CaptureMode` is a TorchDispatchMode that sits on top of the mode stack:
- ops that involve only CPU tensors run for real (CPU tensors stay real);
- ops that involve a CUDA tensor or create one run under a plain FakeTensorMode (shapes,
  dtypes and strides, no data), are turned into an `OpCall` with the kernels the cost
  model expects, advance the virtual host clock by the modelled host cost, and go to the
  coordinator;
- data-dependent reads of fake values (`.item()`, `.tolist()`, `bool()`) block the virtual
  host like a real D2H copy + sync and return documented placeholders.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from types import MethodType
from typing import Any, Iterator

import torch
from torch._subclasses.fake_tensor import (
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from phantora_prof import hostcost
from phantora_prof.cost.model import CostModel
from phantora_prof.cost import cat_paths
from phantora_prof.cost import ops as cost_ops
from phantora_prof.errors import UnsupportedOpError
from phantora_prof.protocol import CPU_DEVICE, HIDDEN_DEPTH, AutogradSpan, OpCall, OpKind, SyncKind, TensorArg
from phantora_prof.runtime.device import allocator, cuda_fakes, op_allocations, pinned
from phantora_prof.runtime.dispatch import (annotations, conv_layout, cuda_dispatch, cuda_queries, deferred_init,
                                           fake_wrap, grouped_mm, iterator_layout, kernel_errors, meta_cache,
                                           op_recorder, sdpa, values)
from phantora_prof.runtime.host import dataloader, pyhost
from phantora_prof.runtime.dispatch.tensors import tensors_in
from phantora_prof.runtime.process import interrupts, op_cpu
from phantora_prof.runtime.process.interrupts import PENDING as _INTERRUPT
from phantora_prof.runtime.process import state as _state
from phantora_prof.runtime.distributed.pending import PENDING as _DIST_PENDING
from phantora_prof.runtime.distributed.pending import consume as _dist_consume
from phantora_prof.runtime.device.streams import host_sync

log = logging.getLogger(__name__)

aten = torch.ops.aten

# Ops that only change metadata: no kernel, cheap host cost.
_VIEW_OPS = {
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided",
    "aten::transpose", "aten::t", "aten::permute", "aten::expand", "aten::squeeze", "aten::unsqueeze",
    "aten::slice", "aten::select", "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::narrow",
    "aten::detach", "aten::alias", "aten::unbind", "aten::empty", "aten::empty_strided", "aten::empty_like",
    "aten::new_empty", "aten::new_empty_strided", "aten::lift_fresh",
    "aten::set_", "aten::resize_", "aten::unflatten", "aten::flatten", "aten::view_as", "aten::diagonal",
    "aten::unfold", "aten::_unsafe_split", "aten::expand_as",
}
_MEMSET_OPS = {"aten::zero_", "aten::zeros", "aten::zeros_like", "aten::new_zeros"}

_PRIM_DEVICE = torch.ops.prim.device.default
# "1": C++ calls the mode's Python __torch_dispatch__ directly, not through the C entry
# (CaptureMode._native_entry), e.g. to rule it out when something misbehaves
ENV_PYTHON_ENTRY = "PHANTORA_PYTHON_DISPATCH_ENTRY"
_DEVICE_PUT = torch.ops.prims.device_put.default
_SDP_CHOICE = aten._fused_sdp_choice.default
_LOCAL_SCALAR_DENSE = aten._local_scalar_dense.default
_RECORD_STREAM = aten.record_stream.default
_ROLL = aten.roll.default
_CAT = aten.cat.default
_EQUAL = aten.equal.default
_GROUPED_MM = aten._grouped_mm.default if hasattr(aten, "_grouped_mm") else None  # torch >= 2.8
_IS_PINNED = aten.is_pinned.default
# advanced indexing: a CUDA build moves CPU index tensors to the indexed tensor's GPU itself
# (ATen's make_info, TensorAdvancedIndexing.cpp); FakeTensorMode refuses the mix for index_put
_INDEXING = (aten.index.Tensor, aten._unsafe_index.Tensor, aten.index_put.default, aten.index_put_.default,
             aten._index_put_impl_.default, aten._unsafe_index_put.default)
_TO_COPY_OP = aten._to_copy.default
# reductions that read their input in the output's dtype (cost/ops.py CAST_BEFORE_REDUCE)
_CAST_BEFORE_REDUCE = frozenset(getattr(aten, name) for name in cost_ops.CAST_BEFORE_REDUCE)
_SUM_DEFAULT = aten.sum.default
_ADD = torch.ops.aten.add.Tensor
_ADD_ = torch.ops.aten.add_.Tensor
_INDEX_PUT = torch.ops.aten.index_put.default
_INDEX_PUT_IMPL_ = torch.ops.aten._index_put_impl_.default
_ACCUMULATING_INDEX_PUTS = frozenset({_INDEX_PUT, _INDEX_PUT_IMPL_, torch.ops.aten.index_put_.default})
_EVALUATE_FUNCTION = "autograd::engine::evaluate_function: "


def _non_overlapping_and_dense(t: torch.Tensor) -> bool:
    from torch._prims_common import is_non_overlapping_and_dense_or_false

    return bool(is_non_overlapping_and_dense_or_false(t))

_FAKE_KEY = torch._C._TorchDispatchModeKey.FAKE

# Ops taken on the fast path (see CaptureMode._fast_fake): frequent in training steps, with
# meta kernels that produce exactly what FakeTensorMode would. In-place ops return their
# (already fake) input unchanged.
_FAST_OPS = frozenset(getattr(aten, name).default if "." not in name else
                      getattr(getattr(aten, name.split(".")[0]), name.split(".")[1]) for name in (
    "view", "_unsafe_view", "t", "transpose.int", "permute", "expand", "unsqueeze", "squeeze.dim", "slice.Tensor",
    "select.int", "split.Tensor", "split_with_sizes", "detach", "alias", "as_strided", "_reshape_alias",
    "mm", "addmm", "bmm", "baddbmm", "add.Tensor", "add_.Tensor", "mul.Tensor", "mul_.Tensor", "sub.Tensor",
    "div.Tensor", "gelu", "gelu_backward", "silu", "silu_backward", "relu", "threshold_backward",
    "native_layer_norm", "native_layer_norm_backward", "sum.dim_IntList", "_to_copy", "clone", "cat",
    "_softmax", "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data", "embedding",
    "embedding_dense_backward", "fill_.Scalar", "zero_", "copy_", "ones_like", "zeros_like", "empty_like",
    "pow.Tensor_Scalar", "mean.dim", "rsqrt", "neg", "exp", "tanh", "sigmoid",
))

_DTYPE_NAMES: dict[torch.dtype, str] = {}


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = str(dtype).replace("torch.", "")
        _DTYPE_NAMES[dtype] = name
    return name


def _matmul_tf32() -> bool:
    """Whether fp32 matmuls may use TF32 tensor cores (torch.backends.cuda.matmul.*)."""
    matmul = torch.backends.cuda.matmul
    precision = getattr(matmul, "fp32_precision", None)  # torch >= 2.9
    return precision == "tf32" if precision is not None else bool(matmul.allow_tf32)


def _cudnn_tf32(part: str) -> bool:
    """Whether cuDNN may run fp32 `part` ("conv" or "rnn") on TF32 tensor cores:
    `torch.backends.cudnn.<part>.fp32_precision` (torch >= 2.9), else `cudnn.allow_tf32`. Both
    default to TF32, unlike matmuls: a script that never mentions precision trains its fp32
    convolutions on tensor cores (measured, session 50: ResNet-50's strided 3x3 convolutions in
    fp32 ran 0.16-0.29 ms on an H100, the fp32 roofline said 1.86)."""
    sub = getattr(torch.backends.cudnn, part, None)
    precision = getattr(sub, "fp32_precision", None)
    if precision is not None:
        return precision == "tf32"
    return bool(torch.backends.cudnn.allow_tf32)


def _tf32_for(name: str) -> bool:
    """The TF32 switch that governs op `name` on a CUDA build: cuDNN's for convolutions and
    cuDNN RNNs, the matmul one for everything else."""
    if name.startswith(cost_ops.CUDNN_CONV_OPS):
        return _cudnn_tf32("conv")
    if name.startswith(cost_ops.CUDNN_RNN_OPS):
        return _cudnn_tf32("rnn")
    return _matmul_tf32()


# (the capture FakeTensorMode, the instance-dict key of a fake tensor's device) when FakeTensor's
# fast wrapping is on (FakeWrapper.device_key), set by CaptureMode
_FAST_DEVICE: tuple[Any, str] | None = None


def _tensor_device(t: torch.Tensor) -> torch.device:
    """`t.device`; for this mode's fake tensors read from the instance dict: FakeTensor.device is
    two Python properties, and the capture path asks ~7 times per op (issue #18). The rule of
    FakeWrapper.device_of, written out here: calling it cost 0.6% of a rank's instructions."""
    fast = _FAST_DEVICE
    if fast is not None:
        d = t.__dict__
        mode = d.get("fake_mode")
        if mode is fast[0] and not mode.in_kernel_invocation:
            dev = d.get(fast[1])
            if dev is not None:
                return dev
    return t.device


def _device_type(t: torch.Tensor) -> str:
    """A tensor's device type; a FakeTensor's own (see CaptureMode._touches_cuda)."""
    return t.fake_device.type if isinstance(t, FakeTensor) else t.device.type


def _is_cuda_device(d: Any) -> bool:
    if isinstance(d, torch.device):
        return d.type == "cuda"
    if isinstance(d, str):
        return d.startswith("cuda")
    return False


class CaptureMode(TorchDispatchMode):
    """Records and fakes CUDA ops; see the module docstring."""

    supports_higher_order_operators = True  # flex_attention etc. come here (runtime/dispatch/hops.py)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No torch._disable_dynamo wrapper around __torch_dispatch__ (torch >= 2.9 adds one to
        every mode): its Python (eval_frame's _fn, _callback_from_stance, is_exporting) ran once
        per captured op in torch's files, so the host model counted ~70 instructions per op
        that a real CUDA run, with no mode, never executes. Dynamo never traces this mode."""
        return False

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Step aside while Dynamo traces and Inductor compiles (torch >= 2.9), and capture what
        the compiled code runs (runtime/compile/): tracing is not GPU work."""
        return True

    def __init__(self) -> None:
        super().__init__()
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        # `copy.deepcopy(model)` (an EMA or teacher model) deep-copies each tensor's instance
        # dict, the fake mode included: the copies belonged to a mode of their own, which the
        # capture mode treats as another framework's (slow general path; `.half()` then failed
        # "Cannot swap t1 because it has weakref"). One simulated GPU, one mode: it copies to itself.
        self.fake_mode.__deepcopy__ = _ItSelf(self.fake_mode)
        wrapper = fake_wrap.FakeWrapper(self.fake_mode)
        self._wrap = wrapper.wrap  # FakeTensor(mode, meta, device), faster
        self._fake_device = wrapper.device_of  # a fake tensor's device without torch's Python
        self._kernel_invocation = fake_wrap.kernel_invocation_factory()  # in_kernel_invocation_manager
        self.st = _state.get()
        self.gpu = self.st.gpu
        self._tls = threading.local()
        # One op at a time across threads: the fake mode's kernel-invocation flag, the op
        # recorder and the clock are per process, and several threads can dispatch CUDA ops at
        # once (autograd runs one worker thread per device: DataParallel's backward over two
        # GPUs; a script's own prefetch thread). Re-entrant: an op's decomposition and the
        # ops the simulator runs inside one come back here on the same thread.
        self._one_op_at_a_time = threading.RLock()
        self._autograd_open: tuple | None = None  # (node, name, seq, start_ns, ext_id)
        self.unsupported: dict[str, str] = {}
        # output metadata per op signature on the fast path (off: the A/B switch of tests/bench_runtime.py)
        self._meta_cache = meta_cache.MetaCache() if meta_cache.enabled() else None
        self._general_cache = meta_cache.GeneralCache(FakeTensor) if meta_cache.enabled() else None
        self.costs = self.st.cost_model or CostModel(self.gpu, op_costs=self.st.config.op_costs)
        # The native op recorder (CPU builds of torch): it records the host op tree, autograd
        # nodes included, so the mode does not send AutogradSpans of its own.
        self._rec = op_recorder.get()
        annotations.set_boundary_hook(self._close_autograd)
        global _FAST_DEVICE
        _FAST_DEVICE = (self.fake_mode, wrapper.device_key) if wrapper.device_key is not None else None
        self._native_entry(wrapper)

    def _native_entry(self, wrapper: fake_wrap.FakeWrapper) -> None:
        """Enter from C++ through the host model's C extension (native/pyhost/pyhost.c
        dispatch_entry): prim::device answered there, everything else run with the Python hook
        paused from the first instruction (issue #18). Torch looks `__torch_dispatch__` up on
        the mode object (and wants it bound to the mode), so a bound instance attribute takes
        the class method's place. Off without a C compiler or under the self-profiler (which
        counts every entry); with FakeTensor's fast wrapping off, prim::device is Python's."""
        from phantora_prof.runtime.host import pyhost

        if os.environ.get(ENV_PYTHON_ENTRY, "") not in ("", "0") or self.st.self_profile is not None:
            return
        native = pyhost.load()
        if native is None or not hasattr(native, "dispatch_entry"):
            return
        native.set_dispatch(CaptureMode.__torch_dispatch__, _PRIM_DEVICE, self.fake_mode, wrapper.device_key)
        self.__torch_dispatch__ = MethodType(native.dispatch_entry, self)

    def adopt_thread(self) -> None:
        """The calling thread (one the program started) dispatches through this mode from now on
        for its CUDA ops only (runtime/process/install.py); its CPU ops run untouched."""
        self._tls.adopted = True

    # ---- classification ----
    @staticmethod
    def _touches_cuda(args: tuple, kwargs: dict) -> bool:
        """Whether any tensor argument is on a (simulated) CUDA device. A FakeTensor's true device
        is read from `fake_device`: its `device` property answers "meta" while its fake mode is
        inside a kernel invocation, and that flag is the mode's, not the thread's, so a thread
        asking while another thread's op runs under the lock took a CUDA op for a CPU one and ran
        it outside the capture mode (FakeTensor's own dispatch then failed: "in_kernel_invocation
        must be False"; tests/test_e2e.py's prefetch thread, about 1 run in 8)."""
        for a in args:
            if isinstance(a, torch.Tensor):
                if _device_type(a) == "cuda":
                    return True
            elif isinstance(a, (list, tuple)):
                for b in a:
                    if isinstance(b, torch.Tensor) and _device_type(b) == "cuda":
                        return True
        if kwargs:
            for v in kwargs.values():
                if isinstance(v, torch.Tensor):
                    if _device_type(v) == "cuda":
                        return True
                elif _is_cuda_device(v):
                    return True
                elif isinstance(v, (list, tuple)):
                    for b in v:
                        if isinstance(b, torch.Tensor) and _device_type(b) == "cuda":
                            return True
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _PRIM_DEVICE:
            # C++ asking a fake tensor for its device (dispatch_device=True): ~2,500 times per
            # GPT-2 step, more than the ops themselves, from the autograd engine's checks.
            # Answered from the tensor's own state, without torch's Python (which the host
            # model would count) and without the general path below.
            device = self._fake_device(args[0])
            if device is not None:
                return device
        if self.st.self_profile is not None:
            self.st.self_profile.on_thread()
        host = self.st.pyhost
        if host is None:
            out = self._dispatch_one(func, types, args, kwargs)
        else:
            pause, resume = host.native.pause, host.native.resume
            pause()  # the simulator's own Python is not the program's (runtime/host/pyhost.py)
            try:
                out = self._dispatch_one(func, types, args, kwargs)
            finally:
                resume()
        if _INTERRUPT.pending and threading.current_thread() is threading.main_thread():
            # a Ctrl-C that came while this op was being simulated: raised as the op returns to
            # the script, as real torch raises it after the C++ op (runtime/process/interrupts.py)
            interrupts.raise_if_pending(sys._getframe(1))
        return out

    def _dispatch_one(self, func, types, args, kwargs):
        """_dispatch under the lock that keeps threads' ops apart; a thread the program started
        passes its CPU-only ops through untouched (runtime/process/install.py)."""
        if getattr(self._tls, "adopted", False) and not self._touches_cuda(args, kwargs or {}):
            if deferred_init.enabled():  # another thread's CPU work: not the simulated host's
                return deferred_init.run_cpu_op(None, func, args, kwargs or {}, self._redispatch)
            return func(*args, **(kwargs or {}))
        with self._one_op_at_a_time:
            return self._dispatch(func, types, args, kwargs)

    def _dispatch(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _SDP_CHOICE and sdpa.answers(args):
            # SDPA's backend choice (runtime/dispatch/sdpa.py): answered from the inputs' metadata, for any
            # tensor kind (fake, DTensor) and under any FakeTensorMode, as the CUDA build's C++
            # answers it. It launches no kernel and a real profile has no op for it: not recorded.
            return sdpa.fused_sdp_choice(*args, **kwargs)
        if func is _DEVICE_PUT:
            # what tracing makes of `.to(device)`: a graph that runs eagerly (a compiled graph this
            # simulation cannot plan) calls it; its implementation is `a.to(device)`, which must
            # come through this mode like any other device move (it would reach the absent GPU)
            a, device = args[0], args[1]
            return self._dispatch(aten._to_copy.default, types, (a,),
                                  {"device": device, "non_blocking": bool(args[2]) if len(args) > 2 else
                                   bool(kwargs.get("non_blocking", False))})
        if types and _has_other_subclass(types):
            # Other tensor subclasses (e.g. DTensor) dispatch themselves. The round trip through
            # Python's dispatch key and the wrapper tensors it makes are C++ work the counted
            # Python does not see: charged per subclass dispatch (hostcost.SUBCLASS_DISPATCH_NS).
            # A real profile shows that dispatch as a "PythonSubclass" range inside the op.
            if self._rec is not None:
                self._rec.open_subclass()
            if self.st.pyhost is not None:
                self.st.clock.advance(hostcost.SUBCLASS_DISPATCH_NS)
            return NotImplemented
        rec = self._rec
        tls = rec.tls() if rec is not None else None
        if isinstance(func, torch._ops.HigherOrderOperator):
            if tls is None:
                return self._hop(func, args, kwargs)
            prev = rec.quiet(1)
            try:
                return self._hop(func, args, kwargs)
            finally:
                rec.quiet(prev)
        if torch._C._get_dispatch_mode(_FAKE_KEY) is not None:
            # A framework's own FakeTensorMode is active (DTensor's sharding propagation builds
            # global-shape fake tensors; tracing): shape computation, no GPU work. FakeTensorMode
            # is an infra mode, dispatched after user modes like this one, so its ops pass here.
            return self._redispatch(tls, func, args, kwargs)
        if _namespace(func) == "prim":
            # prim::device / prim::layout queries: metadata, no dispatcher op in a real profile
            if func is _PRIM_DEVICE:
                return args[0].device
            return func(*args, **kwargs)
        if not self._touches_cuda(args, kwargs):
            if self.st.pyhost is not None:
                # An op on CPU tensors: its time on the reference host by the bytes it moves
                # (hostcost.cpu_op_ns, issue #15), recorded (as torch.profiler would) with what
                # its kernel calls under it.
                out = self._cpu_op(tls, func, args, kwargs)
                if not dataloader.taking_a_batch():
                    listed = hostcost.tensor_list_counts(args, kwargs, torch.Tensor)
                    self.st.clock.advance(hostcost.cpu_op_ns(_cpu_bytes(func, args, out), func.name(), listed))
                return out
            if tls is not None:
                # Without the host model: the per-op table's charge for one (DISPATCH_NS_CPU).
                self.st.clock.advance(hostcost.DISPATCH_NS_CPU)
            return self._cpu_op(tls, func, args, kwargs)
        if tls is None:
            return self._cuda_op_or_its_error(func, args, kwargs)
        record_name = None
        if func is _ADD and self._accumulates_in_place(tls, args, kwargs):
            func, record_name = _ADD_, "aten::add"
        elif func is _INDEX_PUT and self._index_backward_in_place(tls, args, kwargs):
            func, record_name = _INDEX_PUT_IMPL_, "aten::index_put"
            args, kwargs = (*args[:3], True, True), {}
        # Everything dispatched while the op is faked is the simulator's, not the CUDA kernel's.
        prev = rec.quiet(1)
        try:
            return self._cuda_op_or_its_error(func, args, kwargs, tls, record_name)
        finally:
            rec.quiet(prev)

    def _cuda_op_or_its_error(self, func, args: tuple, kwargs: dict, *rest):
        """`_cuda_op`, whose input errors say what a CUDA build's kernel says
        (runtime/dispatch/kernel_errors.py), not what the meta kernel said; matmuls and
        convolutions over mixed dtypes fail as they fail on a GPU (their meta kernels let them
        through)."""
        if func in kernel_errors.DTYPE_CHECKED and kernel_errors.mixed_dtypes(args):
            # the CPU re-run, off the op's record and the host model's count: only on mixed dtypes
            with self.simulator_ops():
                mixed = kernel_errors.dtype_mismatch(func, args, kwargs)
            if mixed is not None:
                raise mixed
        try:
            return self._cuda_op(func, args, kwargs, *rest)
        except RuntimeError as exc:
            if type(exc) is not RuntimeError:  # OutOfMemoryError and the like: ours, as they are
                raise
            with self.simulator_ops():
                better = kernel_errors.cuda_build_error(func, args, kwargs)
            if better is None:
                raise
            raise better from None

    def _as_parts(self, tls, run):
        """Run `run` (the ops a CUDA build's kernel of the op being handled dispatches) under
        this mode with recording on: each part is captured and recorded inside the op."""
        if tls is not None:
            self._rec.quiet(0)
        try:
            with self:
                return run()
        finally:
            if tls is not None:
                self._rec.quiet(1)

    def _accumulates_in_place(self, tls, args: tuple, kwargs: dict) -> bool:
        """Whether autograd's gradient accumulation `old + new` (InputBuffer::accumulate) would
        run in place, as `old.add_(new)`, on a CUDA build.

        It does when grad mode is off and the buffer holds the last reference to `old` and
        its storage (input_buffer.cpp, can_accumulate_inplace). Here it never can: that test
        also asks `at::isTensorSubclassLike(old)`, true for every tensor while a
        TorchDispatchMode is active (this one always is) and for FakeTensor (a Python
        subclass), and the Python objects and the Python dispatch hold references of their
        own. So the decision is taken here, with the references counted the same way for
        `old` and for `new` (the gradient just produced, which only this call holds): `old`
        is the last reference when it is held no more than `new` is. (Only the tensors'
        own counts: its storage's count also counts views that Python garbage cycles keep
        alive until a collection, which would make the choice vary from run to run.)"""
        rec = self._rec
        if len(args) != 2 or kwargs or torch.is_grad_enabled() or rec.name(tls.open_name) != "aten::add":
            return False
        if not (rec.name(tls.outer_name) or "").startswith(_EVALUATE_FUNCTION):
            return False  # not the engine's input buffer (an add inside a backward function)
        old, new = args
        if not (isinstance(old, FakeTensor) and isinstance(new, FakeTensor)) or old.shape != new.shape \
                or old.is_sparse or not _non_overlapping_and_dense(old):
            return False
        return old._use_count() <= new._use_count()

    def _index_backward_in_place(self, tls, args: tuple, kwargs: dict) -> bool:
        """Whether this `index_put(zeros, indices, grad, accumulate=True)` is the backward of
        advanced indexing (IndexBackward0), which a CUDA build runs in place as
        `_index_put_impl_(zeros, indices, grad, accumulate=True, unsafe=True)`: ATen's
        index_backward takes the out-of-place `index_put` (a clone, then `index_put_`) only for
        tensor subclasses, which every tensor is while this mode is active. The in-place call
        is the one the real trace has, with the sort-based accumulation ops under it (HF Swin-v2's
        relative position bias: `remainder`, `div_`, `arange` and the rest, 24 + 24 + ... per H100
        profiled step, none simulated before). Outside the backward's own call (grad mode on: a
        double backward; another op around it) the call runs as it came."""
        rec = self._rec
        accumulate = _accumulate_arg(args, kwargs)
        if accumulate is not True or torch.is_grad_enabled() or rec.name(tls.open_name) != "aten::index_put":
            return False
        return rec.name(tls.outer_name) == "IndexBackward0" and isinstance(args[0], FakeTensor)

    def _cpu_op(self, tls, func, args: tuple, kwargs: dict):
        """An op on CPU tensors, run for real, unless it initialises a large host tensor whose
        values nothing has read yet (runtime/dispatch/deferred_init.py)."""
        if deferred_init.enabled():
            return deferred_init.run_cpu_op(tls, func, args, kwargs, self._redispatch)
        return self._redispatch(tls, func, args, kwargs)

    @contextlib.contextmanager
    def simulator_ops(self) -> Iterator[None]:
        """Ops run inside are the simulator's own: not recorded, not charged, not captured."""
        prev = self._rec.quiet(1) if self._rec is not None else None
        try:
            with pyhost.simulator_work(self.st.pyhost), _disable_current_modes():
                yield
        finally:
            if prev is not None:
                self._rec.quiet(prev)

    @staticmethod
    def _redispatch(tls, func, args: tuple, kwargs: dict):
        """Run `func` for real (CPU tensors). Its record is already open (the dispatcher
        recorded the call that reached this mode): the re-dispatch must not record it again,
        while what the CPU kernel calls is recorded under it."""
        if tls is None:
            return func(*args, **kwargs)
        tls.skip_next = 1
        try:
            return func(*args, **kwargs)
        finally:
            tls.skip_next = 0

    def _record_id(self, tls, name: str) -> tuple[int, int]:
        """(External id, depth) of the op being handled: its native record's (the coordinator
        then keeps the OpCall for it) when the innermost recorded call is this op, or the one
        around it (an autograd kernel's own record inside the op: `detach`); else a new id."""
        if tls is not None and tls.open_id:
            rec = self._rec
            if rec.name(tls.open_name) == name:
                return tls.open_id, tls.depth - 1
            if tls.outer_id and rec.name(tls.outer_name) == name:
                return tls.outer_id, tls.depth - 2
        return self.st.next_external_id(), -1

    # ---- CUDA ops ----
    def _cuda_op(self, func, args: tuple, kwargs: dict, tls=None, record_name: str | None = None):
        route = _ROUTES.get(id(func)) or _route(func)
        name = route.name
        if route.special:
            if route.indexing and route.body is None:  # index_put_'s body: its _index_put_impl_ moves them
                args = self._indices_on_device(args, tls)
            r = self._special_op(route, func, args, kwargs, tls)
            if r is not _NOT_SPECIAL:
                return r
        done = False  # outputs made without FakeTensorMode's general dispatch
        if route.fast:
            out = self._fast_fake(func, args, kwargs)
            done = out is not None
            if done and func is _CAT:
                self._cat_narrows(tls, args, kwargs, out)
        else:
            out = None
            done = route.returns_nothing and self._fake_gpu((*args, *kwargs.values()), cpu_scalars=True) is not None
        general_key = None
        if not done and self._general_cache is not None and not route.conv:
            general_key = self._general_cache.key(func, args, kwargs)
            if general_key is not None:
                out = self._general_cache.outputs(general_key, self._wrap)
                done = out is not None
        return self._cuda_op_rest(func, args, kwargs, tls, record_name, name, out, done, general_key)

    def _longest_index_run(self, args: tuple, kwargs: dict) -> int | None:
        """The longest run of one row's indices of an accumulating `index_put_` with one index
        tensor whose values the simulation knows (values.py: small storages), or None. ATen's
        accumulation kernel walks each row's indices one by one, so the longest run decides its
        time (cost/ops.py index_put_accumulate): Swin's relative-position table takes its zero
        offset 49 times in 2,401 indices over 169 rows, 3.4x the mean run."""
        accumulate = _accumulate_arg(args, kwargs)
        indices = args[1] if len(args) > 1 else kwargs.get("indices")
        if accumulate is not True or not isinstance(indices, (list, tuple)) or not args:
            return None
        at = [(d, t) for d, t in enumerate(indices) if isinstance(t, torch.Tensor)]
        if len(at) != 1 or at[0][1].dtype not in (torch.int64, torch.int32) or at[0][1].numel() == 0:
            return None
        dim, idx = at[0]
        with self.simulator_ops():
            v = values.shadow(idx)
            if v is None:
                return None
            rows = int(args[0].shape[dim])
            return int(torch.bincount(v.reshape(-1).long() % rows, minlength=rows).max())

    def _cat_narrows(self, tls, args: tuple, kwargs: dict, out) -> None:
        """The narrows of a cat a CUDA build runs input by input (cost/cat_paths.py, way 3: inputs
        of another dtype than the output, one input, more than 4 dims): `result.narrow(dim,
        offset, size)` per input, recorded inside the cat (aten::narrow > aten::slice >
        aten::as_strided) and charged as the views they are. Each copy into a slice is a
        kernel of the cat's own (cost/__init__.py `_cat_copy_split`): ATen calls copy_ directly,
        so a profile has no aten::copy_ record for it. HF decoders' key/value cache under
        autocast takes this way (fp32 keys, bf16 values)."""
        tensors = args[0] if args else kwargs.get("tensors")
        if not isinstance(tensors, (list, tuple)) or not isinstance(out, torch.Tensor):
            return
        inputs = [_to_arg(t) for t in tensors]
        if not all(isinstance(t, TensorArg) for t in inputs) or not cat_paths.copies_per_input(inputs, _to_arg(out)):
            return
        dim = cat_paths.wrap_dim(args[1] if len(args) > 1 else kwargs.get("dim", 0), inputs)

        def narrows():
            offset = 0
            for t, a in zip(tensors, inputs):
                if not cat_paths.skipped(a):
                    out.narrow(dim, offset, a.shape[dim])
                    offset += a.shape[dim]

        self._as_parts(tls, narrows)

    @staticmethod
    def _reduction_casts(func, args: tuple, out) -> bool:
        """Whether a CUDA build's reduction kernel first casts its input to the output's dtype
        (cost/ops.py `reduction_input_dtype`: `mask.sum()` reads the bool mask as int64), then
        `self.to(dtype)` runs inside the reduction (aten::to > aten::_to_copy >
        aten::empty_strided, aten::copy_), with its copy kernel and its temporary, as a profile
        shows it (timm Hiera's AmaxBackward0 sums its bool mask so on an H100); _cuda_op_rest
        records it so, and the reduction is priced on the cast input (cost/__init__.py
        `_reduce_cast_input`)."""
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor):
            return False
        in_dtype = _dtype_name(x.dtype)
        return cost_ops.reduction_input_dtype(func.overloadpacket.__name__, in_dtype,
                                              _dtype_name(out.dtype)) != in_dtype

    def _indices_on_device(self, args: tuple, tls) -> tuple:
        """An advanced-indexing op's args with its CPU index tensors on the indexed tensor's GPU,
        as a CUDA build's kernel makes them before indexing (ATen's make_info): a boolean mask
        becomes its nonzero() index tensors on the CPU first (expandTensors), then each index is
        copied with `.to(device)`, recorded inside the op (a blocking pageable HtoD copy).
        DETR's loss (`target_classes[idx] = ...` with the Hungarian matcher's CPU indices) needs
        this; FakeTensorMode raised a device mismatch. The args unchanged when nothing moves."""
        if len(args) < 2 or not isinstance(args[0], torch.Tensor) or args[0].device.type != "cuda":
            return args
        indices = args[1]
        if not isinstance(indices, (list, tuple)) or not any(
                isinstance(i, torch.Tensor) and i.device.type == "cpu" for i in indices):
            return args
        device = args[0].device

        def moved():
            out = []
            for i in indices:
                if not isinstance(i, torch.Tensor) or i.device.type != "cpu":
                    out.append(i)
                elif i.dtype in (torch.bool, torch.uint8):
                    out.extend(j.to(device) for j in i.nonzero().unbind(1))
                else:
                    out.append(i.to(device))
            return out

        return (args[0], self._as_parts(tls, moved), *args[2:])

    def _special_op(self, route: "_Route", func, args: tuple, kwargs: dict, tls):
        """The ops _cuda_op does not fake and record as they come (decomposed or run as a CUDA
        build's composite body, collectives, backend queries, ...): their result, or
        _NOT_SPECIAL when the op goes the common way after all."""
        if func is _LOCAL_SCALAR_DENSE:
            return self._scalar_read(args[0], tls)
        if route.decompose:
            # e.g. is_nonzero (bool(t)) -> item(): decompose under this mode, as FakeTensorMode
            # would under itself, so data-dependent reads reach _scalar_read. An op a CUDA
            # build runs as its own kernel (silu_backward, _fused_rms_norm) stays one op. Its
            # parts are recorded as a CUDA build's dispatcher would record them.
            r = self._as_parts(tls, lambda: func.decompose(*args, **kwargs))
            if r is not NotImplemented:
                return r
        if route.python_cuda:
            # A CUDA build runs this op's CUDA kernel, Python of torch's own: run it under this
            # mode (its ops captured and recorded inside the op), its Python counted as the host's
            return self._as_parts(tls, lambda: pyhost.run_as_program(
                self.st.pyhost, func._op_dk, torch._C.DispatchKey.CUDA, *args, **kwargs))
        body = route.body
        if body is not None:
            # A CUDA build runs this op's composite C++ body (cuda_dispatch.COMPOSITE_BODIES):
            # run it under this mode, so each op it calls is captured and recorded as there.
            return self._as_parts(tls, lambda: func._op_dk(body, *args, **kwargs))
        if func is _ROLL:
            parts = _roll_parts(args, kwargs)
            if parts is not None:
                return self._as_parts(tls, parts)
        if func is _EQUAL:
            return self._as_parts(tls, lambda: _cuda_equal(*args, **kwargs))
        if func is _GROUPED_MM and not grouped_mm.takes_fast_path(
                args[0], args[1], kwargs.get("out_dtype", args[4] if len(args) > 4 else None),
                self.gpu.compute_capability):
            # ATen's fallback (fp32 / fp16 experts, GPUs before sm 9.0): offs read on the host,
            # one mm per group, each captured and recorded as a CUDA build's profile shows them
            return self._as_parts(tls, lambda: grouped_mm.fallback(*args, **kwargs))
        if route.namespace == "_c10d_functional":  # DTensor / tensor-parallel collectives
            from phantora_prof.runtime.distributed.backend import functional

            return functional(self, func, args, kwargs, tls)
        if func is _RECORD_STREAM:
            return None
        if func is _IS_PINNED:
            return False
        if route.query is not None:  # which backend would run (cuDNN's CTC loss): answered as CUDA's kernel does
            return route.query(*args, **kwargs)
        return _NOT_SPECIAL

    def _cuda_op_rest(self, func, args: tuple, kwargs: dict, tls, record_name: str | None, name: str, out: Any,
                      done: bool, general_key: Any):
        """_cuda_op once the op's outputs may have been made on a fast path (`done`): the general
        path if not, then its memory, values, host time, kernels and record."""
        st = self.st
        reads_size = False
        known = None  # a data-dependent op's real (CPU) result, when its inputs have values
        if done:
            fargs, fkwargs, real_self = args, kwargs, None
        else:
            fargs, fkwargs, real_self = self._fakeify(func, args, kwargs)
        try:
            if not done:
                with self.fake_mode:
                    out = func(*fargs, **fkwargs)
                    if func in conv_layout.CONV_OPS:
                        out = conv_layout.restore(func, fargs, out)
                if general_key is not None:
                    self._general_cache.remember(general_key, out)
        except DynamicOutputShapeException:
            # a CUDA kernel of such an op copies its output size to the host and waits for it
            # (nonzero, bincount, unique, boolean indexing: cudaMemcpyAsync + cudaStreamSynchronize)
            # packed sequences: sized by lengths already on the CPU (no copy back, no wait), some
            # outputs on the CPU: not from values
            packed = name in _PACKED_SEQUENCE_OPS
            reads_size = not packed
            known = None if packed else values.data_dependent_result(func, args, kwargs)
            out = self._data_dependent_exact(known, args, kwargs) if known is not None else None
            if out is None:
                known = None
                out = self._data_dependent_estimate(func, name, fargs, fkwargs, args)
        except Exception as exc:  # noqa: BLE001 - turned into a clear error below
            mixed = _mixed_devices(exc)
            if mixed is not None:  # the script's own bug, reported as CUDA torch reports it
                log.debug("%s refused tensors on two devices: %s", name, exc)
                raise RuntimeError(mixed) from None
            if _nondeterministic_alert(exc):  # torch.use_deterministic_algorithms(True): as on a GPU
                raise RuntimeError(str(exc)) from None
            if "sparse" in name:  # `to_sparse`, sparse constructors: no shape function on a fake device
                raise _sparse_refused(name) from None
            raise self._unsupported(name, args, kwargs, exc, func) from None
        if _has_sparse(out):
            raise _sparse_refused(name)
        out = iterator_layout.fast_setup_output(func, args, kwargs, out, self._fresh_fake)
        out = self._realize_cpu_outputs(out, real_self, func is _TO_COPY_OP and _pins_output(args, kwargs))
        out = values.propagate(func, args, kwargs, out) if known is None else values.store_result(out, known)
        cast_in_kernels = False
        if func.overloadpacket in _CAST_BEFORE_REDUCE and self._reduction_casts(func, args, out):
            if func is _SUM_DEFAULT:  # op_children's tree for it records the cast: its kernel is the op's
                cast_in_kernels = True
            else:
                self._as_parts(tls, lambda: args[0].to(out.dtype))

        self._track_memory(out, name, args, kwargs)
        tid = st.tid()
        if tid and st.pyhost is not None:
            st.pyhost.on_timeline()  # autograd's thread: its Python (hooks) is host work too
        self._track_autograd(tid)
        start = st.clock.now_ns
        device = self._device_of(args, kwargs, out)
        stream = st.stream_of(device)
        kind = self._kind(name, func, args, kwargs, out)
        targs = tuple(_to_arg(a) for a in args)
        tkwargs = {k: _to_arg(v) for k, v in kwargs.items()}
        touts = _outputs(out)
        if cast_in_kernels:
            tkwargs = {**tkwargs, cost_ops.CAST_IN_KERNELS_KWARG: True}
        if func in _ACCUMULATING_INDEX_PUTS:
            run = self._longest_index_run(args, kwargs)
            if run:
                tkwargs = {**tkwargs, cost_ops.LONGEST_RUN_KWARG: run}
        ext, depth = self._record_id(tls, record_name or name)
        op = OpCall(st.config.rank, ext, name, targs, tkwargs, touts, tid, start, start, stream, device, kind,
                    seq_nr=_forward_sequence_nr(tid, args), depth=depth)
        if name in _VIEW_OPS and not self.costs.has_user_cost(name):
            kernels = ()
        else:
            kernels = self.costs.estimate(op, allow_tf32=_tf32_for(name))
        dispatch = hostcost.tensor_list_ns(name, targs, tkwargs, len(touts))
        if dispatch is None:
            dispatch = hostcost.dispatch_ns(name, bool(kernels), self._autograd_open is not None)
        dispatch += hostcost.library_ns(name)
        if depth < 0 and not kernels and tls is not None:
            # No dispatcher call of this op is open: the Python interpreter called the mode
            # itself (FakeTensor's shallow_copy_and_detach dispatches aten::detach, where a
            # real tensor detaches without any op). Its host time stays; the trace gets no op.
            op.depth = HIDDEN_DEPTH
        self._issue(op, kernels, dispatch)
        st.ops_captured += 1
        if _DIST_PENDING and kernels:  # reads the output of a collective nobody waited for
            _dist_consume(args, stream, device)
        st.channel.send(op)
        if kind == OpKind.MEMCPY and self._copy_blocks_host(func, args, kwargs, targs, touts):
            host_sync(SyncKind.STREAM, stream, device, ext)
        elif reads_size:
            host_sync(SyncKind.STREAM, stream, device, ext)
        return out

    def _fresh_fake(self, shape: tuple, strides: tuple, like: torch.Tensor) -> torch.Tensor:
        """A new fake tensor on `like`'s device and of its dtype (iterator_layout's outputs)."""
        with self.fake_mode:
            return torch.empty_strided(shape, strides, dtype=like.dtype, device=like.device)

    def _issue(self, op: OpCall, kernels: tuple, dispatch_ns: int) -> None:
        """The host side of launching `op`: its dispatch from its start, then one launch API call
        per kernel; the host clock moves to the end of them."""
        op.kernels = kernels
        op.launch_ns = op.start_ns + dispatch_ns
        clock, queue = self.st.clock, self.st.launch_queue
        if kernels and queue is not None and queue.may_wait(len(kernels)):
            # a full launch queue holds the launch call up (runtime/device/launch_queue.py)
            clock.advance_to(op.launch_ns)
            before = clock.now_ns
            queue.launch(len(kernels), op.device)
            op.launch_wait_ns = clock.now_ns - before
        elif kernels and queue is not None:
            queue.launch(len(kernels), op.device)  # room left: counted only
        op.end_ns = op.launch_ns + op.launch_wait_ns + sum(hostcost.api_ns(k.launch_api) for k in kernels)
        clock.advance_to(op.end_ns)

    def _hop(self, func, args: tuple, kwargs: dict):
        """A higher-order operator (runtime/dispatch/hops.py): shapes from its FakeTensorMode rule, one
        recorded op with the kernel it launches on a GPU."""
        from torch.utils import _pytree as pytree

        from phantora_prof.runtime.dispatch import hops

        if not hops.supported(func):
            raise hops.unsupported_error(func)
        fake = self.fake_mode
        fargs, fkwargs = pytree.tree_map_only(
            torch.Tensor, lambda t: t if isinstance(t, FakeTensor) else fake.from_tensor(t), (args, kwargs))
        with fake:  # a plain FakeTensorMode: HOP rules are looked up by exact mode type
            out = func(*fargs, **fkwargs)
        st = self.st
        name = func.name()
        self._track_memory(out, name, args, kwargs)
        tid = st.tid()
        self._track_autograd(tid)
        start = st.clock.now_ns
        device = self._device_of(hops.tensor_args(args), {}, out)
        stream = st.stream_of(device)
        ext = st.next_external_id()  # HOPs are no dispatcher ops: the recorder has no record of them
        op = OpCall(st.config.rank, ext, name, hops.to_arg_list(args, _to_arg), {}, _outputs(out), tid, start,
                    start, stream, device, OpKind.COMPUTE, seq_nr=_forward_sequence_nr(tid, hops.tensor_args(args)))
        self._issue(op, hops.kernels(name, args, self.gpu, _matmul_tf32()),
                    hostcost.dispatch_ns(name, True, self._autograd_open is not None))
        st.ops_captured += 1
        if _DIST_PENDING:
            _dist_consume(hops.tensor_args(args), stream, device)
        st.channel.send(op)
        return out

    def allocate_buffer(self, size: tuple, stride: tuple, dtype: torch.dtype, device: int) -> torch.Tensor:
        """A buffer of compiled code (runtime/compile/runner.py). Inductor's wrapper allocates
        with `empty_strided_cuda`, a C++ call that reaches the caching allocator without a
        dispatcher op: a real profile shows no op for it. So no op is recorded here either; the
        block is allocated (and freed when the tensor dies) like any other."""
        rec = self._rec
        prev = rec.quiet(1) if rec is not None else None
        try:
            with torch._C._DisableTorchDispatch():  # FakeTensor's construction detaches `meta`: no op either
                meta = torch.empty_strided(size, stride, dtype=dtype, device="meta")
                t = self._wrap(meta, torch.device("cuda", device))
            self._track_memory(t, "aten::empty_strided", (), {})
        finally:
            if rec is not None:
                rec.quiet(prev)
        return t

    def record_compiled_call(self, name: str, targs: tuple, tkwargs: dict, touts: tuple,
                             kernels: tuple | None, dispatch_ns: int | None, device: int,
                             dispatch_adjust_ns: int = 0) -> None:
        """One launch of a compiled graph (runtime/compile/runner.py): a Triton kernel (its
        kernel given, no dispatcher op stands for it: a `triton_*` range like the one
        Inductor's launcher records) or an aten op the generated code calls, described by
        its arguments' metadata (kernels None: costed here as the op, its per-op host cost
        moved by `dispatch_adjust_ns`, never below a view's)."""
        st = self.st
        tid = st.tid()
        self._track_autograd(tid)
        start = st.clock.now_ns
        stream = st.stream_of(device)
        op = OpCall(st.config.rank, st.next_external_id(), name, targs, tkwargs, touts, tid, start, start,
                    stream, device, OpKind.COMPUTE)
        if kernels is None:
            kernels = self.costs.estimate(op, allow_tf32=_tf32_for(name))
        if dispatch_ns is None:
            dispatch_ns = hostcost.dispatch_ns(name, bool(kernels), self._autograd_open is not None)
            dispatch_ns = max(hostcost.DISPATCH_NS_VIEW, dispatch_ns + dispatch_adjust_ns)
        self._issue(op, kernels, dispatch_ns)
        st.ops_captured += 1
        st.channel.send(op)

    def _fake_gpu(self, values, cpu_scalars: bool = False) -> torch.device | None:
        """The simulated GPU of the tensors in `values` (in tensor lists too) when every one is
        this mode's fake tensor and all are on that one GPU; None otherwise (a real CPU tensor,
        a device move, no tensor at all). `cpu_scalars`: 0-dim CPU tensors may be among them
        (a fused optimizer's `lr` tensor, which CUDA's kernel reads on the host)."""
        device = None
        for a in values:
            for t in (a if isinstance(a, (list, tuple)) else (a,)):
                if not isinstance(t, torch.Tensor):
                    continue
                if not isinstance(t, FakeTensor) or t.fake_mode is not self.fake_mode:
                    if cpu_scalars and t.dim() == 0 and t.device.type == "cpu":
                        continue  # checked only off the hot path: FakeTensor.device is Python
                    return None
                if device is None:
                    device = t.fake_device
                elif t.fake_device != device:
                    if cpu_scalars and t.fake_device.type == "cpu" and t.dim() == 0:
                        continue
                    return None
        return device if device is not None and device.type == "cuda" else None

    def _fast_fake(self, func, args: tuple, kwargs: dict):
        """The hot path: a common op whose tensor inputs are all fake tensors on one CUDA device.

        FakeTensorMode's general dispatch (~120 us here) mostly checks for cases these ops
        never hit (real tensors, constants, device moves, dynamic shapes); running the meta
        kernel directly and wrapping its outputs as FakeTensorMode would (~25 us) gives the same
        tensors. Returns None when the op does not qualify, and the general path runs. A
        `device=` naming the inputs' own device (autocast's casts: `_to_copy(t, dtype=...,
        device=t.device)`) moves nothing: it is left out of the meta kernel's call."""
        device = self._fake_gpu(args)  # tensor lists too (cat)
        if device is None:
            return None
        if "device" in kwargs:
            target = kwargs["device"]
            if target is None or torch.device(target) != device:
                return None
            kwargs = {k: v for k, v in kwargs.items() if k != "device"}
        for v in kwargs.values():
            if isinstance(v, torch.Tensor):
                return None
        r = None
        cache = self._meta_cache
        key = cache.key(func, args, kwargs) if cache is not None and func in meta_cache.FRESH_OUTPUT_OPS else None
        if key is not None:
            r = cache.outputs(key)
        if r is None:
            with self._kernel_invocation(self.fake_mode):
                r = func(*args, **kwargs)
            if key is not None:
                cache.remember(key, r)
        wrap = self._wrap
        if isinstance(r, torch.Tensor):
            return r if isinstance(r, FakeTensor) else wrap(r, device)
        if isinstance(r, (list, tuple)):
            return type(r)(t if isinstance(t, FakeTensor) or not isinstance(t, torch.Tensor) else wrap(t, device)
                           for t in r)
        return None

    def _fakeify(self, func, args: tuple, kwargs: dict) -> tuple[tuple, dict, torch.Tensor | None]:
        """Real CPU tensors that meet CUDA tensors become fake too (else FakeTensorMode would
        constant-fold the op for real, on a CUDA device that does not exist).

        Returns the converted args, kwargs, and the real tensor an in-place/out= op writes to
        (so the user's real CPU tensor is what the op returns, as in eager mode)."""
        from_tensor = self.fake_mode.from_tensor
        real_self = None

        def conv(a):
            if isinstance(a, torch.Tensor) and not isinstance(a, FakeTensor):
                return from_tensor(a)
            if isinstance(a, (list, tuple)) and any(isinstance(b, torch.Tensor) and not isinstance(b, FakeTensor)
                                                     for b in a):
                return type(a)(conv(b) for b in a)
            return a

        schema_args = func._schema.arguments
        if args and isinstance(args[0], torch.Tensor) and not isinstance(args[0], FakeTensor) \
                and schema_args and schema_args[0].alias_info is not None and schema_args[0].alias_info.is_write:
            real_self = args[0]
        out_kw = kwargs.get("out")
        if isinstance(out_kw, torch.Tensor) and not isinstance(out_kw, FakeTensor):
            real_self = out_kw
        return tuple(conv(a) for a in args), {k: conv(v) for k, v in kwargs.items()}, real_self

    @staticmethod
    def _realize_cpu_outputs(out: Any, real_self: torch.Tensor | None, pin: bool = False) -> Any:
        """Outputs on the CPU (D2H copies) must be real tensors: the script may use them on the
        CPU. Their values are placeholders (zeros), as the GPU computed nothing. `pin`: in pinned
        host memory (a non-blocking `.to("cpu")`, _pins_output)."""
        if real_self is not None:
            return real_self

        def real(t):
            if isinstance(t, FakeTensor) and t.device.type == "cpu":
                r = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cpu",
                                        pin_memory=pin)
                r.zero_()
                return r
            return t

        if isinstance(out, torch.Tensor):
            return real(out)
        if isinstance(out, (list, tuple)):
            return type(out)(real(t) for t in out)
        return out

    @staticmethod
    def _track_memory(out: Any, name: str = "", args: tuple = (), kwargs: dict | None = None) -> None:
        """Allocate the block of every new CUDA storage the op returned (freed when the storage
        dies), then what the op allocates besides its outputs (GEMM/cuDNN workspaces)."""
        kwargs = kwargs or {}
        cuda_outs = [t for t in tensors_in(out) if _tensor_device(t).type == "cuda"]
        if not cuda_outs:
            return
        device = _tensor_device(cuda_outs[0]).index or 0
        model = allocator.model(device)
        op_allocations.before_outputs(name, args, kwargs, device)
        shared = op_allocations.inplace_source(name, args, kwargs, out)
        for t in op_allocations.allocation_order(name, out, cuda_outs):
            s = t.untyped_storage()
            if getattr(s, "_phantora_tracked", False):
                continue
            s._phantora_tracked = True
            if shared is not None and model.share_storage(s, shared):
                continue
            allocator.model(_tensor_device(t).index or 0).track_storage(s, s.nbytes())
        op_allocations.after_outputs(name, args, kwargs, device)
        op_allocations.note_op(name, args, kwargs, out, device)

    def _device_of(self, args: tuple, kwargs: dict, out: Any) -> int:
        for t in tensors_in(out):
            dev = _tensor_device(t)
            if dev.type == "cuda":
                return dev.index or 0
        for t in tensors_in(args):
            dev = _tensor_device(t)
            if dev.type == "cuda":
                return dev.index or 0
        return self.st.current_device

    @staticmethod
    def _kind(name: str, func, args: tuple, kwargs: dict, out: Any) -> OpKind:
        if name in _MEMSET_OPS or (name == "aten::fill_" and len(args) > 1 and not isinstance(args[1], torch.Tensor)
                                   and args[1] == 0):
            return OpKind.MEMSET
        if name in ("aten::_to_copy", "aten::copy_", "aten::to", "aten::_copy_from", "aten::_copy_from_and_resize"):
            devices = {t.device.type for t in tensors_in(args)} | {t.device.type for t in tensors_in(out)}
            if "cpu" in devices and "cuda" in devices:
                return OpKind.MEMCPY
            tensors = list(tensors_in(args)) + list(tensors_in(out))
            if name == "aten::copy_" and len(tensors) >= 2:
                a, b = tensors[0], tensors[1]
                if a.dtype == b.dtype and a.is_contiguous() and b.is_contiguous():
                    return OpKind.MEMCPY  # same-dtype contiguous D2D copy -> cudaMemcpyAsync
        if name in _VIEW_OPS:
            return OpKind.HOST
        return OpKind.COMPUTE

    @staticmethod
    def _copy_blocks_host(func, args, kwargs, targs, touts) -> bool:
        """Whether a host<->device copy blocks the host, as cudaMemcpyAsync does."""
        non_blocking = bool(kwargs.get("non_blocking", False))
        if func is aten.copy_.default and len(args) > 2:
            non_blocking = bool(args[2])
        srcs = [a for a in targs if isinstance(a, TensorArg)]
        if func is aten.copy_.default and len(srcs) >= 2:
            dst, src = srcs[0], srcs[1]
        else:
            src = srcs[0] if srcs else None
            dst = touts[0] if touts else None
        if src is None or dst is None or src.numel == 0 or dst.numel == 0:
            return False  # an empty copy returns before any CUDA call (BLOOM makes 32 per step)
        if dst.device == CPU_DEVICE:  # D2H
            return not (non_blocking and dst.pinned)
        if src.device == CPU_DEVICE:  # H2D: pageable sources are staged synchronously
            return not (non_blocking and src.pinned)
        return False

    # ---- data-dependent reads ----
    def _scalar_read(self, t: torch.Tensor, tls=None):
        """`.item()` on a fake CUDA tensor: a 1-element D2H copy, a sync, and a placeholder."""
        st = self.st
        device = t.device.index or 0
        stream = st.stream_of(device)
        if tls is None and self._rec is not None:  # from the CUDA-key kernel (backend_kernels.py)
            tls = self._rec.tls()
        ext, depth = self._record_id(tls, "aten::_local_scalar_dense")
        start = st.clock.now_ns
        src = TensorArg(tuple(t.shape), tuple(t.stride()), _dtype_name(t.dtype), device)
        dst = TensorArg(tuple(t.shape), tuple(t.stride()), src.dtype, CPU_DEVICE, True)
        op = OpCall(st.config.rank, ext, "aten::_local_scalar_dense", (src,), {}, (dst,), st.tid(), start,
                    start, stream, device, OpKind.MEMCPY, depth=depth)
        self._issue(op, self.costs.estimate(op), hostcost.DISPATCH_NS_VIEW)
        if _DIST_PENDING:
            _dist_consume((t,), stream, device)
        st.channel.send(op)
        host_sync(SyncKind.STREAM, stream, device, ext)
        real = values.scalar(t)
        if real is not None:
            return real
        st.placeholders_used += 1
        if t.dtype == torch.bool:
            return st.config.placeholder_bool
        if t.dtype.is_floating_point or t.dtype.is_complex:
            return st.config.placeholder_float
        return st.config.placeholder_int

    # ---- autograd ----
    def _track_autograd(self, tid: int) -> None:
        """Group backward ops by the autograd node that runs them (profiler's evaluate_function spans)."""
        node = torch._C._current_autograd_node() if tid != 0 else None
        cur = self._autograd_open
        if cur is not None and (node is None or node is not cur[0]):
            self._close_autograd()
        if node is not None and (self._autograd_open is None):
            st = self.st
            self._autograd_open = (node, node.name(), node._sequence_nr(), st.clock.now_ns,
                                   st.next_external_id() if self._rec is None else -1, tid)
            st.clock.advance(hostcost.AUTOGRAD_NODE_NS)

    def _close_autograd(self) -> None:
        cur = self._autograd_open
        if cur is None:
            return
        self._autograd_open = None
        if self._rec is not None:
            return  # the recorder has the node's own records (evaluate_function and the node)
        st = self.st
        _, name, seq, start, ext, tid = cur
        st.channel.send(AutogradSpan(st.config.rank, name, tid, start, st.clock.now_ns, seq, ext))

    def flush(self) -> None:
        self._close_autograd()

    # ---- errors and estimates ----
    def _data_dependent_exact(self, real: Any, args: tuple, kwargs: dict):
        """The fake outputs of a data-dependent op whose CUDA inputs all have real values
        (small tensors, values.py), shaped as its CPU result `real` (`idx[idx > 500]`,
        `nonzero`, `unique` of a small index tensor); `values.store_result` then gives them
        those values. None without a CUDA input."""
        device = next((t.device for t in tensors_in((args, kwargs))
                       if isinstance(t, torch.Tensor) and t.device.type == "cuda"), None)
        if device is None:
            return None
        fake_mode = self.fake_mode

        def like(r: Any) -> Any:
            if not isinstance(r, torch.Tensor):
                return r
            with fake_mode:
                return torch.empty_strided(tuple(r.shape), tuple(r.stride()), dtype=r.dtype, device=device)

        if isinstance(real, (tuple, list)):
            return type(real)(like(r) for r in real)
        return like(real)

    def _data_dependent_estimate(self, func, name: str, args: tuple, kwargs: dict, orig_args: tuple = ()):
        """Ops whose output size depends on the data (nonzero, masked_select, unique, boolean
        indexing): the simulation has no data, so it continues with the upper bound (every
        element selected / distinct) and says so once per op. bincount takes `minlength` bins
        (every value assumed below it: a router's expert ids), else one per element. CTC loss
        sizes its work by the longest target (`ctc_loss_outputs`)."""
        if name == "aten::_ctc_loss":
            return ctc_loss_outputs(self, args, kwargs, orig_args or args)
        if name in _PACKED_SEQUENCE_OPS:
            packed = packed_sequence_outputs(self, name, args, kwargs, orig_args or args)
            if packed is not None:
                return packed
        x = args[0]
        n = x.numel()
        if name not in self.unsupported:
            self.unsupported[name] = "upper-bound estimate"
            how = ("minlength bins, the elements spread evenly over them (balanced routing)"
                   if name == "aten::bincount" else f"the upper bound ({n} elements)")
            log.warning("%s(%s) has a data-dependent output size; continuing with %s", name,
                        ", ".join(_describe(a) for a in args), how)
        with self.fake_mode:
            if name in ("aten::nonzero", "aten::argwhere"):
                return torch.empty((n, x.dim()), dtype=torch.int64, device=x.device)
            if name == "aten::nonzero_static":
                return func(*args, **kwargs)
            if name in ("aten::masked_select",):
                return torch.empty((n,), dtype=x.dtype, device=x.device)
            if name == "aten::index" and len(args) > 1:
                mask = next((i for i in args[1] if isinstance(i, torch.Tensor) and i.dtype == torch.bool), None)
                m = mask.numel() if mask is not None else n
                rest = tuple(x.shape[mask.dim():]) if mask is not None else ()
                return torch.empty((m, *rest), dtype=x.dtype, device=x.device)
            if name == "aten::bincount":
                # bins: minlength (the number of experts of a router), else one per element
                weights = args[1] if len(args) > 1 else kwargs.get("weights")
                minlength = int(args[2] if len(args) > 2 else kwargs.get("minlength", 0) or 0)
                dtype = weights.dtype if isinstance(weights, torch.Tensor) else torch.int64
                return torch.empty((minlength if minlength > 0 else max(n, 1),), dtype=dtype, device=x.device)
            if name in ("aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "aten::_unique"):
                flat = torch.empty((n,), dtype=x.dtype, device=x.device)
                inv = torch.empty(tuple(x.shape), dtype=torch.int64, device=x.device)
                counts = torch.empty((n,), dtype=torch.int64, device=x.device)
                return (flat, inv, counts) if name != "aten::_unique" else (flat, inv)
        raise UnsupportedOpError(
            f"phantora-prof cannot simulate {name}({', '.join(_describe(a) for a in args)}): its output size "
            "depends on the tensor's values, which a simulated GPU does not have")

    def _unsupported(self, name: str, args: tuple, kwargs: dict, exc: Exception, func=None) -> Exception:
        """The error for an op FakeTensor could not run: without a shape function (Meta kernel or
        registered fake), or with one that refused these arguments (torch's Meta kernel for
        `_grouped_mm` accepted bf16 only, where a CUDA build ran fp32 through its fallback)."""
        shapes = ", ".join(_describe(a) for a in args)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if func is not None and _has_shape_function(func):
            why = ("The op's shape function (its Meta kernel or registered fake) refused these arguments; a CUDA "
                   "build's kernel may accept them (its checks can differ: please report it). To go on, register "
                   "a fake that accepts them")
        else:
            why = "The op has no fake (meta) implementation: register one"
        return UnsupportedOpError(
            f"phantora-prof cannot simulate {name}({shapes}): {type(exc).__name__}: {reason[:300]}. {why} with "
            "torch.library.register_fake (its GPU time can then be given with --op-cost NAME=TIME), or avoid the "
            "op on CUDA tensors.")


def _sparse_refused(name: str) -> UnsupportedOpError:
    """The one error for any op that would put a sparse tensor on the simulated GPU."""
    return UnsupportedOpError(
        f"phantora-prof cannot simulate {name}: it makes a sparse tensor on the GPU, and the simulated "
        "GPU holds dense (strided) tensors only (its memory, values and kernel times are modelled for "
        "those). Keep sparse tensors on the CPU, or use dense ops (index_add_, scatter_add_) on CUDA.")


def _has_sparse(out: Any) -> bool:
    """Whether an op's output is (or holds) a tensor of a sparse layout (COO, CSR, ...)."""
    if isinstance(out, torch.Tensor):
        return out.layout is not torch.strided
    if isinstance(out, (tuple, list)):
        return any(isinstance(o, torch.Tensor) and o.layout is not torch.strided for o in out)
    return False


def _nondeterministic_alert(exc: Exception) -> bool:
    """Whether `exc` is torch's refusal of an op under `torch.use_deterministic_algorithms(True)`
    (`alertNotDeterministic`, raised by the shape function with the CUDA kernel's name, e.g.
    `_histc_cuda`): the RuntimeError a GPU raises, which the script may catch. It was wrapped
    as an UnsupportedOpError, which `except RuntimeError:` does not catch."""
    return isinstance(exc, RuntimeError) and "does not have a deterministic implementation" in str(exc)


def ctc_loss_outputs(mode: CaptureMode, args: tuple, kwargs: dict, orig_args: tuple) -> tuple:
    """`aten::_ctc_loss`'s outputs as its CUDA kernel sizes them: the negative log-likelihood per
    sequence and log_alpha of (batch, input frames, 2 * longest target + 1). With 1-D
    (concatenated) targets the longest target comes from the target lengths, which the CUDA
    kernel copies to the host; where the simulation has no values for them, the upper bound
    (all targets in one sequence) with a warning."""
    log_probs, targets = args[0], args[1]
    lengths = orig_args[3] if len(orig_args) > 3 else kwargs.get("target_lengths")
    known = cuda_queries.known_ints(lengths) if targets.dim() == 1 else []
    if known is None:
        known = [targets.numel()]
        if "aten::_ctc_loss" not in mode.unsupported:
            mode.unsupported["aten::_ctc_loss"] = "upper-bound estimate"
            log.warning("aten::_ctc_loss: the target lengths have no values in the simulation; its work "
                        "is sized for one target of all %d labels (the upper bound)", known[0])
    with mode.fake_mode:  # the int-list overload's shape function, with the lengths now known
        return cuda_fakes.ctc_loss(log_probs, targets, None, known)


_PACKED_SEQUENCE_OPS = frozenset(("aten::_pack_padded_sequence", "aten::_pad_packed_sequence"))


def packed_sequence_outputs(mode: CaptureMode, name: str, args: tuple, kwargs: dict, orig_args: tuple):
    """`nn.utils.rnn.pack_padded_sequence` / `pad_packed_sequence` on a GPU tensor: their sizes
    follow the sequence lengths (`lengths` must be a CPU tensor on CUDA too, so they have values)
    or the packed batch sizes (a CPU tensor the packing made), not the data. The packed data
    lives on the GPU (ATen copies the valid steps out with slices and a cat); `batch_sizes` and
    the padded lengths are CPU tensors with their real values, as a CUDA build returns them.
    None when the lengths have no values (the caller then reports the op)."""
    bound = dict(zip(("input", "lengths", "batch_first") if name == "aten::_pack_padded_sequence" else
                     ("data", "batch_sizes", "batch_first", "padding_value", "total_length"), orig_args))
    bound.update(kwargs)
    if name == "aten::_pack_padded_sequence":
        x, lengths = args[0], cuda_queries.known_ints(bound.get("lengths"))
        if not lengths or any(n <= 0 for n in lengths):
            return None
        steps = max(lengths)
        batch_sizes = torch.tensor([sum(1 for n in lengths if n > t) for t in range(steps)], dtype=torch.int64)
        with mode.fake_mode:
            data = torch.empty((sum(lengths), *x.shape[2:]), dtype=x.dtype, device=x.device)
        return data, batch_sizes
    data, sizes = args[0], cuda_queries.known_ints(bound.get("batch_sizes"))
    if not sizes:
        return None
    total = int(bound.get("total_length", -1) or -1)
    steps, batch = max(len(sizes), total), sizes[0]
    lengths = torch.tensor([sum(1 for b in sizes if b > i) for i in range(batch)], dtype=torch.int64)
    shape = (batch, steps) if bool(bound.get("batch_first", False)) else (steps, batch)
    with mode.fake_mode:
        padded = torch.empty((*shape, *data.shape[1:]), dtype=data.dtype, device=data.device)
    return padded, lengths


if op_cpu.ACTIVE is not None:  # PHANTORA_OP_CPU: the capture mode's CPU per aten op
    CaptureMode.__torch_dispatch__ = op_cpu.ACTIVE.wrap(CaptureMode.__torch_dispatch__)


class _ItSelf:
    """A `__deepcopy__` set on an instance (called with the memo alone): the object itself."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self, memo: dict) -> Any:
        return self.obj


# ---- argument conversion ----

def _to_arg(a: Any):
    if isinstance(a, torch.Tensor):
        dev = _tensor_device(a)
        if dev.type == "cuda":
            return TensorArg(tuple(a.shape), tuple(a.stride()), _dtype_name(a.dtype), dev.index or 0)
        return TensorArg(tuple(a.shape), tuple(a.stride()) if a.layout == torch.strided else (),
                         _dtype_name(a.dtype), CPU_DEVICE, pinned.is_marked(a))
    if isinstance(a, (list, tuple)):
        if a and all(isinstance(b, (int, float, bool)) for b in a):
            return tuple(a)
        return tuple(_to_arg(b) for b in a)
    if isinstance(a, (int, float, bool, str)) or a is None:
        return a
    if isinstance(a, torch.dtype):
        return _dtype_name(a)
    if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
        return str(a)
    return str(a)


_NAMESPACES: dict = {}


def _namespace(func) -> str:
    """`func.namespace` (a Python property in torch), remembered per op."""
    r = _NAMESPACES.get(func)
    if r is None:
        r = _NAMESPACES[func] = func.namespace
    return r


_OTHER_SUBCLASS: dict = {}


def _pins_output(args: tuple, kwargs: dict) -> bool:
    """Whether a CUDA build's `_to_copy(*args, **kwargs)` returns pinned host memory: a
    non-blocking copy of a strided CUDA tensor to the CPU (ATen's _to_copy pins its output then,
    so that the DtoH copy can run asynchronously at the pinned rate). Asked for _to_copy only:
    the caller tests the op first, off every other op's path."""
    if not kwargs.get("non_blocking", False):
        return False
    dev = kwargs.get("device")
    src = args[0] if args else None
    return (isinstance(src, torch.Tensor) and src.device.type == "cuda" and dev is not None
            and torch.device(dev).type == "cpu" and kwargs.get("layout") in (None, torch.strided))


def _has_other_subclass(types: tuple) -> bool:
    """Whether a dispatch's tensor types include a subclass other than FakeTensor / Parameter
    (DTensor, ...), which dispatches itself. Remembered per types tuple: a step asks this
    thousands of times for the same one or two tuples."""
    r = _OTHER_SUBCLASS.get(types) if type(types) is tuple else None
    if r is None:
        r = any(not issubclass(t, FakeTensor) and t is not torch.Tensor and
                not issubclass(t, torch.nn.Parameter) for t in types)
        if type(types) is tuple:
            _OTHER_SUBCLASS[types] = r
    return r


_NOT_SPECIAL = object()


class _Route:
    """What _cuda_op asks of an op that a run does not change, asked once per op object: looked
    up by id (the route holds the op, so its id is not reused), as an OpOverload's __hash__ is
    Python and dict lookups keyed by the op ran it ~9 times per captured op (issue #18)."""

    __slots__ = ("func", "name", "namespace", "decompose", "body", "query", "fast", "returns_nothing", "conv",
                 "python_cuda", "indexing", "special")

    def __init__(self, func) -> None:
        self.func = func
        self.name = func._schema.name  # "aten::mm"
        self.namespace = _namespace(func)
        # an op with a CompositeImplicitAutograd kernel (it decomposes into other ops) that a
        # CUDA build does not run as its own kernel: decomposed
        self.decompose = (torch._C._dispatch_has_kernel_for_dispatch_key(
            func.name(), torch._C.DispatchKey.CompositeImplicitAutograd) and not cuda_dispatch.has_cuda_kernel(func))
        self.body = cuda_dispatch.composite_body_key(func)
        self.query = cuda_queries.ANSWERS.get(func)
        self.fast = func in _FAST_OPS
        # the schema returns nothing (`-> ()`: the in-place foreach ops, the fused optimizers): such
        # an op on fake tensors has no output to make, and FakeTensorMode's dispatch (which hashes
        # every tensor of its lists for its cache: ~1 ms for a 148-parameter `_fused_adamw_` here)
        # is skipped
        self.returns_nothing = not func._schema.returns
        self.conv = func in conv_layout.CONV_OPS
        # a non-ATen op whose CUDA kernel is torch's own Python (FSDP2's copy-in / copy-out ops)
        self.python_cuda = cuda_dispatch.python_cuda_kernel(func)
        self.indexing = any(func is f for f in _INDEXING)
        self.special = (self.decompose or self.body is not None or self.query is not None or self.python_cuda
                        or self.namespace == "_c10d_functional" or self.indexing
                        or any(func is f for f in (_LOCAL_SCALAR_DENSE, _ROLL, _EQUAL, _GROUPED_MM, _RECORD_STREAM,
                                                   _IS_PINNED)))


_ROUTES: dict[int, _Route] = {}


def _route(func) -> _Route:
    r = _ROUTES[id(func)] = _Route(func)
    return r


def _roll_args(args: tuple, kwargs: dict) -> tuple:
    x = args[0]
    shifts = args[1] if len(args) > 1 else kwargs.get("shifts")
    dims = args[2] if len(args) > 2 else kwargs.get("dims", ())
    return x, list(shifts), list(dims or ())


def _roll_parts(args: tuple, kwargs: dict):
    """What roll_cuda dispatches for a roll it does not do in one kernel (roll_common), as a
    function to run under the capture mode; None for a roll of one dim. Several dims: the
    first rolled, then the rest (nested aten::roll calls, each with its own output and kernel);
    no dims: the flattened tensor rolled and viewed back."""
    x, shifts, dims = _roll_args(args, kwargs)
    if len(dims) > 1 and len(shifts) == len(dims):
        return lambda: _ROLL(_ROLL(x, shifts[:1], dims[:1]), shifts[1:], dims[1:])
    if not dims and len(shifts) == 1 and x.dim() != 1:
        def flat():
            c = x if x.is_contiguous() else x.contiguous()
            return _ROLL(c.view(c.numel()), shifts, [0]).view(x.shape)
        return flat
    return None


def _cuda_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """`torch.equal` as ATen's cuda_equal runs it: False for other sizes, True for an empty tensor
    or the same view of one storage, else `eq(a, b).all()` read back to the host (a sync; the
    answer from the tensors' values where they are known, else the placeholder)."""
    if a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    if a.untyped_storage()._cdata == b.untyped_storage()._cdata and a.storage_offset() == b.storage_offset() \
            and a.dtype == b.dtype and a.stride() == b.stride() and a.is_conj() == b.is_conj() \
            and a.is_neg() == b.is_neg():
        return True
    return bool(torch.eq(a, b).all().item())


def _has_shape_function(func) -> bool:
    """Whether `func` has a Meta kernel (torch's own, or one torch.library.register_fake installed)."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), torch._C.DispatchKey.Meta)
    except (AttributeError, RuntimeError):
        return False


def _mixed_devices(exc: Exception) -> str | None:
    """FakeTensorMode's complaint about tensors on two devices, in the words CUDA torch uses."""
    import re

    text = str(exc)
    m = re.search(r"(?:found two different devices|found at least two devices,?) (\S+?),? (?:and )?(\S+?)[!,\s]", text + " ")
    if type(exc).__name__ != "FakeTensorDeviceMismatchError" and m is None:
        return None
    if m is None:
        return text.strip().splitlines()[0]
    return (f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{m.group(1)} and {m.group(2).rstrip('!')}!")


def _accumulate_arg(args: tuple, kwargs: dict) -> Any:
    """The `accumulate` argument of an index_put call (index_put / index_put_ /
    _index_put_impl_: the fourth)."""
    return args[3] if len(args) > 3 else kwargs.get("accumulate", False)


def _forward_sequence_nr(tid: int, args: tuple) -> int:
    """The autograd sequence number of the node this forward op created (-1 when none).

    Autograd creates the op's backward node, taking the next sequence number, before it
    redispatches to us; the profiler records that number on the op and links it to the
    backward node's evaluation with a `fwdbwd` flow."""
    if tid != 0 or not torch.is_grad_enabled():
        return -1
    for a in args:
        if isinstance(a, torch.Tensor) and a.requires_grad:
            return torch._C._autograd._get_sequence_nr() - 1
    return -1


# Ops on CPU tensors that read only the rows their indices pick: what they move is their
# output's size, whatever the size of the tensor they index (a DataLoader's TensorDataset).
_GATHERS = frozenset({"aten::index.Tensor", "aten::index_select", "aten::gather", "aten::embedding", "aten::take",
                      "aten::_unsafe_index.Tensor"})


def _cpu_bytes(func: Any, args: tuple, out: Any) -> int:
    """Bytes an op on CPU tensors reads and writes, for its host time (hostcost.cpu_op_ns).

    A view (`x[i]`, `narrow`, `t()`, `view`) moves nothing: it makes a tensor header over the
    same storage. A gather reads as much of the indexed tensor as it writes. Anything else
    reads its inputs and writes its outputs, each by its own (view's) size."""
    if getattr(func, "is_view", False):
        return 0
    outs = list(tensors_in(out))
    n = sum(t.numel() * t.element_size() for t in outs)
    ins = list(tensors_in(args))
    if func.name() in _GATHERS and ins:
        # the indexed tensor (first input) counts as what was read from it: the output's size
        return 2 * n + sum(t.numel() * t.element_size() for t in ins[1:])
    return n + sum(t.numel() * t.element_size() for t in ins)


def _outputs(out: Any) -> tuple:
    return tuple(_to_arg(t) for t in tensors_in(out))


def _describe(a: Any) -> str:
    """An argument for an error message: a tensor as dtype, shape and device; a long list by its
    first items and its length (a fused optimizer's lists hold every parameter)."""
    if isinstance(a, torch.Tensor):
        return f"{a.dtype}{list(a.shape)}@{a.device}"
    if isinstance(a, (list, tuple)):
        if len(a) > 4:
            return "[" + ", ".join(_describe(b) for b in a[:2]) + f", ... ({len(a)} in all)]"
        return "[" + ", ".join(_describe(b) for b in a) + "]"
    return repr(a)
