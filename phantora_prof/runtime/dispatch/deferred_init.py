"""Large CPU tensors that a script initialises and then moves to the GPU hold no data (#17).

A model built on the CPU and then moved (`GPT(...).to("cuda")`, an HF model from its config)
holds real float32 weights on the host until `.to()` replaces them: 124M parameters are
~500 MB per rank, a 7B model ~28 GB, which no 24 GB machine holds even for one rank. On a
GPU machine that is what really happens; in the simulation the GPU copies carry no data,
so the host copies' values are never needed unless the program reads them on the CPU.

So a large CPU storage (more than `MIN_BYTES`) made by `empty` (and its variants) or by a
random factory (`randn`, `rand`, `normal` from scalars) is *pending*: its pages are left
untouched (the allocator maps them lazily), and the in-place ops that only write it from
scalars and its own contents (`uniform_`, `normal_`, `zero_`, `fill_`, trunc_normal_'s
`erfinv_`, `mul_`, `add_`, `clamp_`, HF's `weight[padding_idx].zero_()` on a view, ...) are
recorded with the view they wrote instead of being run. Any other use of the storage on the
CPU (an op that reads it, `.numpy()`, `.tolist()`, `data_ptr()`, pickling, `torch.save`,
shared memory) first *materialises* it: the recorded ops are replayed in order, random ones
from the generator state each one started from, so the values are bit for bit those of an
eager run. Copies to the simulated GPU do not read it (large CUDA storages have no values,
runtime/dispatch/values.py), and a storage that dies pending never costs its memory.

What stays exact: every op is still recorded in the trace and charged its host time when the
script calls it (the trace equals the one without deferral: tests/test_deferred_init.py);
random ops still run, on a scratch tensor of the target's geometry mapped for the op and
unmapped after it (a random factory: its own output, dropped), so the random streams advance
as they would and later draws are unchanged. The cost: a rank's peak host memory still holds
the largest single tensor once, while it is drawn. Factories that fill with a constant
(`zeros`, `ones`, `full`) run as usual: their CPU kernels' nested ops are recorded in the
trace, which a deferred call would leave out. What can go wrong: C++ code that reads a
pending tensor's memory without a dispatcher call (an extension given `data_ptr()` is
covered; one that takes the tensor itself is not) would read zeros.
`PHANTORA_EAGER_HOST_INIT=1` turns the whole mechanism off.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import mmap
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from phantora_prof.runtime.dispatch import values

log = logging.getLogger(__name__)

ENV_OFF = "PHANTORA_EAGER_HOST_INIT"
#: storages above this size are deferred; at most this size, a storage may carry real values
#: into a simulated CUDA tensor (values.INDEX_MAX_BYTES), which needs its data
MIN_BYTES = max(values.INDEX_MAX_BYTES, values.MAX_BYTES)
#: a tensor argument of a deferred op other than its target (a wrapped Python scalar, a
#: 0-dim fill value) is copied when the op is recorded, up to this size
_SMALL_OPERAND_BYTES = 64

#: factory ops whose output starts pending: uninitialised ones, and random ones with no tensor
#: argument (their call is recorded and replayed from the generator state it started from)
_UNINITIALISED = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}
_FACTORIES = {"rand", "randn", "normal"}
#: in-place ops whose result depends only on their target's contents, scalars and a generator
_DEFERRABLE_IN_PLACE = {
    "uniform_", "normal_", "random_", "bernoulli_", "exponential_", "geometric_", "log_normal_",
    "cauchy_", "fill_", "zero_", "erfinv_", "mul_", "div_", "add_", "sub_", "clamp_", "clamp_min_",
    "clamp_max_", "sqrt_", "abs_", "neg_", "exp_", "log_", "pow_", "tanh_", "sigmoid_", "sign_",
    "floor_", "ceil_", "round_", "trunc_", "fmod_", "remainder_", "reciprocal_", "rsqrt_",
}
_RANDOM = {"uniform_", "normal_", "random_", "bernoulli_", "exponential_", "geometric_", "log_normal_",
           "cauchy_", "rand", "randn", "normal"}
#: ops that read no data of their tensors (views, which share the storage, are known by schema)
_METADATA = {"sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "numel", "dim",
             "is_contiguous", "is_same_size", "_has_compatible_shallow_copy_type", "empty_like", "new_empty",
             "new_empty_strided"}


@dataclass
class _Step:
    """One deferred op: `func` applied to the view (size, stride, offset) of the storage, or a
    factory whose output is copied into it; `rng` the generator and its state before the op."""
    func: Any
    dtype: torch.dtype
    size: tuple
    stride: tuple
    offset: int
    args: tuple
    kwargs: dict
    factory: bool
    rng: tuple[torch.Generator, torch.Tensor] | None


@dataclass
class _Pending:
    ref: StorageWeakRef
    steps: list[_Step]


_pending: dict[int, _Pending] = {}  # StorageImpl address -> its recorded ops
_enabled = False
_quiet: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
_prune_at = 64

Redispatch = Callable[[Any, Any, tuple, dict], Any]  # (tls, func, args, kwargs) -> the op run for real


def install(quiet: Callable[[], contextlib.AbstractContextManager], host: Any = None) -> None:
    """Turn deferral on (unless PHANTORA_EAGER_HOST_INIT=1). `quiet()` is the capture mode's
    context for the simulator's own ops (no record, no host time, no mode): replays run in it.
    `host` is the rank's host model (runtime/host/pyhost.py), or None: the readers patched here
    must count the Python under them as the unpatched ones do."""
    global _enabled, _quiet
    if os.environ.get(ENV_OFF) == "1":
        return
    _enabled = True
    _quiet = quiet
    _patch_readers(host)


def enabled() -> bool:
    return _enabled


def run_cpu_op(tls: Any, func, args: tuple, kwargs: dict, redispatch: Redispatch) -> Any:
    """A CPU op from the capture mode; `redispatch(tls, func, args, kwargs)` runs it for real
    (recorded as the script's op). Deferred, run, or run after materialising the pending
    storages it uses."""
    base = func._schema.name[6:] if func._schema.name.startswith("aten::") else None
    if _pending:
        targets = _pending_storages(args, kwargs)
        if targets:
            if base in _DEFERRABLE_IN_PLACE and _defer_in_place(tls, func, base, args, kwargs, targets, redispatch):
                return args[0]
            if not (func.is_view or base in _METADATA):
                log.debug("%s reads %d pending host storage(s): materialised", func, len(targets))
                for key in targets:
                    _materialise(key, args, kwargs)
    if base in _UNINITIALISED:
        out = redispatch(tls, func, args, kwargs)
        if _plain_cpu(out) and out.untyped_storage().nbytes() > MIN_BYTES:
            _register(out, [])
        return out
    if base in _FACTORIES:
        return _factory(tls, func, base, args, kwargs, redispatch)
    return redispatch(tls, func, args, kwargs)


def materialise_all() -> None:
    """Give every pending storage its values (before a torch.save that may write them)."""
    for key in list(_pending):
        entry = _pending.pop(key, None)
        if entry is not None and not entry.ref.expired():
            _replay(torch.UntypedStorage._new_with_weak_ptr(entry.ref.cdata), entry.steps)


def materialise(t: torch.Tensor) -> None:
    """Give `t`'s storage its values if it is pending (a reader outside the dispatcher)."""
    if not _pending or t.device.type != "cpu" or t.layout != torch.strided:
        return
    storage = t.untyped_storage()
    entry = _pending.pop(storage._cdata, None)
    if entry is not None:
        log.debug("a pending host storage of %d bytes read outside the dispatcher: materialised", storage.nbytes())
        _replay(storage, entry.steps)


def pending_count() -> int:
    """Storages alive and still pending (tests, the summary)."""
    return sum(not e.ref.expired() for e in _pending.values())


# ---------------------------------------------------------------------------------------


def _plain_cpu(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and type(t) in (torch.Tensor, torch.nn.Parameter) \
        and t.device.type == "cpu" and t.layout == torch.strided and not t.is_quantized


def _tensors(args: tuple, kwargs: dict) -> Iterator[torch.Tensor]:
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    yield b


def _pending_storages(args: tuple, kwargs: dict) -> list[int]:
    found = []
    for a in _tensors(args, kwargs):
        if a.device.type == "cpu" and a.layout == torch.strided:
            key = a.untyped_storage()._cdata
            if key in _pending and key not in found:
                found.append(key)
    return found


def _generator(kwargs: dict) -> torch.Generator:
    gen = kwargs.get("generator")
    return gen if gen is not None else torch.default_generator


def _defer_in_place(tls, func, base: str, args: tuple, kwargs: dict, targets: list[int],
                    redispatch: Redispatch) -> bool:
    """Record `func` on its target's pending storage instead of running it, if it writes only
    that storage, from scalars (small tensor operands are copied now) and its own contents.
    The bookkeeping is the simulator's (quiet); a random op runs for real on a scratch tensor,
    recorded as the op itself would have been."""
    target = args[0] if args else None
    if not _plain_cpu(target) or len(targets) != 1 or target.untyped_storage()._cdata != targets[0]:
        return False
    if any(isinstance(v, torch.Tensor) for v in kwargs.values()):
        return False
    with _quiet():
        if torch._debug_has_internal_overlap(target) != 0:
            return False
        rest = []
        for a in args[1:]:
            if isinstance(a, torch.Tensor):
                if not _plain_cpu(a) or a.untyped_storage().nbytes() > _SMALL_OPERAND_BYTES:
                    return False
                a = a.clone()
            elif isinstance(a, (list, tuple)) and any(isinstance(b, torch.Tensor) for b in a):
                return False
            rest.append(a)
        rng = None
        if base in _RANDOM:
            gen = _generator(kwargs)
            rng = (gen, gen.get_state())
            scratch, buf = _scratch_like(target)
    if rng is not None:
        try:  # the random stream advances as the real op's would
            redispatch(tls, func, (scratch, *args[1:]), kwargs)
        finally:
            del scratch
            _unmap(buf)
    _pending[targets[0]].steps.append(_Step(func, target.dtype, tuple(target.shape), tuple(target.stride()),
                                            target.storage_offset(), tuple(rest), dict(kwargs), False, rng))
    return True


def _scratch_like(t: torch.Tensor) -> tuple[torch.Tensor, mmap.mmap]:
    """A tensor of `t`'s geometry on pages of its own, handed back to the OS by `_unmap`. From
    the heap, each random init's scratch would leave its pages resident for the next weight to
    reuse, and a model built layer by layer would end up as resident as without deferral."""
    extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0)
    nbytes = max(extent, 1) * t.element_size()
    buf = mmap.mmap(-1, nbytes)
    flat = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes).view(t.dtype)
    return flat.as_strided(tuple(t.shape), tuple(t.stride())), buf


def _unmap(buf: mmap.mmap) -> None:
    try:
        buf.close()
    except BufferError:  # a view of it is still referenced: unmapped when that goes
        pass


def _factory(tls, func, base: str, args: tuple, kwargs: dict, redispatch: Redispatch) -> Any:
    """A random factory with no tensor argument (`randn`, `rand`, `normal`): it runs as usual,
    so that it is recorded and its generator advances as in an eager run, but a large output is
    dropped and an uninitialised tensor of its geometry returned, its values recorded."""
    device = kwargs.get("device")
    if (device is not None and torch.device(device).type != "cpu") or kwargs.get("pin_memory") \
            or any(True for _ in _tensors(args, kwargs)):
        return redispatch(tls, func, args, kwargs)
    gen = _generator(kwargs)
    with _quiet():
        state = gen.get_state()
    real = redispatch(tls, func, args, kwargs)
    if not _plain_cpu(real) or real.untyped_storage().nbytes() <= MIN_BYTES:
        return real
    with _quiet():
        out = torch.empty_strided(tuple(real.shape), tuple(real.stride()), dtype=real.dtype)
    del real
    _register(out, [_Step(func, out.dtype, tuple(out.shape), tuple(out.stride()), 0, tuple(args), dict(kwargs),
                          True, (gen, state))])
    return out


def _register(t: torch.Tensor, steps: list[_Step]) -> None:
    global _prune_at
    storage = t.untyped_storage()
    _pending[storage._cdata] = _Pending(StorageWeakRef(storage), steps)
    if len(_pending) >= _prune_at:  # forget storages that died pending
        for key in [k for k, e in _pending.items() if e.ref.expired()]:
            del _pending[key]
        _prune_at = max(64, 2 * len(_pending))


def _materialise(key: int, args: tuple, kwargs: dict) -> None:
    entry = _pending.pop(key, None)
    if entry is None:
        return
    for a in _tensors(args, kwargs):
        if a.device.type == "cpu" and a.untyped_storage()._cdata == key:
            _replay(a.untyped_storage(), entry.steps)
            return


def _replay(storage: torch.UntypedStorage, steps: list[_Step]) -> None:
    """Run the recorded ops on the storage, in order, as the simulator's own work."""
    if not steps:
        return
    with _quiet(), torch.no_grad():
        for s in steps:
            view = torch.empty(0, dtype=s.dtype).set_(storage, s.offset, s.size, s.stride)
            saved = None
            if s.rng is not None:
                gen, state = s.rng
                saved = gen.get_state()
                gen.set_state(state)
            try:
                if s.factory:
                    view.copy_(s.func(*s.args, **s.kwargs))
                else:
                    s.func(view, *s.args, **s.kwargs)
            finally:
                if saved is not None:
                    s.rng[0].set_state(saved)


def _patch_readers(host: Any) -> None:
    """Readers of a CPU tensor's memory that bypass the dispatcher materialise it first. The
    wrapper is transparent to the host model: what the reader runs counts exactly when it
    would have counted called directly (from the program: yes; from torch.save's pickler,
    which runs as the simulator's: no)."""
    native = host.native if host is not None else None

    def reading(name: str) -> None:
        orig = getattr(torch.Tensor, name)

        @functools.wraps(orig)
        def wrapper(self, *args, **kwargs):
            if _pending:
                materialise(self)
            if native is None:
                return orig(self, *args, **kwargs)
            depth = native.user_begin()  # our frames, this wrapper's included
            native.user_end(max(depth - 1, 0))  # as the caller counts
            try:
                return orig(self, *args, **kwargs)
            finally:
                native.user_end(depth)

        setattr(torch.Tensor, name, wrapper)

    for name in ("numpy", "tolist", "__array__", "data_ptr", "share_memory_", "__reduce_ex__", "__dlpack__"):
        reading(name)
    save = torch.save

    @functools.wraps(save)
    def saving(*args, **kwargs):
        if _pending:
            materialise_all()
        return save(*args, **kwargs)

    torch.save = saving
    torch.serialization.save = saving
