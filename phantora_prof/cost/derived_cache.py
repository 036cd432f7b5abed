"""Cost models derived from the shipped tables, kept between runs on this machine.

Before its first estimate a rank turns the shipped measurements into the models it queries:
the measured-kernel model divides each of its ~2,600 GEMM records by that GEMM's roofline time
(the full cost model for each), the family model turns ~15,700 sweep points into features.
That took ~0.4-0.7 s of every rank's start (more than the rest of a small script), always with
the same result. The result is pickled under the cache directory
(`~/.cache/phantora-prof/derived`, or `$XDG_CACHE_HOME/phantora-prof/derived`;
`PHANTORA_CACHE_DIR` moves it) under a key that covers everything it is derived from: every
file of `phantora_prof/cost/` (code, tables, GPU profiles), `phantora_prof/protocol.py` (the
call records the models are built from) and the Python version. Any change to them makes a new
key, so a stale model is never read; a model read back is the same objects, float for float,
so traces do not change. `PHANTORA_NO_DERIVED_CACHE=1` builds every time; an unwritable cache
directory is the same as no cache.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
ENV_DISABLE = "PHANTORA_NO_DERIVED_CACHE"
_FORMAT = "derived-v1"  # changed when what is pickled changes shape for reasons the key does not see
_PACKAGE = Path(__file__).resolve().parent.parent  # phantora_prof/


@functools.cache
def source_key(package: Path = _PACKAGE) -> str:
    """Digest of everything the derived models depend on (see module docstring), for the
    package at `package` (phantora_prof/)."""
    h = hashlib.sha256(f"{_FORMAT}|{sys.version}".encode())
    cost = package / "cost"
    files = sorted(p for p in cost.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for p in files + [package / "protocol.py"]:
        h.update(str(p.relative_to(package)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()[:24]


def cache_dir() -> Path:
    from phantora_prof.cache_paths import cache_base

    return cache_base() / "derived"


def load_or_build(name: str, build: Callable[[], T]) -> T:
    """`build()`'s result, from the cache when this machine built it before from the same sources."""
    if os.environ.get(ENV_DISABLE) == "1":
        return build()
    path = cache_dir() / f"{name}-{source_key()}.pkl"
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        pass
    except Exception:  # noqa: BLE001 - a truncated or foreign file: build it again
        log.debug("derived cost model %s unreadable, rebuilding", path, exc_info=True)
    value = build()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{name}-")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - a full disk, a read-only home, an unpicklable model: run without the cache
        log.debug("derived cost model %s not cached", path, exc_info=True)
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return value
