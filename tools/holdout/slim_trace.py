"""Write a smaller copy of a kept profile: the event categories no reader of this repository uses
left out (issue #15's housekeeping: the device tool copies the tracked tree, 64 MiB at most).

    python tools/holdout/slim_trace.py TRACE.pt.trace.json.gz [--drop ac2g,fwdbwd] [--unlinked-runtime] [--out FILE]

Default drop: the flow events (`ac2g`: a launch's arrow to its kernel; `fwdbwd`: forward op to
backward node), which Perfetto draws but the calibration (trace_ops, families, host_costs) does
not read: it links kernels to launches by `args.correlation` and ops by time ranges. The output
is valid JSON (the family sweep's unescaped range names repaired, as trace_ops.load_events reads
them), gzip level 9. `--unlinked-runtime` also drops the CUDA runtime calls that launched nothing
(`cudaPeekAtLastError`, `cudaFuncSetAttribute`, event records: ~40% of a family sweep's events), for
sweeps, whose readers take kernels and their launches only; a model's profile keeps them (the
host side of `diff` reads its synchronizations). Whatever was generated from the original must come out the same from the
copy (tests/test_generated_data.py rebuilds the H100 family table from its sweeps)."""
from __future__ import annotations

import argparse
import bisect
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from phantora_prof.calibrate.trace_ops import load_events  # noqa: E402


def in_sweep_ranges(events: list[dict]) -> list[dict]:
    """The events a family sweep's calibration reads: host events (any thread's: the backward runs
    on autograd's) inside the time of a `sweep:` range, the GPU activity they launched, the ranges
    themselves and the metadata. The sweep's two warm-up calls per configuration run outside its
    range and are profiled too: about half of its events, which nothing reads."""
    ranges = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                    if e.get("cat") == "user_annotation" and e.get("name", "").startswith("sweep:"))
    starts = [r[0] for r in ranges]

    def inside(e: dict) -> bool:
        i = bisect.bisect_right(starts, e["ts"]) - 1
        return i >= 0 and e["ts"] + e.get("dur", 0) <= ranges[i][1]

    host = [e for e in events if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver", "user_annotation")
            and e.get("ph") == "X"]
    kept_host = {id(e) for e in host if inside(e)}
    launched = {e.get("args", {}).get("correlation") for e in host if id(e) in kept_host}
    gpu = ("kernel", "gpu_memset", "gpu_memcpy")
    return [e for e in events
            if id(e) in kept_host
            or (e.get("cat") in gpu and e.get("args", {}).get("correlation") in launched)
            or e.get("cat") == "gpu_user_annotation"
            or e.get("ph") != "X"]  # metadata (process and thread names)


def slim(src: Path, out: Path, drop: set[str], unlinked_runtime: bool = False,
         sweep_ranges_only: bool = False) -> tuple[int, int]:
    events = load_events(src)
    kept = [e for e in events if e.get("cat") not in drop]
    if sweep_ranges_only:
        kept = in_sweep_ranges(kept)
    if unlinked_runtime:
        on_gpu = {e["args"].get("correlation") for e in kept
                  if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy") and "args" in e}
        kept = [e for e in kept if e.get("cat") != "cuda_runtime" or e.get("args", {}).get("correlation") in on_gpu]
    with gzip.open(src, "rt") as f:
        head = f.read(4096)
    doc: dict = {}
    try:  # the trace's top-level fields besides its events (schema version, device properties)
        start = json.loads(head[: head.index('"traceEvents"')].rstrip().rstrip(",") + "}")
        doc.update(start)
    except ValueError:
        pass
    doc["traceEvents"] = kept
    with gzip.open(out, "wt", compresslevel=9) as f:
        json.dump(doc, f, separators=(",", ":"))
    return len(events), len(kept)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", type=Path)
    p.add_argument("--drop", default="ac2g,fwdbwd")
    p.add_argument("--unlinked-runtime", action="store_true",
                   help="also drop CUDA runtime calls whose correlation id no GPU activity has (sweeps only)")
    p.add_argument("--sweep-ranges-only", action="store_true",
                   help="keep only what ran inside the `sweep:` ranges (sweeps only: drops the warm-up calls)")
    p.add_argument("--out", type=Path, default=None, help="default: replace TRACE")
    a = p.parse_args()
    out = a.out or a.trace.with_name(a.trace.name + ".slim")
    n, k = slim(a.trace, out, set(a.drop.split(",")), a.unlinked_runtime, a.sweep_ranges_only)
    if a.out is None:
        out.replace(a.trace)
        out = a.trace
    print(f"{out}: {k} of {n} events kept, {out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
