"""Per-rank Kineto traces -> one Chrome JSON timeline with every rank as its own processes.

`merge_kineto(inputs, out_path)`: `inputs` is a directory (its *.json / *.json.gz files,
sorted by name), one file, or a list of files/directories. Each file's rank is its
`distributedInfo.rank`, else its position in that order. In the output:

- process ids are remapped so ranks never collide: rank r's host process becomes
  (r + 1) * 1000 and its GPU d process (r + 1) * 1000 + 1 + d (a second host pid in one
  file, rare, gets (r + 1) * 1000 + 900 + i); processes are named "rank r CPU" /
  "rank r GPU d" and sorted rank-major (host, then its GPUs). Kineto's metadata for GPU
  pids with no events (it always lists 16) is dropped. String pids ("Spans", "Traces")
  become "rank r Spans" etc.;
- flow ids (`id` of s/t/f events, `bind_id`) are made unique per rank: (r << 32) + id
  for integer ids below 2**32, else the string "r{r}:{id}";
- times are aligned: each file's `ts` is relative to its own `baseTimeNanoseconds`; the
  output uses the first file's, and shifts the others' by the difference (no shift,
  exact text, when the bases agree, as they do for one phantora-prof run);
- top level: `schemaVersion`, `displayTimeUnit`, `baseTimeNanoseconds`,
  `deviceProperties` of the first file, `traceName`, and `mergedRanks` (per rank: file,
  original distributedInfo, pid map). There is no `distributedInfo` (HTA reads one rank
  per file; give it the per-rank files).

Events are written as each file is read: memory holds one input document at a time. The
output is written to a temporary file and renamed; `.gz` output is gzipped
deterministically. Errors are `MergeError` / `tracing.kineto.TraceFormatError` (both
ValueError) with a one-line message naming the file.
"""
from __future__ import annotations

import gzip
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from tracing.atomic import atomic_file
from tracing.kineto import load_trace

__all__ = ["MergeError", "merge_kineto", "trace_files", "PID_STRIDE"]

PID_STRIDE = 1000
_SUFFIXES = (".json", ".json.gz")
_GPU_CATS = frozenset(("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"))
_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


class MergeError(ValueError):
    """Inputs that cannot be merged (no traces, a rank twice); the message names the file."""


def trace_files(inputs: str | Path | Iterable[str | Path]) -> list[Path]:
    """The trace files named by `inputs` (directories expand to their sorted .json/.json.gz)."""
    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    files: list[Path] = []
    for p in map(Path, inputs):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(_SUFFIXES))
            if not found:
                raise MergeError(f"{p}: directory holds no .json or .json.gz trace")
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise MergeError(f"{p}: no such file or directory")
    if not files:
        raise MergeError("no trace files given")
    return files


def _pid_roles(events: list, path: Path) -> tuple[dict[int, int | None], set]:
    """Integer pid -> GPU index (None: host), and the pids that carry events."""
    labels: dict[int, str] = {}
    gpu_evidence: dict[int, bool] = {}
    used: set = set()
    for e in events:
        if not isinstance(e, dict):
            continue
        pid = e.get("pid")
        if e.get("ph") == "M":
            if e.get("name") == "process_labels" and isinstance(pid, int):
                lab = (e.get("args") or {}).get("labels")
                if isinstance(lab, str):
                    labels[pid] = lab
            continue
        used.add(pid)
        if isinstance(pid, int) and e.get("ph") == "X":
            gpu_evidence[pid] = gpu_evidence.get(pid, False) or e.get("cat") in _GPU_CATS
    roles: dict[int, int | None] = {}
    for pid in set(labels) | {p for p in used if isinstance(p, int)}:
        lab = labels.get(pid, "")
        if lab.startswith("GPU"):
            try:
                roles[pid] = int(lab.split()[1])
            except (IndexError, ValueError):
                roles[pid] = pid
        elif lab == "CPU":
            roles[pid] = None
        else:  # no label: GPU pids are device indices and carry GPU activities
            roles[pid] = pid if gpu_evidence.get(pid) and 0 <= pid < 900 else None
    return roles, used


def merge_kineto(inputs: str | Path | Iterable[str | Path], out_path: str | Path) -> Path:
    """Merge per-rank Kineto traces into one Chrome JSON trace at `out_path`; returns it."""
    files = trace_files(inputs)
    out_path = Path(out_path)
    with atomic_file(out_path, buffering=1 << 20) as raw:
        f = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") if out_path.name.endswith(".gz") else raw
        try:
            _merge_into(files, f, out_path)
        finally:
            if f is not raw:
                f.close()
    return out_path


def _merge_into(files: list[Path], f, out_path: Path) -> None:
    f.write(b'{\n  "schemaVersion": 1,\n  "displayTimeUnit": "ms",\n  "traceEvents": [')
    first = True
    base0: int | None = None
    device_props: Any = []
    merged: list[dict] = []
    seen: dict[int, Path] = {}
    for index, path in enumerate(files):
        doc = load_trace(path)
        info = doc.get("distributedInfo")
        rank = info.get("rank") if isinstance(info, dict) else None
        if not isinstance(rank, int) or isinstance(rank, bool):
            rank = index
        if rank < 0:
            raise MergeError(f"{path}: distributedInfo.rank is negative ({rank})")
        if rank in seen:
            raise MergeError(f"rank {rank} appears twice ({seen[rank]} and {path}); "
                             "merge the traces of one run only")
        seen[rank] = path
        base = doc.get("baseTimeNanoseconds")
        base = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else 0
        if base0 is None:
            base0 = base
            device_props = doc.get("deviceProperties", [])
        shift_ns = base - base0
        events = doc["traceEvents"]
        roles, used = _pid_roles(events, path)
        top = (rank + 1) * PID_STRIDE
        pid_map: dict[Any, Any] = {}
        extra_hosts = 0
        for pid in sorted(roles):
            dev = roles[pid]
            if dev is None:
                if any(v == top for v in pid_map.values()):
                    extra_hosts += 1
                    pid_map[pid] = top + 900 + extra_hosts
                else:
                    pid_map[pid] = top
            else:
                pid_map[pid] = top + 1 + dev
        names = {new: (f"rank {rank} CPU" if roles[old] is None else f"rank {rank} GPU {roles[old]}")
                 for old, new in pid_map.items()}

        def new_pid(pid: Any) -> Any:
            if isinstance(pid, int):
                return pid_map.get(pid, pid)
            return f"rank {rank} {pid}" if pid not in ("", None) else f"rank {rank}"

        def new_id(i: Any) -> Any:
            if isinstance(i, int) and 0 <= i < (1 << 32):
                return (rank << 32) + i
            return f"r{rank}:{i}"

        chunk: list[bytes] = []
        named: set = set()
        for e in events:
            if not isinstance(e, dict):
                continue
            pid = e.get("pid")
            ph = e.get("ph")
            if ph == "M":
                if isinstance(pid, int) and pid not in used:
                    continue  # kineto's metadata for GPUs this rank never used
                e = dict(e)
                mp = new_pid(pid)
                e["pid"] = mp
                name = e.get("name")
                if name == "process_name" and mp in names:
                    e["args"] = {"name": names[mp]}
                    named.add(mp)
                elif name == "process_labels" and mp in names:
                    e["args"] = {"labels": names[mp]}
                elif name == "process_sort_index" and isinstance(mp, int):
                    e["args"] = {"sort_index": mp}
            else:
                e = dict(e)
                e["pid"] = new_pid(pid)
                if ph in ("s", "t", "f") and "id" in e:
                    e["id"] = new_id(e["id"])
                if "bind_id" in e:
                    e["bind_id"] = new_id(e["bind_id"])
            if shift_ns and isinstance(e.get("ts"), (int, float)):
                e["ts"] = (round(e["ts"] * 1000) + shift_ns) / 1000
            chunk.append(orjson.dumps(e, option=_OPTS))
        for mp, name in sorted(names.items()):
            if mp not in named and mp in {new_pid(p) for p in used}:
                chunk.append(orjson.dumps({"name": "process_name", "ph": "M", "ts": 0, "pid": mp, "tid": 0,
                                           "args": {"name": name}}))
        if chunk:
            f.write((b",\n  " if not first else b"\n  ") + b",\n  ".join(chunk))
            first = False
        merged.append({"rank": rank, "file": str(path), "distributedInfo": info,
                       "pids": {str(k): v for k, v in pid_map.items() if k in used}})
        del doc, events, chunk
    f.write(b"\n  ],\n")
    tail = {"baseTimeNanoseconds": base0 or 0, "deviceProperties": device_props,
            "traceName": out_path.name, "mergedRanks": sorted(merged, key=lambda m: m["rank"])}
    body = orjson.dumps(tail, option=_OPTS | orjson.OPT_INDENT_2)
    f.write(b"  " + body.strip()[1:-1].strip() + b"\n}\n")


def merge_to_perfetto(inputs: str | Path | Iterable[str | Path], out_path: str | Path, stats: Any = None) -> Path:
    """Per-rank Kineto traces -> one Perfetto .pftrace (`tracing.perfetto.write_perfetto`),
    reading one file at a time. Ranks as in `merge_kineto`; a rank twice is a MergeError."""
    from tracing.perfetto import rank_trace_from_kineto, write_perfetto

    files = trace_files(inputs)

    def ranks():
        seen: dict[int, Path] = {}
        for index, path in enumerate(files):
            tr = rank_trace_from_kineto(load_trace(path), default_rank=index)
            if tr.rank in seen:
                raise MergeError(f"rank {tr.rank} appears twice ({seen[tr.rank]} and {path}); "
                                 "merge the traces of one run only")
            seen[tr.rank] = path
            yield tr

    return write_perfetto(ranks(), out_path, stats=stats)
