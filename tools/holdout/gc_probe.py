"""How much of a real training step is Python's cyclic garbage collector? (issue #15)

The simulator charges the program's Python by its counted bytecodes and leaves the collector's
work out (runtime/host/pyhost.py: where collections fall depends on the simulator's own
allocations, so counting them would make traces irreproducible). On a GPU machine the
collector runs inside the step. This wrapper runs a training script unchanged and measures,
per optimizer step: the step's wall time, the time spent in collections of each generation
(`gc.callbacks`), how many collections ran, and how many objects the collector tracks.

    python tools/holdout/gc_probe.py [--freeze-at N] SCRIPT ARGS...

`--freeze-at N` calls `gc.freeze()` after optimizer step N (the objects alive then, the model
and the framework's, leave the collector's full passes): the difference in step time between a
run with and one without is what full collections of the start-up heap cost. Prints
`GCPROBE {...}` at exit: per step `step_ms`, `gc_ms` [gen0, gen1, gen2], `collections`
[gen0, gen1, gen2]; and `tracked` (len(gc.get_objects()) at the end), `thresholds`.
"""
from __future__ import annotations

import atexit
import gc
import json
import os
import runpy
import sys
import time


def main() -> None:
    args = sys.argv[1:]
    freeze_at = None
    if args[:1] == ["--freeze-at"]:
        freeze_at, args = int(args[1]), args[2:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))

    clock = time.perf_counter
    gc_ns = [0.0, 0.0, 0.0]
    gc_n = [0, 0, 0]
    started: list[float] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(clock())
        elif started:
            gen = info.get("generation", 2)
            gc_ns[gen] += clock() - started.pop()
            gc_n[gen] += 1

    gc.callbacks.append(on_gc)
    steps: list[dict] = []
    last = {"t": None, "gc": [0.0, 0.0, 0.0], "n": [0, 0, 0]}

    from torch.optim.optimizer import register_optimizer_step_post_hook

    def on_step(optimizer, a, kw) -> None:
        now = clock()
        if last["t"] is not None:
            steps.append({"step_ms": round((now - last["t"]) * 1e3, 3),
                          "gc_ms": [round((g - p) * 1e3, 3) for g, p in zip(gc_ns, last["gc"])],
                          "collections": [n - p for n, p in zip(gc_n, last["n"])]})
        last.update(t=now, gc=list(gc_ns), n=list(gc_n))
        if freeze_at is not None and len(steps) + 1 == freeze_at:
            gc.freeze()

    register_optimizer_step_post_hook(on_step)

    def report() -> None:
        if int(os.environ.get("RANK", "0")) != 0:
            return
        print("GCPROBE " + json.dumps({"steps": steps, "tracked": len(gc.get_objects()),
                                       "frozen": gc.get_freeze_count(), "thresholds": gc.get_threshold(),
                                       "freeze_at": freeze_at}), flush=True)

    atexit.register(report)
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
