"""Values of large device tensors, computed only when something small is derived from them.

values.py gives real values to small CUDA storages only, computed eagerly on the CPU: that is
what flags, counters and index lists need, and large tensors (activations, weights) come from
data that does not exist anyway. But some large tensors are built from known values alone, and
programs read small results off them: a model materialises a [batch, 1, seq, seq] attention
mask from a [batch, seq] padding mask, slices a row back out, marks global tokens in it and asks
`(mask > 0).any().item()` which attention path to take (HF Longformer). Without the values the
simulation took the other branch: 44% fewer kernels than the real step, −35% step time.

So a large storage whose contents follow from known values gets a *recipe* instead of a shadow:
the op that created it, with its inputs snapshotted (small values copied, other recipes
referenced at their current length), plus the in-place ops applied to it since. Nothing is
computed until an op needs the values of a small output (a comparison, a reduction, `.item()`,
`nonzero`, a D2H copy); then the recipe is replayed on the CPU, and the result is cached (a few
storages, bounded in bytes) for the next question about the same storage.

Bounded on purpose: recipes over `MAX_BYTES` storages are not kept (the values are then
unknown, as before), nor chains of more than `MAX_STEPS` in-place ops, nor recipes that read a
large CPU tensor (a data batch copied to the GPU every step would be cloned every step); random
ops are never deferred (their draws must happen in program order).
"""
from __future__ import annotations

import collections
import logging
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import FakeTensor

from phantora_prof.runtime.dispatch.tensors import tensors_in

log = logging.getLogger(__name__)

ATTR = "_phantora_deferred"
MAX_BYTES = 256 * 1024 * 1024  # a storage's recipe is kept up to this size
MAX_STEPS = 64  # in-place ops recorded on one storage
CACHE_BYTES = 256 * 1024 * 1024  # replayed storages kept for the next question
SMALL_CPU_BYTES = 1024 * 1024  # CPU tensors a recipe may copy (larger: values unknown)

# Recipe objects alive (on storages, referenced by other recipes, or cached): while 0 no storage
# can have one, and propagation skips every lookup
_live = 0
# torch.empty as it is before the program runs (frameworks replace it for a while: DeepSpeed's
# zero.Init), as values.py keeps it
_empty = torch.empty


class Unknown(Exception):
    """An input's values are not known: no recipe."""


@dataclass(frozen=True)
class Ref:
    """An input of a recipe: `recipe`'s storage after its first `length` steps, seen through a
    view (offset, shape, stride, dtype)."""
    recipe: "Recipe"
    length: int
    offset: int
    shape: tuple
    stride: tuple
    dtype: torch.dtype


class Recipe:
    """How to compute one storage's bytes: `base` writes the initial contents into a zeroed CPU
    storage, then each step applies an in-place op to it."""
    __slots__ = ("nbytes", "base", "steps", "__weakref__")

    def __init__(self, nbytes: int, base: Callable[[torch.UntypedStorage], None] | None):
        global _live
        self.nbytes = nbytes
        self.base = base
        self.steps: list[Callable[[torch.UntypedStorage], None]] = []
        _live += 1

    def __del__(self) -> None:
        global _live
        _live -= 1


_cache: "collections.OrderedDict[int, tuple[Recipe, int, torch.UntypedStorage]]" = collections.OrderedDict()
_cached_bytes = 0


def active() -> bool:
    """Whether any recipe exists (else nothing here needs a look)."""
    return _live > 0


def recipe_of(t: torch.Tensor) -> Recipe | None:
    try:
        return getattr(t.untyped_storage(), ATTR, None)
    except Exception:  # noqa: BLE001 - tensors without storage
        return None


def drop(t: torch.Tensor) -> None:
    try:
        s = t.untyped_storage()
    except Exception:  # noqa: BLE001
        return
    if getattr(s, ATTR, None) is not None:
        setattr(s, ATTR, None)


def view_of(real: torch.UntypedStorage, offset: int, shape: tuple, stride: tuple, dtype: torch.dtype) -> torch.Tensor:
    v = _empty(0, dtype=dtype, device="cpu")  # explicit: a `with torch.device("meta")` may be active
    v.set_(real, offset, shape, stride)
    return v


def values(t: torch.Tensor) -> torch.Tensor | None:
    """`t`'s values through its storage's recipe, replayed if needed (read only), or None."""
    r = recipe_of(t)
    if r is None:
        return None
    try:
        real = _replay(r, len(r.steps))
    except Exception as exc:  # noqa: BLE001 - an op of the recipe has no CPU kernel: values unknown
        log.debug("recipe replay failed: %s", exc)
        drop(t)
        return None
    return view_of(real, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _replay(r: Recipe, length: int) -> torch.UntypedStorage:
    global _cached_bytes
    hit = _cache.get(id(r))
    if hit is not None and hit[0] is r and hit[1] == length:
        _cache.move_to_end(id(r))
        return hit[2]
    real = torch.UntypedStorage(r.nbytes, device="cpu")
    real.fill_(0)
    if r.base is not None:
        r.base(real)
    for step in r.steps[:length]:
        step(real)
    if hit is not None:
        _cached_bytes -= hit[2].nbytes()
    _cache[id(r)] = (r, length, real)
    _cache.move_to_end(id(r))
    _cached_bytes += real.nbytes()
    while _cached_bytes > CACHE_BYTES and len(_cache) > 1:
        _, (_, _, old) = _cache.popitem(last=False)
        _cached_bytes -= old.nbytes()
    return real


def snapshot(a: Any, small_values: Callable[[torch.Tensor], torch.Tensor | None]) -> Any:
    """A fake CUDA argument as a recipe input: its small values copied, or a reference to its
    storage's recipe as it stands; raises Unknown when it has neither."""
    if isinstance(a, FakeTensor):
        if a.device.type != "cuda":
            raise Unknown
        v = small_values(a)
        if v is not None:
            return v.clone()
        r = recipe_of(a)
        if r is None:
            raise Unknown
        return Ref(r, len(r.steps), a.storage_offset(), tuple(a.shape), tuple(a.stride()), a.dtype)
    if isinstance(a, torch.Tensor):
        if a.device.type != "cpu" or a.numel() * a.element_size() > SMALL_CPU_BYTES:
            raise Unknown
        return a.clone()
    if isinstance(a, (list, tuple)):
        if not tensors_in(a):
            return a
        return type(a)(snapshot(b, small_values) for b in a)
    return on_cpu(a)


def on_cpu(a: Any) -> Any:
    """A CUDA device argument (`torch.device` or a "cuda..." string) as the CPU's; anything else as is."""
    if isinstance(a, torch.device) and a.type == "cuda":
        return torch.device("cpu")
    if isinstance(a, str) and a.startswith("cuda"):
        return "cpu"
    return a


def _resolve(a: Any, own: Recipe | None = None, own_real: torch.UntypedStorage | None = None) -> Any:
    if isinstance(a, Ref):
        real = own_real if a.recipe is own else _replay(a.recipe, a.length)
        return view_of(real, a.offset, a.shape, a.stride, a.dtype)
    if isinstance(a, (list, tuple)) and any(isinstance(b, (Ref, list, tuple, torch.Tensor)) for b in a):
        return type(a)(_resolve(b, own, own_real) for b in a)
    if isinstance(a, torch.Tensor):
        return a.clone()  # a step may write its inputs (in-place ops): the snapshot stays as taken
    return a


def defer(func, args: tuple, kwargs: dict, out: Any, written: list[torch.Tensor],
          small_values: Callable[[torch.Tensor], torch.Tensor | None]) -> bool:
    """Attach recipes for `func`'s large outputs (fresh storages) and record it as a step on the
    large storages it writes. False when it cannot be deferred (values unknown, too large, a
    random op): the caller forgets what the op wrote."""
    if torch.Tag.nondeterministic_seeded in func.tags:
        return False
    name = func._schema.name
    if name.startswith(("aten::empty", "aten::new_empty")):  # uninitialised memory: zeros, as values.py
        for o in tensors_in(out):
            if isinstance(o, FakeTensor) and o.device.type == "cuda" and o.untyped_storage().nbytes() <= MAX_BYTES:
                setattr(o.untyped_storage(), ATTR, Recipe(o.untyped_storage().nbytes(), None))
        return True
    try:
        cargs = snapshot(args, small_values)
        ckwargs = {k: snapshot(v, small_values) for k, v in kwargs.items()}
    except Unknown:
        return False
    recipes = [recipe_of(w) for w in written]
    if any(r is None or len(r.steps) >= MAX_STEPS for r in recipes):
        return False
    for r in recipes:

        def step(real, r=r):
            # references to `r` itself (the view the op writes) are the storage as built so far
            func(*_resolve(cargs, r, real), **{k: _resolve(v, r, real) for k, v in ckwargs.items()})

        r.steps.append(step)
    # outputs that alias an input (`_unsafe_view`, an in-place op's return: the written
    # tensors are arguments too) see its recipe
    aliased = {t.untyped_storage()._cdata for t in tensors_in((args, kwargs)) if isinstance(t, FakeTensor)}
    for k, o in enumerate(tensors_in(out)):
        if not isinstance(o, FakeTensor) or o.device.type != "cuda" or o.untyped_storage()._cdata in aliased:
            continue
        nbytes = o.untyped_storage().nbytes()
        if nbytes > MAX_BYTES:
            drop(o)
            continue
        geometry = (o.storage_offset(), tuple(o.shape), tuple(o.stride()), o.dtype)

        def base(real, k=k, geometry=geometry):
            result = func(*_resolve(cargs), **{n: _resolve(v) for n, v in ckwargs.items()})
            view_of(real, *geometry).copy_(list(tensors_in(result))[k])

        setattr(o.untyped_storage(), ATTR, Recipe(nbytes, base))
    return True


def assign(o: torch.Tensor, value: torch.Tensor) -> bool:
    """Record that the view `o` of a large storage with a recipe now holds `value` (computed
    now: an in-place op with a data-dependent index, `row[mask] = x`); False without a recipe."""
    r = recipe_of(o)
    if r is None or len(r.steps) >= MAX_STEPS or tuple(value.shape) != tuple(o.shape):
        return False
    geometry = (o.storage_offset(), tuple(o.shape), tuple(o.stride()), o.dtype)
    kept = value.detach().clone()

    def step(real):
        view_of(real, *geometry).copy_(kept)

    r.steps.append(step)
    return True
