"""torch._dynamo loaded when the program first uses it, not when the simulator starts.

torch's FakeTensorMode (the simulated device's tensors) reads two flags of
`torch._dynamo.config` in its constructor, and its converter names every CPU tensor it turns
into a fake one with a `torch._dynamo.source.ConstantSource`. Importing a submodule imports
its package first, and `torch/_dynamo/__init__.py` imports all of Dynamo (convert_frame,
symbolic_convert, the variable trackers, trace_rules, sympy through symbolic shapes, FSDP,
DTensor): ~2.5 s, two thirds of a rank's start-up, and the memory that comes with it, in
every rank of every run, whether or not the program ever compiles.

`defer()` puts an empty package object for `torch._dynamo` in `sys.modules`, with the real
package's spec and path, so that `torch._dynamo.config` (which needs only torch's
config-module helper) imports on its own. Anything else loads the real package first, into
that same module object, and from then on it is the real package: the program sees what an
eager import would have given it, only later. That happens
- on any other attribute of the package (`torch.compile`, `torch._dynamo.disable` through
  `torch._disable_dynamo`, `from torch._dynamo import ...`): PEP 562's module `__getattr__`;
- on any other submodule import (`import torch._dynamo.source`): a meta path finder loads the
  package first, so Dynamo's modules import in the order its `__init__` gives them (imported
  alone they form import cycles).

Four uses are answered without loading:
- `torch._dynamo.trace_rules.clear_lru_cache()`, which `init_process_group` calls when
  `torch._dynamo` is in `sys.modules`: before Dynamo has loaded its caches are empty;
- the name FakeTensor's converter gives a CPU tensor it fakes without a source (a
  `ConstantSource` otherwise): a Source of our own, used only for symbolic shapes, which the
  simulator's FakeTensorMode does not have; and its `isinstance(source, RandomValueSource)`
  (torch >= 2.12 imports `torch._dynamo.source` for it on every conversion): no source is a
  random value's before Dynamo exists (`torch._dynamo.source` is a stand-in module until then);
- `torch._dynamo.disable(fn)` asked by `torch._disable_dynamo`, the wrapper torch puts on
  `Optimizer.zero_grad`, `state_dict`, the functional optimizers and more: it caches the
  answer on `fn.__dynamo_disable` and calls it at once. Before Dynamo exists nothing is being
  traced, so the answer is `fn` itself; when Dynamo loads, every such cache is replaced by the
  real `disable(fn)`, so a later `torch.compile` sees exactly what it would have. The Python
  that Dynamo's disable wrapper runs per call (2.6 us of host time on the reference host, seen
  as a 2.567 us earlier start of tests/scripts/tiny_gpt.py's profiled window) is not
  run, and so not charged, until then (the simulator's own calls gain most: FakeTensorMode's
  `__torch_dispatch__` and the prims references are wrapped the same way);
- `torch._dynamo.graph_break()`, which torch.optim calls twice per `step()`: a no-op in eager
  code, served as one (under the real function's file name, so its call is counted the same).

Loading is the simulator's work: Dynamo's module code is not counted as the program's Python
and its tensors are not captured (at start-up, where it ran before, it was not either).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.abc
import importlib.util
import inspect
import logging
import os
import sys
import types
from typing import Any

import torch

log = logging.getLogger(__name__)

_NAME = "torch._dynamo"
_IMPORTS_ALONE = {"torch._dynamo.config"}  # needs only torch._environment and torch.utils._config_module
_SIMULATOR_IMPORTS = ("torch.fx.experimental.symbolic_shapes", "torch._subclasses.schema_check_mode",
                      "torch.distributed.tensor")
_NOTHING_TRACED = types.SimpleNamespace(clear_lru_cache=lambda: None)
_TORCH_COMPILE_PY = os.path.join("torch", "_compile.py")  # torch._disable_dynamo's module


@functools.cache
def _graph_break_before_dynamo() -> Any:
    """`torch._dynamo.graph_break` before Dynamo loads: what it is in eager code, a function
    that does nothing (torch.optim's `_use_grad` calls it twice per step). Compiled under the
    real function's file name, so the host model counts its call as it counts the real one's."""
    spec = importlib.util.find_spec(_NAME)
    path = os.path.join(os.path.dirname(spec.origin), "decorators.py") if spec and spec.origin else "<dynamo>"
    namespace: dict[str, Any] = {}
    exec(compile("def graph_break(msg=''):\n    pass\n", path, "exec"), namespace)  # noqa: S102
    return namespace["graph_break"]


class _NoRandomValueSource:
    """Stand-in for torch._dynamo.source.RandomValueSource: no source is one before Dynamo loads."""


def _source_stand_in(package: "_LazyPackage") -> types.ModuleType:
    """`torch._dynamo.source` until Dynamo loads: RandomValueSource for FakeTensor's isinstance
    check; any other name loads the real package and answers from the real module."""
    stand_in = types.ModuleType(_NAME + ".source")
    stand_in.RandomValueSource = _NoRandomValueSource  # type: ignore[attr-defined]

    def __getattr__(name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        package.load(f"source.{name}")
        return getattr(importlib.import_module(_NAME + ".source"), name)

    stand_in.__getattr__ = __getattr__  # type: ignore[attr-defined]
    return stand_in


def _source_imported_per_fake() -> bool:
    """torch >= 2.12's FakeTensorConverter.from_real_tensor imports torch._dynamo.source on every call."""
    from torch._subclasses.fake_tensor import FakeTensorConverter

    return "RandomValueSource" in inspect.getsource(FakeTensorConverter.from_real_tensor)


class _LazyPackage:
    """The state of the deferred package and the one way to load it."""

    def __init__(self, module: types.ModuleType, spec: Any) -> None:
        self.module = module
        self.spec = spec
        self.loaded = False
        self.served: list[tuple[Any, bool]] = []  # (fn, recursive) given to torch._disable_dynamo
        self.stand_ins: list[types.ModuleType] = []  # submodules answered before loading (_source_stand_in)

    def load(self, why: str) -> None:
        if self.loaded:
            return
        self.loaded = True
        self.module.__dict__.pop("__getattr__", None)
        for stand_in in self.stand_ins:
            if sys.modules.get(stand_in.__name__) is stand_in:
                del sys.modules[stand_in.__name__]
            self.module.__dict__.pop(stand_in.__name__.rsplit(".", 1)[1], None)
        log.debug("torch._dynamo loaded on first use (%s)", why)
        from torch.utils._python_dispatch import _disable_current_modes

        from phantora_prof.runtime.dispatch import op_recorder
        from phantora_prof.runtime.host import pyhost
        from phantora_prof.runtime.process import state

        host = state.get().pyhost if state.installed() else None
        rec = op_recorder.get()
        prev = rec.quiet(1) if rec is not None else None
        try:
            with pyhost.simulator_work(host), _disable_current_modes():
                self.spec.loader.exec_module(self.module)
                disable = self.module.disable
                for fn, recursive in self.served:
                    setattr(fn, "__dynamo_disable", disable(fn, recursive, wrapping=False))
        finally:
            if rec is not None:
                rec.quiet(prev)
        self.served.clear()

    def lazy_disable(self, fn: Any = None, recursive: bool = True, *, reason: Any = None,
                     wrapping: bool = True) -> Any:
        """`torch._dynamo.disable` for `torch._disable_dynamo` before Dynamo is loaded (module doc)."""
        if self.loaded or fn is None or reason is not None or wrapping:
            self.load("disable")
            return self.module.disable(fn, recursive, reason=reason, wrapping=wrapping)
        self.served.append((fn, recursive))
        return fn

    def getattr(self, name: str) -> Any:
        if not self.loaded:
            caller = sys._getframe(1).f_code
            if name == "trace_rules" and caller.co_name == "init_process_group":
                return _NOTHING_TRACED
            if name == "disable" and caller.co_filename.endswith(_TORCH_COMPILE_PY):
                return self.lazy_disable
            if name == "graph_break":
                return _graph_break_before_dynamo()
            if name.startswith("__") and name.endswith("__"):
                raise AttributeError(name)  # pickle, copy, inspect probing: no reason to load
            self.load(name)
        try:
            return self.module.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {_NAME!r} has no attribute {name!r}") from None


class _LoadPackageFirst(importlib.abc.MetaPathFinder):
    """Before a submodule of the deferred package is imported, the package loads (see module doc)."""

    def __init__(self, package: _LazyPackage) -> None:
        self.package = package

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if self.package.loaded:
            self._leave()
            return None
        if not fullname.startswith(_NAME + ".") or fullname in _IMPORTS_ALONE:
            return None
        self.package.load(fullname)
        self._leave()
        if fullname in sys.modules:
            # The package imported it: hand that module to this import. It leaves sys.modules until
            # the import puts it back: else the import system takes the module's own spec over
            # this one and executes the file again into a second module (two `counters`, two
            # caches: what the program imported would not be what Dynamo uses).
            return importlib.util.spec_from_loader(fullname, _AlreadyLoaded(sys.modules.pop(fullname)))
        return None  # the usual finders find it

    def _leave(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


class _AlreadyLoaded(importlib.abc.Loader):
    def __init__(self, module: types.ModuleType) -> None:
        self.module = module

    def create_module(self, spec: Any) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


# The torch versions this was checked on (the torch internals it relies on: FakeTensorMode's
# reads of Dynamo, MetaConverter.__call__'s keywords, torch._disable_dynamo's cache). Older
# versions import Dynamo at start-up, as before.
VERIFIED_FROM = (2, 13)


ENV_EAGER = "PHANTORA_EAGER_DYNAMO"  # "1": import Dynamo at start-up as torch's FakeTensorMode does (A/B, escape hatch)


def defer() -> bool:
    """Make `torch._dynamo` a package that loads on first use. False if it is already loaded,
    or if `PHANTORA_EAGER_DYNAMO=1` asks for the eager import."""
    if _NAME in sys.modules or os.environ.get(ENV_EAGER) == "1":
        return False
    if torch.__version__ < VERIFIED_FROM:
        log.debug("torch %s: Dynamo imported at start-up (lazy loading verified from %s on)", torch.__version__,
                  ".".join(map(str, VERIFIED_FROM)))
        return False
    # What torch imports on first use behind the program's back, and Dynamo's import brought at
    # start-up before: FakeTensorMode's dispatch (symbolic shapes and sympy, ~0.65 s), torch's
    # `_disable_current_modes` (schema_check_mode), and DTensor (~0.3 s), which the dispatcher
    # imports at the first dispatch of any tensor subclass. These stay start-up costs, outside
    # the program's counted Python, where they were. (A real run pays them at first use: ~1 s
    # at its first subclass dispatch on this machine; not modelled, as before.)
    for name in _SIMULATOR_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:  # torch built without distributed
            log.debug("%s is not importable", name)
    spec = importlib.util.find_spec(_NAME)
    if spec is None or spec.loader is None:
        return False
    module = importlib.util.module_from_spec(spec)
    package = _LazyPackage(module, spec)
    module.__getattr__ = package.getattr  # type: ignore[attr-defined]
    sys.modules[_NAME] = module
    torch._dynamo = module  # type: ignore[attr-defined]
    if _source_imported_per_fake():
        stand_in = _source_stand_in(package)
        package.stand_ins.append(stand_in)
        sys.modules[stand_in.__name__] = stand_in
    sys.meta_path.insert(0, _LoadPackageFirst(package))
    _name_unsourced_fakes()
    return True


def _name_unsourced_fakes() -> None:
    """FakeTensor's converter names a tensor that comes without a source; torch imports Dynamo's
    ConstantSource for that name. Give it a Source of our own instead (used only with symbolic
    shapes; the simulator's FakeTensorMode has none). And no structured-log record: torch's
    LazyTraceHandler takes the first one with a symbolized Python stack (which imported
    torch._inductor) before it finds that no trace directory is set and removes itself."""
    from torch._guards import Source
    from torch._subclasses.meta_utils import MetaConverter

    @dataclasses.dataclass(frozen=True)
    class UnnamedTensor(Source):
        label: str

        @property
        def _name_template(self) -> str:
            return self.label

    unnamed = UnnamedTensor("__phantora_unnamed_tensor")
    torch_call = MetaConverter.__call__
    has_trace = "trace" in inspect.signature(torch_call).parameters  # older torch has no such switch

    def __call__(self: Any, t: Any, shape_env: Any = None, **kwargs: Any) -> Any:
        if shape_env is None:
            if kwargs.get("source") is None:
                kwargs["source"] = unnamed
            if has_trace:
                kwargs["trace"] = False  # no structured-log record (tlparse) of the simulator's own conversions
        return torch_call(self, t, shape_env, **kwargs)

    MetaConverter.__call__ = __call__  # type: ignore[method-assign]
