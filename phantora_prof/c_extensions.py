"""Small CPython extensions written in C (native/<name>/<name>.c), compiled on first use.

The C compiler builds each one once per source and interpreter into the cache
(`cache_paths.cache_base()/native/<name>/<key>/`); concurrent builders (ranks starting
together) each write a temporary file and rename it into place. Without a compiler, or when a
build fails, `load` returns None and the caller falls back to its Python path (a warning says
what failed). Used for the host model's trace hook (native/pyhost/pyhost.c), the Perfetto
event encoder (native/perfetto/perfetto_events.c) and the Kineto event renderer
(native/kineto/kineto_events.c).
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from phantora_prof.cache_paths import cache_base

log = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parent  # phantora_prof/


def source(rel: str | Path) -> Path | None:
    """The C source `rel` (relative to the repository root, e.g. native/pyhost/pyhost.c) of a
    checkout, else of the copy a wheel ships in phantora_prof/native_src/."""
    for root in (PACKAGE_DIR.parent, PACKAGE_DIR / "native_src"):
        p = root / rel
        if p.exists():
            return p
    return None


def build(rel: str | Path, module: str) -> Path | None:
    """The compiled extension `module` from source `rel` for this Python, built if needed."""
    src = source(rel)
    if src is None:
        return None
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    key = hashlib.sha256(src.read_bytes() + sys.version.encode() + suffix.encode()).hexdigest()[:16]
    out = cache_base() / "native" / Path(rel).parent.name / key / f"{module}{suffix}"
    if out.exists():
        return out
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent)) / out.name
    cmd = [cc, "-O2", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", str(src), "-o", str(tmp)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        log.warning("compiling %s failed: %s", src.name, r.stderr.strip()[-500:])
        shutil.rmtree(tmp.parent, ignore_errors=True)
        return None
    os.replace(tmp, out)  # atomic: concurrent ranks may build at once
    shutil.rmtree(tmp.parent, ignore_errors=True)
    return out


def load(rel: str | Path, module: str) -> Any | None:
    """The imported extension `module` (built from `rel` if needed), or None without one."""
    mod = sys.modules.get(module)
    if mod is not None:
        return mod
    path = build(rel, module)
    if path is None:
        return None
    spec = importlib.util.spec_from_file_location(module, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[module] = mod
    return mod
