"""A kernel database: GPU activities measured on a real GPU per exact op signature.

`phantora-prof db build` and `--kernel-times measure` fill one (phantora_prof/measure/ times
each distinct op call of the user's own script on the GPU); `--kernel-db DB` reads one. It
is the most specific source of kernel times there is (the script's own shapes, dtypes and
strides on the user's own GPU, torch and CUDA), so cost.estimate consults it first.

Signature: the op name, every argument (tensors as shape, strides and dtype; CPU tensors
marked, with pinnedness; lists of tensors as lists; scalars, dtypes, devices as the
runtime captured them) and the output shapes and dtypes. Two calls with the same
signature launch the same kernels for the same time (up to data-dependent ops, whose
measured time is that of the random inputs the measurement used).

File (JSON, gzipped when the name ends in .gz; schema "phantora-kernel-db/1"):
    {"schema", "device": {name, torch, cuda, capability}, "gpu": simulator key or null,
     "names": [kernel names, interned],
     "entries": [{"sig": {...}, "k": [[kind, name index, ns, grid, block, regs, smem, bytes, api], ...],
                  "reps": N} | {"sig": {...}, "error": "why it could not be measured"}]}
torch-free: the simulator reads it on machines without a GPU.
"""
from __future__ import annotations

import gzip
import json
import logging
import math
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from phantora_prof.errors import PhantoraError
from phantora_prof.protocol import TensorArg

log = logging.getLogger(__name__)

SCHEMA = "phantora-kernel-db/1"


class KernelDBError(PhantoraError):
    """A kernel database file that cannot be read or does not match the expected schema."""


# ------------------------------------------------------------------ signatures

def _enc(v: Any) -> Any:
    if isinstance(v, TensorArg):
        if v.on_gpu:
            return {"T": [list(v.shape), list(v.stride), v.dtype]}
        return {"C": [list(v.shape), list(v.stride), v.dtype, bool(v.pinned)]}
    if isinstance(v, (list, tuple)):
        return [_enc(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return {"f": repr(v)}
    if isinstance(v, dict):
        return {str(k): _enc(x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def signature(op: Any) -> dict:
    """The JSON-able signature of a captured OpCall (or anything with name/args/kwargs/outputs)."""
    outs = []
    for o in _iter_tensors(op.outputs):
        outs.append([list(o.shape), o.dtype])
    return {"op": op.name, "args": _enc(tuple(op.args)), "kwargs": _enc(dict(op.kwargs or {})), "out": outs}


def signature_key(sig: dict) -> str:
    return json.dumps(sig, sort_keys=True, separators=(",", ":"))


def _iter_tensors(x: Any) -> Iterable[TensorArg]:
    if isinstance(x, TensorArg):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _iter_tensors(y)


# ------------------------------------------------------------------ records

@dataclass(frozen=True)
class MeasuredKernel:
    """One GPU activity of a measured call, as the profiler reported it."""

    kind: str  # kernel | memcpy | memset
    name: str
    duration_ns: int
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)
    registers_per_thread: int = 0
    shared_memory: int = 0
    bytes: int = 0
    launch_api: str = "cudaLaunchKernel"

    def to_row(self, name_index: int) -> list:
        return [self.kind, name_index, int(self.duration_ns), list(self.grid), list(self.block),
                int(self.registers_per_thread), int(self.shared_memory), int(self.bytes), self.launch_api]

    @classmethod
    def from_row(cls, row: list, names: list[str]) -> "MeasuredKernel":
        kind, ni, dur, grid, block, regs, smem, nbytes, api = row
        return cls(kind, names[ni], int(dur), tuple(grid), tuple(block), int(regs), int(smem), int(nbytes), api)


@dataclass
class Entry:
    sig: dict
    kernels: tuple[MeasuredKernel, ...] = ()
    reps: int = 0
    error: str | None = None

    @property
    def gpu_ns(self) -> int:
        return sum(k.duration_ns for k in self.kernels)


@dataclass
class KernelDB:
    """Measured kernels by op signature, with the device they were measured on."""

    device: dict = field(default_factory=dict)
    gpu: str | None = None  # the simulator's GPU key for that device (h200, h100, ...), if known
    entries: dict[str, Entry] = field(default_factory=dict)

    # ---------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self.entries)

    def get(self, sig: dict) -> Entry | None:
        return self.entries.get(signature_key(sig))

    def add(self, entry: Entry) -> None:
        self.entries[signature_key(entry.sig)] = entry

    def merge(self, other: "KernelDB") -> None:
        """Entries of `other` not in this one are added; a measured entry replaces an error."""
        if not self.device:
            self.device = dict(other.device)
        if self.gpu is None:
            self.gpu = other.gpu
        for key, e in other.entries.items():
            mine = self.entries.get(key)
            if mine is None or (mine.error is not None and e.error is None):
                self.entries[key] = e

    # ---------------------------------------------------------- files
    @classmethod
    def load(cls, path: str | os.PathLike) -> "KernelDB":
        p = Path(path)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            raise KernelDBError(f"kernel database {p} does not exist (build one with `phantora-prof db build`)") from None
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise KernelDBError(f"kernel database {p} is not JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise KernelDBError(f"{p} is not a phantora-prof kernel database (schema {SCHEMA!r}); "
                                "build one with `phantora-prof db build --out DB python train.py`")
        names = doc.get("names", [])
        db = cls(device=doc.get("device") or {}, gpu=doc.get("gpu"))
        for rec in doc.get("entries", []):
            if "error" in rec:
                db.add(Entry(rec["sig"], error=str(rec["error"])))
            else:
                ks = tuple(MeasuredKernel.from_row(r, names) for r in rec.get("k", []))
                db.add(Entry(rec["sig"], ks, int(rec.get("reps", 0))))
        return db

    @classmethod
    def load_or_empty(cls, path: str | os.PathLike) -> "KernelDB":
        return cls.load(path) if Path(path).exists() else cls()

    def to_doc(self) -> dict:
        names: list[str] = []
        index: dict[str, int] = {}
        entries = []
        for key in sorted(self.entries):  # sorted: the same DB gives the same file
            e = self.entries[key]
            if e.error is not None:
                entries.append({"sig": e.sig, "error": e.error})
                continue
            rows = []
            for k in e.kernels:
                i = index.get(k.name)
                if i is None:
                    i = index[k.name] = len(names)
                    names.append(k.name)
                rows.append(k.to_row(i))
            entries.append({"sig": e.sig, "k": rows, "reps": e.reps})
        return {"schema": SCHEMA, "device": self.device, "gpu": self.gpu, "names": names, "entries": entries}

    def save(self, path: str | os.PathLike) -> None:
        """Atomic write (a reader never sees half a file); gzipped when the name ends in .gz."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.to_doc(), separators=(",", ":")).encode()
        if p.name.endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=p.name + ".")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide the database from other users
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # ---------------------------------------------------------- coverage
    def coverage(self) -> "Coverage":
        by_op: dict[str, list[int]] = {}
        errors: Counter = Counter()
        for e in self.entries.values():
            c = by_op.setdefault(e.sig["op"], [0, 0, 0])
            if e.error is not None:
                c[1] += 1
                errors[e.error.splitlines()[0][:120] if e.error else "?"] += 1
            else:
                c[0] += 1
                c[2] += e.gpu_ns
        return Coverage(by_op, errors)


@dataclass
class Coverage:
    by_op: dict[str, list[int]]  # op -> [measured signatures, failed signatures, summed GPU ns of one call each]
    errors: Counter

    @property
    def measured(self) -> int:
        return sum(c[0] for c in self.by_op.values())

    @property
    def failed(self) -> int:
        return sum(c[1] for c in self.by_op.values())
