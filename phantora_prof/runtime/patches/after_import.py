"""Run a patch when a module is first imported, not before: importing a heavy torch package
(DTensor: ~1.5 s) only to patch it would cost every script that never uses it."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)

_hooks: dict[str, list[Callable[[Any], None]]] = {}
_lock = threading.Lock()
_finder: "_AfterImport | None" = None


def when_imported(name: str, patch: Callable[[Any], None]) -> None:
    """Call `patch(module)` once module `name` has been executed (now, if it already is)."""
    global _finder
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
        return
    with _lock:
        _hooks.setdefault(name, []).append(patch)
        if _finder is None:
            _finder = _AfterImport()
            sys.meta_path.insert(0, _finder)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched name, asks the other finders and wraps the loader."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchingLoader(spec.loader)
                return spec
            if spec is not None:
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: Any):
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        with _lock:
            patches = _hooks.pop(module.__name__, [])
        for patch in patches:
            patch(module)

    def __getattr__(self, name: str) -> Any:  # get_code, get_source, is_package, ... of the real loader
        return getattr(self._inner, name)
