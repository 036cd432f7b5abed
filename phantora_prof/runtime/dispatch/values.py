"""Real values for small device tensors (flags, counters, scalars), so control flow works.

Simulated CUDA tensors are fake (no data). That is what large tensors (activations,
weights, gradients) must be, but frameworks also keep small tensors on the GPU whose values
steer the program: an overflow flag built from `isfinite(grad.amax())`, all-reduced with
MAX and read with `.item()` (skip the optimizer step?), a step counter, a token count used
as a divisor, a zero-initialised accumulator. A fixed placeholder for `.item()` gets some of
these wrong (an integer placeholder of 1 read as "overflow" skips every optimizer step).

So every small CUDA storage (at most `MAX_BYTES`) gets a *shadow*: a real CPU storage of the
same size. Ops whose CUDA inputs all have shadows are also run on the CPU, on views of the
shadows with the same offsets, sizes and strides, so in-place ops and views behave as on the
GPU; their small outputs get shadows, and D2H copies and `.item()` return those values. An
op that writes a small tensor from data that does not exist (a large fake tensor, a
collective's remote contributions) leaves it without a shadow: `.item()` then returns the
documented placeholder, as before.

Approximations (documented, on purpose):
- Simulated data is assumed finite: `isfinite` of a tensor without values is all True,
  `isnan` / `isinf` all False, the AMP non-finite check finds nothing (a tensor with values
  is checked for real). A healthy training
  run has no overflow; the simulation follows that path.
- Small collectives (up to `MAX_BYTES`: all-reduce, broadcast, all-gather, reduce-scatter,
  all-to-all, gather, scatter, reduce) exchange the real values between the ranks through the
  coordinator (see `exchange`); point-to-point messages too (`p2p`). A mirrored member
  (`--live-ranks`) contributes its representative's values.
- `empty` gives zeros; random ops draw from the device's simulated CUDA generator (a CPU
  generator seeded as CUDA's is: the same values in every run; not the values a GPU's Philox
  generator would draw).
- Ops whose output size depends on the data (boolean indexing, nonzero, unique) get their
  exact size when their inputs have values (`data_dependent_result`), else the upper bound.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes

from phantora_prof.runtime.dispatch import deferred_values as deferred
from phantora_prof.runtime.dispatch.tensors import tensors_in

log = logging.getLogger(__name__)

# torch's factory functions as they are before the user's program runs: frameworks replace
# them for a while (DeepSpeed's zero.Init puts new tensors on the GPU and casts them to bf16)
_zeros, _full, _tensor = torch.zeros, torch.full, torch.tensor

MAX_BYTES = 16 * 1024  # storages up to this size get real values
# integer and bool storages up to this size too: index lists, token ids, masks and a router's
# expert choices (top-k indices, one-hot masks) steer data-dependent sizes (nonzero, where,
# boolean indexing), and computing them on the CPU is cheap
INDEX_MAX_BYTES = 1024 * 1024


def _limit(dtype: torch.dtype) -> int:
    return MAX_BYTES if dtype.is_floating_point or dtype.is_complex else INDEX_MAX_BYTES
_ATTR = "_phantora_value"
aten = torch.ops.aten

# unknown data is assumed finite: the op's answer without looking at the data
_ASSUME_TRUE = {"aten::isfinite"}
_ASSUME_FALSE = {"aten::isnan", "aten::isinf", "aten::isposinf", "aten::isneginf"}
# reductions of a mask over data that does not exist: no element is flagged (the same healthy-
# data assumption). Without it, rejection loops such as torch.nn.init.trunc_normal_'s
# `while mask.any(): resample` never end.
_UNKNOWN_REDUCE = {"aten::any": False, "aten::all": True}
# counts per bin of data that does not exist (a mixture-of-experts router's tokens per expert:
# torch.histc / torch.bincount(minlength=E) of the top-k choices): balanced, every bin gets
# its share of the elements. The same kind of assumption as above (a healthy run's routing is
# balanced by its auxiliary loss); it keeps `counts.tolist()` as split sizes consistent.
_BALANCED_COUNTS = {"aten::histc", "aten::bincount"}
# top-k choices over data that does not exist (a router's experts per token): balanced too,
# row r takes (r * k + j) % N for its j-th choice, so every expert gets the same share of
# tokens downstream (one_hot, ==, where, nonzero, index_add_ compute exact sizes from them)
_BALANCED_CHOICES = {"aten::topk"}
_SYNTHESIZED = _BALANCED_COUNTS | _BALANCED_CHOICES
# ops answered without the data (or with made-up data) whatever their size
_SPECIAL = _ASSUME_TRUE | _ASSUME_FALSE | set(_UNKNOWN_REDUCE) | _SYNTHESIZED
# ops that write their (small) outputs without reading data: no shadow is needed on inputs
_NO_DATA_READ = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                 "aten::new_empty_strided", "aten::zeros", "aten::zeros_like", "aten::new_zeros", "aten::ones",
                 "aten::ones_like", "aten::new_ones", "aten::full", "aten::full_like", "aten::new_full",
                 "aten::arange", "aten::zero_", "aten::fill_", "aten::randint", "aten::randn", "aten::rand",
                 "aten::random_", "aten::uniform_", "aten::normal_"}
# of those, the ones that read nothing of their tensor input but its metadata (shape, strides,
# dtype): the input is neither read nor written, so its values (known or not) stay as they are
_METADATA_ONLY = frozenset(n for n in _NO_DATA_READ if n.endswith("_like") or n.startswith("aten::new_"))


def shadow(t: torch.Tensor) -> torch.Tensor | None:
    """The real CPU value of the fake CUDA tensor `t` (a view of its storage's shadow, or of a
    large storage's replayed recipe: deferred_values; read only), or None."""
    v = _small_shadow(t)
    if v is None and deferred.active():
        return deferred.values(t)
    return v


def small(t: torch.Tensor) -> bool:
    """Whether the storage of `t` is small enough to hold values."""
    try:
        return t.untyped_storage().nbytes() <= _limit(t.dtype)
    except Exception:  # noqa: BLE001
        return False


@contextlib.contextmanager
def real_cpu_work() -> Iterator[None]:
    """Real CPU computation from inside a shape function: no dispatch mode, and not the Meta
    kernels FakeTensorMode routes every op to while it runs one (its dispatch TLS), under
    which a shadow's `fill_` / `copy_` did nothing and left uninitialised memory."""
    meta = torch._C._meta_in_tls_dispatch_include()
    torch._C._set_meta_in_tls_dispatch_include(False)
    try:
        with _disable_current_modes():
            yield
    finally:
        torch._C._set_meta_in_tls_dispatch_include(meta)


def give_shadow(t: torch.Tensor, value: torch.Tensor | None) -> None:
    """Attach a fresh shadow to `t`'s storage holding `value` (zeros when None); also for a shape
    function that lays out its inputs' values itself (cuDNN's flat RNN weight buffer,
    runtime/device/cuda_fakes.py)."""
    s = t.untyped_storage()
    real = torch.UntypedStorage(s.nbytes(), device="cpu")  # explicit: a `with torch.device("meta")` may be active
    v = deferred.view_of(real, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
    if value is None:
        real.fill_(0)
    else:
        if s.nbytes():
            real.fill_(0)
        v.copy_(value)
    setattr(s, _ATTR, real)


def _small_shadow(t: torch.Tensor) -> torch.Tensor | None:
    """A storage's own shadow (never a replayed recipe: what a recipe copies), or None."""
    try:
        s = t.untyped_storage()
    except Exception:  # noqa: BLE001 - tensors without storage
        return None
    real = getattr(s, _ATTR, None)
    if real is None:
        return None
    return deferred.view_of(real, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def forget(t: Any) -> None:
    """The data of `t` is no longer known (written from data that does not exist)."""
    active = deferred.active()
    for x in tensors_in(t):
        if isinstance(x, FakeTensor):
            try:
                s = x.untyped_storage()
            except Exception:  # noqa: BLE001
                continue
            if getattr(s, _ATTR, None) is not None:
                setattr(s, _ATTR, None)
            if active and getattr(s, deferred.ATTR, None) is not None:
                setattr(s, deferred.ATTR, None)


class _Unknown(Exception):
    pass


def propagate(func, args: tuple, kwargs: dict, out: Any) -> Any:
    """After a CUDA op: compute it on the shadows when all its CUDA inputs have one; else
    forget what it wrote. `out` are the op's (fake, or real CPU) outputs; returned as is."""
    if _is_pure_view(func):
        return out  # its outputs share the input's storage, whose shadow (if any) they see
    name = func._schema.name
    if name in _VALUES_FROM_SHAPE_FUNCTION:
        return out  # its shape function moved the values (cuda_fakes._flatten_weight)
    if name == "aten::set_":
        # `t.set_(storage, ...)` points t at a storage, which keeps its own shadow (or has
        # none): nothing was computed. Forgetting "what it wrote" here dropped the values of
        # every `copy.deepcopy` of a small CUDA tensor (torch clones the storage, then sets a
        # new tensor onto the clone)
        return out
    if name == "aten::_amp_foreach_non_finite_check_and_unscale_":
        with _disable_current_modes():
            _amp_check_and_unscale(func, args, kwargs)
        return out
    if name not in _ASSUME_TRUE and name not in _ASSUME_FALSE and not _finite_decided(name, args) \
            and name not in _UNKNOWN_REDUCE and name not in _SYNTHESIZED and _has_large_input(args, kwargs):
        # the common case (training-step ops), kept cheap: computed from data that does not
        # exist; only small written tensors can have had values
        written = _written(func, args, kwargs)
        if written:
            forget(written if deferred.active() else
                   [t for t in written if t.numel() * t.element_size() <= _limit(t.dtype)])
        return out
    # Real CPU work: outside whatever modes are active (a framework's own FakeTensorMode, e.g.
    # DTensor's sharding propagation, would make the shadows fake too).
    with _disable_current_modes():
        _propagate(func, name, args, kwargs, out)
    return out


# ops whose shape function (runtime/device/cuda_fakes.py) gives their outputs the values itself
_VALUES_FROM_SHAPE_FUNCTION = frozenset({"aten::_cudnn_rnn_flatten_weight"})
_PURE_VIEWS: dict = {}


def _is_pure_view(func) -> bool:
    """Whether `func` only makes views (every output aliases an input, `Tensor(a)`, and no
    argument is written): `view`, `t`, `transpose`, `detach`, `expand`, `split`, ... Shadows
    belong to storages, which views share, so such an op has no values to compute: ~870 of a
    GPT-2 step's ~1,570 captured ops, several of them over small tensors that have shadows
    (biases, LayerNorm weights), which ran on the CPU for nothing."""
    r = _PURE_VIEWS.get(func)
    if r is None:
        schema = func._schema
        returns = schema.returns
        # (not a CompositeImplicit op such as `reshape` or `contiguous`: annotated as views, they
        # copy when they must)
        r = _PURE_VIEWS[func] = bool(returns) and all(
            ret.alias_info is not None and not ret.alias_info.is_write for ret in returns) and not any(
            a.alias_info is not None and a.alias_info.is_write for a in schema.arguments) \
            and not torch._C._dispatch_has_kernel_for_dispatch_key(func.name(),
                                                                  torch._C.DispatchKey.CompositeImplicitAutograd)
    return r


def _propagate(func, name: str, args: tuple, kwargs: dict, out: Any) -> None:
    if name not in _ASSUME_TRUE and name not in _ASSUME_FALSE and not _finite_decided(name, args) \
            and name not in _UNKNOWN_REDUCE and name not in _SYNTHESIZED and _has_large_input(args, kwargs):
        forget(_written(func, args, kwargs))  # computed from data that does not exist
        return
    if _finite_decided(name, args) and shadow(args[0]) is None:
        # `x == x`, `x != inf`, ... : the answer is the same for every finite x, so compute it
        # on zeros (isfinite / isinf / isnan decompose into these); x with values is compared
        # for real below (a NaN loss of small tensors must read as NaN)
        x = args[0]
        z = _zeros(tuple(x.shape), dtype=x.dtype, device="cpu")
        _store(out, func(z, z if args[1] is x else args[1], *args[2:], **kwargs))
        return
    if name not in _SPECIAL and not _outputs_small(out):
        # large outputs: a recipe, replayed only if something small is derived from them
        written = _written(func, args, kwargs)
        if not deferred.defer(func, args, kwargs, out, written, _small_shadow):
            forget(written)
            forget(out)
        return
    if name in _NO_DATA_READ and name not in _METADATA_ONLY:
        # written without being read (zero_, fill_, uniform_, out= variants): the tensors it
        # writes get a shadow to write into; what it reads (fill_'s value tensor) must be known
        for t in _written(func, args, kwargs):
            if t.device.type == "cuda" and small(t) and _small_shadow(t) is None:
                give_shadow(t, None)
    try:
        cpu_args = _map(args, name)
        cpu_kwargs = {k: _map(v, name) for k, v in kwargs.items()}
    except _Unknown:
        if name in _BALANCED_COUNTS:
            _balanced_counts(args, out)
            return
        if name in _BALANCED_CHOICES:
            _balanced_choices(args, kwargs, out)
            return
        if name in _UNKNOWN_REDUCE:
            for t in tensors_in(out):
                if isinstance(t, FakeTensor) and t.device.type == "cuda" and small(t):
                    give_shadow(t, _full(tuple(t.shape), _UNKNOWN_REDUCE[name], dtype=t.dtype, device="cpu"))
            return
        forget(_written(func, args, kwargs))
        return
    if (name in _ASSUME_TRUE or name in _ASSUME_FALSE) and any(
            v is None for v, a in zip(cpu_args, args) if isinstance(a, FakeTensor)):
        for t in tensors_in(out):
            if isinstance(t, FakeTensor) and t.device.type == "cuda" and small(t):
                give_shadow(t, _full(tuple(t.shape), name in _ASSUME_TRUE, dtype=t.dtype, device="cpu"))
        return
    if not _outputs_small(out):
        forget(_written(func, args, kwargs))
        return
    if name.startswith(("aten::empty", "aten::new_empty")):  # uninitialised memory: zeros
        for t in tensors_in(out):
            if isinstance(t, FakeTensor) and t.device.type == "cuda":
                give_shadow(t, None)
        return
    try:
        with _device_generator(func, args, kwargs, cpu_kwargs) as drawn_from:
            r = func(*cpu_args, **cpu_kwargs)
    except Exception as exc:  # noqa: BLE001 - the CPU has no kernel for it: values unknown
        log.debug("no CPU values for %s: %s", name, exc)
        forget(_written(func, args, kwargs))
        forget(out)
        return
    note_draw = getattr(drawn_from, "note_draw", None)
    if note_draw is not None:  # a simulated CUDA generator: its state moves on, as Philox's offset does
        note_draw(sum(t.numel() for t in tensors_in(r)))
    _store(out, r)


_GENERATOR_ARG: dict = {}


@contextlib.contextmanager
def _device_generator(func, args: tuple, kwargs: dict, cpu_kwargs: dict) -> Iterator[Any]:
    """A random op run on the CPU for a CUDA tensor's values draws from that device's
    (simulated) CUDA generator, not from the CPU's: CUDA's default generator starts from a
    fixed seed and follows torch.manual_seed / torch.cuda.manual_seed, so the values (and any
    data-dependent size computed from them) are the same in every run, as on a GPU, while
    torch's CPU generator is seeded at random in every process. An op with a `generator`
    argument is given the device's; one without (`randperm`'s default overload) runs with the
    CPU default generator set to the device generator's state, which then takes the advanced
    state back. Yields the generator drawn from (None: the op is not random)."""
    gen = None
    if torch.Tag.nondeterministic_seeded in func.tags:
        position = _GENERATOR_ARG.get(func)
        if position is None:
            position = _GENERATOR_ARG[func] = next(
                (i for i, a in enumerate(func._schema.arguments) if a.name == "generator"), -1)
        if cpu_kwargs.get("generator") is not None:
            yield cpu_kwargs["generator"]  # the program's own generator
            return
        if 0 <= position < len(args):
            yield args[position]
            return
        gen = _device_generator_of(args, kwargs)
    if gen is None:
        yield None
        return
    if position >= 0:
        cpu_kwargs["generator"] = gen
        yield gen
        return
    cpu = torch.default_generator
    saved = cpu.get_state()
    cpu.set_state(torch._C.Generator.get_state(gen))
    try:
        yield gen
    finally:
        torch._C.Generator.set_state(gen, cpu.get_state())
        cpu.set_state(saved)


def _device_generator_of(args: tuple, kwargs: dict) -> torch.Generator | None:
    device = next((t.device for t in tensors_in((args, kwargs)) if t.device.type == "cuda"), None)
    if device is None and kwargs.get("device") is not None:
        device = torch.device(kwargs["device"])
    if device is None or device.type != "cuda":
        return None
    generators = torch.cuda.default_generators
    index = device.index if device.index is not None else torch.cuda.current_device()
    if 0 <= index < len(generators) and isinstance(generators[index], torch._C.Generator):
        return generators[index]
    return None


def _balanced_counts(args: tuple, out: Any) -> None:
    """The output of a histogram over data without values: its elements spread evenly over the
    bins (the first `n % bins` bins one more), see _BALANCED_COUNTS."""
    x = args[0] if args else None
    n = int(x.numel()) if isinstance(x, torch.Tensor) else 0
    for t in tensors_in(out):
        if isinstance(t, FakeTensor) and t.device.type == "cuda" and small(t) and t.dim() == 1:
            bins = max(1, t.numel())
            counts = [n // bins + (1 if i < n % bins else 0) for i in range(bins)]
            give_shadow(t, _tensor(counts, dtype=t.dtype, device="cpu"))
        else:
            forget(t)


def _balanced_choices(args: tuple, kwargs: dict, out: Any) -> None:
    """topk(x, k, dim) over data without values: the indices output gets balanced choices
    (see _BALANCED_CHOICES); the values output stays unknown."""
    x = args[0]
    k = int(args[1] if len(args) > 1 else kwargs.get("k", 1))
    dim = int(args[2] if len(args) > 2 else kwargs.get("dim", -1)) % max(1, x.dim())
    values, indices = out[0], out[1]
    forget(values)
    if not (isinstance(indices, FakeTensor) and small(indices)) or x.dim() == 0:
        forget(indices)
        return
    n = max(1, int(x.shape[dim]))
    moved = tuple(indices.shape[:dim]) + tuple(indices.shape[dim + 1:]) + (k,)
    rows = 1
    for size in moved[:-1]:
        rows *= size
    choice = (torch.arange(rows * k, dtype=torch.int64, device="cpu").reshape(moved) % n).movedim(-1, dim)
    give_shadow(indices, choice.to(indices.dtype))


def store_result(out: Any, result: Any) -> Any:
    """Give the fake outputs `out` the values of `result`, the op's CPU result over the
    shadows (data_dependent_result), as propagation would have computed them; returns `out`."""
    with _disable_current_modes():
        if _outputs_small(out):
            _store(out, result)
        else:
            outs, rs = list(tensors_in(out)), list(tensors_in(result))
            for i, o in enumerate(outs):
                # a large storage with a recipe (written in place through a data-dependent index)
                # records the values as a step; anything else is unknown
                if not (isinstance(o, FakeTensor) and len(rs) == len(outs) and deferred.active()
                        and deferred.assign(o, rs[i])):
                    forget(o)
    return out


def data_dependent_result(func, args: tuple, kwargs: dict) -> Any:
    """The real (CPU) result of an op whose output size depends on the data (nonzero,
    boolean indexing, unique, masked_select) when every CUDA input has a value; else None."""
    name = func._schema.name
    with _disable_current_modes():
        try:
            cpu_args = _map(args, name)
            cpu_kwargs = {k: _map(v, name) for k, v in kwargs.items()}
        except _Unknown:
            return None
        if deferred.active():  # a replayed recipe is read only: an in-place op writes a copy
            written = {id(t) for t in _written(func, args, kwargs) if _small_shadow(t) is None}
            cpu_args = tuple(c.clone() if id(a) in written else c for a, c in zip(args, cpu_args))
            cpu_kwargs = {k: c.clone() if id(kwargs[k]) in written else c for k, c in cpu_kwargs.items()}
        try:
            return func(*cpu_args, **cpu_kwargs)
        except Exception as exc:  # noqa: BLE001 - no CPU kernel: the caller estimates
            log.debug("no CPU values for %s: %s", name, exc)
            return None


def _amp_check_and_unscale(func, args: tuple, kwargs: dict) -> None:
    """GradScaler's overflow check, `_amp_foreach_non_finite_check_and_unscale_(grads, found_inf,
    inv_scale)`, as a GPU runs it on finite gradients: gradients without values (large ones) are
    assumed finite, so they leave `found_inf` as it was; gradients with values are checked and
    unscaled for real (an inf in a small gradient sets it). Without this, large gradients made
    `found_inf` unknown, and the scale and growth tracker that `_amp_update_scale_` computes
    from it lost their values (`get_scale()` read the placeholder 0.0)."""
    bound = dict(zip(("self", "found_inf", "inv_scale"), args))
    bound.update(kwargs)
    grads, found_inf, inv_scale = bound["self"], bound["found_inf"], bound["inv_scale"]
    found = shadow(found_inf) if isinstance(found_inf, FakeTensor) else None
    inv = shadow(inv_scale) if isinstance(inv_scale, FakeTensor) else None
    known = [(g, shadow(g)) for g in grads if isinstance(g, FakeTensor)]
    known = [(g, v) for g, v in known if v is not None]
    if found is None:
        forget([g for g, _ in known])
        return
    if not known:
        return  # every gradient assumed finite: found_inf keeps its value
    if inv is None:  # cannot unscale, but the check still sees the values
        if any(not bool(v.isfinite().all()) for _, v in known):
            found.fill_(1.0)
        forget([g for g, _ in known])
        return
    func([v for _, v in known], found, inv)


_COMPARE = {"aten::eq", "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge"}


def _finite_decided(name: str, args: tuple) -> bool:
    """A comparison whose result does not depend on the (finite) data: `x OP x`, `x OP ±inf/nan`."""
    if name not in _COMPARE or len(args) < 2 or not isinstance(args[0], FakeTensor):
        return False
    if args[0].numel() * args[0].element_size() > _limit(args[0].dtype):  # elementwise: a large output
        return False
    other = args[1]
    if other is args[0]:
        return True
    return isinstance(other, float) and (other != other or other in (float("inf"), float("-inf")))


def _has_large_input(args: tuple, kwargs: dict) -> bool:
    """Cheap pre-check (no storage lookups for ordinary tensors): a large CUDA input has no
    values, unless it is an expanded view of a small storage (a [batch, seq] mask broadcast to
    [batch, 1, seq, seq]) or its storage has a recipe (deferred_values)."""
    for t in tensors_in(args):
        if t.device.type == "cuda" and t.numel() * t.element_size() > _limit(t.dtype) and not _valued_large(t):
            return True
    for v in kwargs.values():
        for t in tensors_in(v):
            if t.device.type == "cuda" and t.numel() * t.element_size() > _limit(t.dtype) and not _valued_large(t):
                return True
    return False


def _valued_large(t: torch.Tensor) -> bool:
    """Whether a tensor of many elements can still have values: an expanded view (a zero
    stride) of a small storage, or a storage with a recipe."""
    if 0 in t.stride() and small(t):
        return True
    return deferred.active() and deferred.recipe_of(t) is not None


_WRITES: dict = {}


def _written(func, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    idx = _WRITES.get(func)
    if idx is None:
        idx = _WRITES[func] = tuple((i, a.name, a.kwarg_only) for i, a in enumerate(func._schema.arguments)
                                    if a.alias_info is not None and a.alias_info.is_write)
    out = []
    for i, name, kwarg_only in idx:
        v = args[i] if i < len(args) and not kwarg_only else kwargs.get(name)
        out.extend(t for t in tensors_in(v) if isinstance(t, FakeTensor))
    return out


def _outputs_small(out: Any) -> bool:
    for t in tensors_in(out):
        if isinstance(t, FakeTensor) and t.device.type == "cuda" and not small(t):
            return False
    return True


def _map(a: Any, name: str) -> Any:
    """A fake CUDA argument as its CPU shadow; raises _Unknown when it has none."""
    if isinstance(a, FakeTensor):
        if a.device.type != "cuda":
            raise _Unknown
        v = shadow(a)
        if v is None:
            if name in _ASSUME_TRUE or name in _ASSUME_FALSE:
                return None
            if name in _METADATA_ONLY:  # `empty_like(perm)`: perm's values stay unknown
                return _metadata_stand_in(a)
            raise _Unknown
        return v
    if isinstance(a, torch.Tensor):
        if a.device.type != "cpu":
            raise _Unknown
        return a
    if isinstance(a, (list, tuple)):
        if not tensors_in(a):  # nested too: `cat((t1, t2))` is `(list,)` at the top
            return a
        return type(a)(_map(b, name) for b in a)
    return deferred.on_cpu(a)


def _metadata_stand_in(a: torch.Tensor) -> torch.Tensor:
    """A CPU tensor with `a`'s shape, strides and dtype (zeros), for an op that reads nothing
    else of it. Before, such an input got a zero shadow of its own: `inv = empty_like(perm)`
    turned an unknown permutation (a sort over a router's scores) into known zeros, and
    transformers' grouped-mm experts then priced each backward index_put as one row taking every
    index (3 ms per call, +23% on HF PhiMoE's step)."""
    shape, stride = tuple(a.shape), tuple(a.stride())
    span = 1 + sum((n - 1) * st for n, st in zip(shape, stride)) if all(shape) else 0
    return _zeros((span,), dtype=a.dtype, device="cpu").as_strided(shape, stride)


def _store(out: Any, r: Any) -> None:
    outs, rs = list(tensors_in(out)), list(tensors_in(r))
    if len(outs) != len(rs):
        forget(out)
        return
    for o, v in zip(outs, rs):
        if isinstance(o, FakeTensor):
            if o.device.type != "cuda":
                continue
            s = getattr(o.untyped_storage(), _ATTR, None)
            if s is not None and v.untyped_storage().data_ptr() == s.data_ptr():
                continue  # an in-place op or a view: it already wrote / sees the shadow
            if o.shape != v.shape:
                forget(o)
                continue
            if s is not None:
                shadow(o).copy_(v)
            else:
                give_shadow(o, v)
        elif o.device.type == "cpu" and o is not v and o.shape == v.shape:
            o.copy_(v)  # a D2H copy: the real CPU tensor gets the values


# c10d collectives whose values travel (every one but point-to-point, which `p2p` carries)
_EXCHANGED = {"allreduce", "allreduce_coalesced", "broadcast", "_allgather_base", "allgather",
              "allgather_into_tensor_coalesced", "reduce_scatter", "_reduce_scatter_base",
              "reduce_scatter_tensor_coalesced", "all_to_all", "reduce", "gather", "scatter"}
# those whose non-root members send nothing that counts
_ROOT_SENDS = {"broadcast", "scatter"}


def exchange(host: Any, op: str, coll_name: str, reduce_op: str, inputs: list, outputs: list, nbytes: int,
             root: int = 0, splits: list | None = None) -> None:
    """Give the outputs of a small simulated collective their real values.

    The values really travel between the ranks, as CPU collectives do (through the
    coordinator: runtime/distributed/host_collectives.py; `host` is the group's HostGroup),
    when the message is small (every member agrees on that: the sizes of a collective match
    on all ranks). Each rank also says whether it knows its inputs; if any does not, the
    outputs have no values anywhere. `root` is the group rank of a rooted collective's root,
    `splits` an all-to-all's input split sizes (None: equal). Large messages leave their
    outputs without values. The host clock does not move: the device collective does not
    block the host."""
    from phantora_prof.runtime.distributed import host_collectives as hc

    outs = [t for t in outputs if isinstance(t, FakeTensor)]
    if host is None or nbytes > MAX_BYTES or coll_name not in _EXCHANGED or not (inputs or outs):
        forget(outs)
        return
    if op in ("all_reduce", "reduce", "reduce_scatter") and reduce_op not in ("sum", "avg", "max", "min", "product"):
        forget(outs)  # (premul_sum, bitwise ops: not computed here)
        return
    with hc.simulator_work():
        me = host.index
        sends = not (coll_name in _ROOT_SENDS and me != root)
        ins = [shadow(t) if isinstance(t, FakeTensor) else None for t in inputs] if sends else []
        known = all(v is not None for v in ins) and all(small(t) for t in outs)
        flag = _tensor([1 if known else 0], dtype=torch.uint8, device="cpu")
        mine = [flag] + (ins if known else [])
        if known and coll_name == "all_to_all" and len(inputs) == 1 and splits:
            mine.append(_tensor([int(x) for x in splits], dtype=torch.int64, device="cpu"))
        parts = host.exchange(f"values:{coll_name}", hc.encode(mine), blocking=False)
        if not all(int(p[0][0]) for p, _ in parts.distinct()):
            forget(outs)
            return
        if coll_name in _ROOT_SENDS and len(parts.of(root)) < 2:
            forget(outs)  # a mirrored root whose representative is not the root here: no values
            return
        values = _collective_values(coll_name, reduce_op, parts, me, root, len(outs))
        if values is None:
            forget(outs)
            return
        for t, v in zip(outs, values):
            if v is None:
                continue
            if v.numel() != t.numel():
                forget(t)
            else:
                _set(t, v.reshape(tuple(t.shape)))


def _collective_values(coll_name: str, reduce_op: str, parts: Any, me: int, root: int, n_outs: int) -> list | None:
    """Each output's value (None: leave that output as it is) from the members' parts (a flag,
    then their inputs; an all-to-all's split sizes last). None when the layout is not one this
    knows."""
    from phantora_prof.runtime.distributed import host_collectives as hc

    n = len(parts)

    def ins(j: int) -> list:
        return parts.of(j)[1:]

    def reduce_each(pick) -> torch.Tensor:
        return hc.reduced(reduce_op, parts, lambda p: pick(p[1:]).reshape(-1).to(torch.float64))

    if coll_name == "broadcast":
        return ins(root)
    if coll_name in ("allreduce", "allreduce_coalesced") or (coll_name == "reduce" and me == root):
        k = len(ins(me))
        return [reduce_each(lambda p, i=i: p[i]) for i in range(k)]
    if coll_name == "reduce":
        return [None] * n_outs  # NCCL leaves a non-root member's buffer as it was
    if coll_name == "allgather":  # outputs[i][j]: member j's input i, flattened i-major
        k = len(ins(me))
        return [ins(j)[i] for i in range(k) for j in range(n)]
    if coll_name in ("_allgather_base", "allgather_into_tensor_coalesced"):
        k = len(ins(me))
        return [torch.cat([ins(j)[i].reshape(-1) for j in range(n)]) for i in range(k)]
    if coll_name == "reduce_scatter":  # inputs[i][j]: this member's part of member j's output i
        return [reduce_each(lambda p, i=i: p[i * n + me]) for i in range(n_outs)]
    if coll_name in ("_reduce_scatter_base", "reduce_scatter_tensor_coalesced"):
        return [reduce_each(lambda p, i=i: p[i].reshape(-1).chunk(n)[me]) for i in range(n_outs)]
    if coll_name == "all_to_all":
        if n_outs == 1:  # all_to_all_single: dim 0 split by each member's input split sizes
            chunks = []
            for j in range(n):
                theirs = ins(j)
                x = theirs[0]
                sizes = [int(v) for v in theirs[1]] if len(theirs) > 1 else [x.shape[0] // n] * n
                if sum(sizes) != x.shape[0]:
                    return None
                chunks.append(x.split(sizes)[me].reshape(-1))
            return [torch.cat(chunks)]
        return [ins(j)[me] for j in range(n)]  # the list form: output j is member j's input for me
    if coll_name == "gather":  # the root's outputs[i][j]: member j's input i
        if me != root:
            return [None] * n_outs
        k = len(ins(me))
        return [ins(j)[i] for i in range(k) for j in range(n)]
    if coll_name == "scatter":  # the root's inputs[i][j]: member j's output i
        sent = ins(root)
        return [sent[i * n + me] for i in range(n_outs)]
    return None


_P2P_TAG = 0x7068  # tag of these messages: apart from the user's own CPU send/recv (tag 0, ...)


def p2p(host: Any, coll_name: str, peer: int, inputs: list, outputs: list, nbytes: int):
    """Give the output of a small simulated point-to-point message its real value.

    Programs send small control tensors from rank to rank too: torch.distributed.pipelining's
    stages vote on static/dynamic shape inference with one-element `dist.send`/`dist.recv`
    and exchange their activations' metadata with `send_object_list` (a size tensor, then
    the pickled bytes, both on the device). A message of at most `MAX_BYTES` really travels
    (through the coordinator; `host` is the group's HostGroup, `peer` the other side's global
    rank), as a flag saying whether the sender knew its values, then the values. A send posts
    it and returns; a recv returns the function that receives it, which the recv's work runs
    in `wait()` (NCCL semantics: the data may be read after `wait()`), so the host blocks no
    earlier than the program asks. Until then, and for large messages, the output has no
    values. Both sides know `nbytes` (NCCL needs matching sizes), so they agree on whether a
    message travels. Returns None when there is nothing to complete."""
    from phantora_prof.runtime.distributed import host_collectives as hc

    outs = [t for t in outputs if isinstance(t, FakeTensor)]
    forget(outs)
    if host is None or nbytes > MAX_BYTES or coll_name not in ("send", "recv"):
        return None
    with hc.simulator_work():
        if coll_name == "send":
            ins = [shadow(t) if isinstance(t, FakeTensor) else None for t in inputs]
            known = bool(ins) and all(v is not None for v in ins)
            host.send(peer, _P2P_TAG, hc.encode(ins if known else []))
            return None

    def complete() -> None:
        with hc.simulator_work():
            got = hc.decode(host.recv(peer, _P2P_TAG, blocking=False))
            if not got or not all(small(t) for t in outs):
                return
            buf = torch.cat([v.contiguous().view(-1).view(torch.uint8) for v in got])
            if buf.numel() == nbytes:
                _unpack(buf, outs)

    return complete


def _set(t: torch.Tensor, value: torch.Tensor) -> None:
    v = shadow(t)
    if v is None:
        give_shadow(t, value.to(t.dtype))
    else:
        v.copy_(value)


def _unpack(buf: torch.Tensor, outs: list) -> None:
    """Bytes received, laid out as the outputs' contiguous contents one after the other."""
    i = 0
    for t in outs:
        n = t.numel() * t.element_size()
        _set(t, buf[i:i + n].view(t.dtype).reshape(tuple(t.shape)))
        i += n


def _clone_keeping_values(clone):
    """`UntypedStorage.clone()` of a simulated CUDA storage that has a shadow gives the clone a
    copy of it. torch clones a storage by allocating one and calling the storage's C `copy_`,
    which copies through tensors that are not the simulator's fake ones, so no op saw values:
    `copy.deepcopy` of a small CUDA tensor, an `nn.Module` (EMA and teacher models) or a state
    dict (the "keep the best weights" pattern) came out as zeros."""

    def clone_storage(self):
        new = clone(self)
        real = getattr(self, _ATTR, None)
        if real is not None and new.nbytes() == real.nbytes():
            setattr(new, _ATTR, real.clone())
        return new

    clone_storage.__doc__ = clone.__doc__
    return clone_storage


def install() -> None:
    from torch.storage import _StorageBase

    _StorageBase.clone = _clone_keeping_values(_StorageBase.clone)


def scalar(t: torch.Tensor) -> Any:
    """`.item()` of a CUDA tensor with a known value (None when it has none)."""
    if not small(t) and not (deferred.active() and deferred.recipe_of(t) is not None):
        return None
    with _disable_current_modes():
        v = shadow(t)
        return None if v is None else v.item()
