"""Trace files written whole or not at all.

Every writer here (Kineto JSON, Perfetto, merged traces) writes to a temporary file in the
destination's directory and renames it over the destination at the end, so a reader never
sees half a file and an interrupted write leaves the previous one. The temporary name holds
the writing process's pid, so whoever stops a writer (phantora_prof/forked_writes.py kills the
children that write Kineto files) can find and remove what it left.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import BinaryIO, Iterator


def temporary_path(path: Path) -> Path:
    """A new temporary name for `path`, in its directory, holding this process's pid."""
    return path.parent / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"


def temporaries_of(path: Path, pid: int) -> list[Path]:
    """The temporary files process `pid` has for `path` (what `temporary_path` named there)."""
    return sorted(path.parent.glob(f".{path.name}.{pid}.*.tmp"))


@contextlib.contextmanager
def atomic_file(path: Path, buffering: int = -1) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` when the block ends without an exception (its
    directory is created); on an exception it is removed and `path` is left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb", buffering=buffering) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
