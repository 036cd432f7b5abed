"""Compare a real and a simulated CUDA allocator trace (`memory_trace.py` pickles).

    python tools/holdout/compare_memory_trace.py REAL.pickle SIM.pickle [--json OUT.json]

Per device 0: how many allocations, frees, segment allocations and frees each trace holds; the
sequence of allocation sizes matched one for one (difflib: the share of the real allocations
that the simulated sequence has in the same order with the same size); allocation sizes that
one trace has more often than the other; and the peak of live allocated bytes, replayed from
each trace. A real snapshot holds the trace since recording began (`max_entries` permitting).
"""
from __future__ import annotations

import argparse
import collections
import difflib
import json
import pickle
from typing import Any


def summarize(snapshot: dict) -> dict[str, Any]:
    trace = snapshot["device_traces"][0] if snapshot.get("device_traces") else []
    counts = collections.Counter(e["action"] for e in trace)
    sizes = [e["size"] for e in trace if e["action"] == "alloc"]
    segments = [e["size"] for e in trace if e["action"] == "segment_alloc"]
    live = peak = 0
    open_allocs: dict[int, int] = {}
    for e in trace:
        if e["action"] == "alloc":
            open_allocs[e["addr"]] = e["size"]
            live += e["size"]
            peak = max(peak, live)
        elif e["action"] == "free_completed" and e["addr"] in open_allocs:
            live -= open_allocs.pop(e["addr"])
    return {"counts": dict(counts), "alloc_sizes": sizes, "segment_sizes": segments, "peak_live_bytes": peak,
            "reserved_at_end": sum(s["total_size"] for s in snapshot.get("segments", ()))}


def compare(real: dict, sim: dict) -> dict[str, Any]:
    r, s = summarize(real), summarize(sim)
    matcher = difflib.SequenceMatcher(a=r["alloc_sizes"], b=s["alloc_sizes"], autojunk=False)
    matched = sum(block.size for block in matcher.get_matching_blocks())
    rc, sc = collections.Counter(r["alloc_sizes"]), collections.Counter(s["alloc_sizes"])
    diff = {size: sc[size] - rc[size] for size in set(rc) | set(sc) if sc[size] != rc[size]}
    worst = sorted(diff.items(), key=lambda kv: -abs(kv[1]) * kv[0])[:12]
    return {
        "real": {k: v for k, v in r.items() if k not in ("alloc_sizes", "segment_sizes")},
        "sim": {k: v for k, v in s.items() if k not in ("alloc_sizes", "segment_sizes")},
        "allocations_matched_in_order": matched,
        "allocations_real": len(r["alloc_sizes"]),
        "allocations_sim": len(s["alloc_sizes"]),
        "matched_share": round(matched / max(1, len(r["alloc_sizes"])), 4),
        "segments_real": r["segment_sizes"],
        "segments_sim": s["segment_sizes"],
        "size_count_differences": [{"size": k, "sim_minus_real": v} for k, v in worst],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("real")
    ap.add_argument("sim")
    ap.add_argument("--json")
    a = ap.parse_args()
    with open(a.real, "rb") as f:
        real = pickle.load(f)
    with open(a.sim, "rb") as f:
        sim = pickle.load(f)
    result = compare(real, sim)
    text = json.dumps(result, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    short = {k: v for k, v in result.items() if k not in ("segments_real", "segments_sim")}
    print(json.dumps(short, indent=1))


if __name__ == "__main__":
    main()
