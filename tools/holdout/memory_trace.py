"""Record a training script's CUDA allocator trace, on a GPU or under the simulator.

    python tools/holdout/memory_trace.py [--stacks] OUT.pickle SCRIPT ARGS...
    phantora-prof --no-trace python tools/holdout/memory_trace.py [--stacks] OUT.pickle SCRIPT ARGS...

Turns on `torch.cuda.memory._record_memory_history` (every allocator action; with `--stacks`
also the Python stack of each allocation) before the script runs, runs it unchanged (`__main__`, its argv),
and writes `torch.cuda.memory._snapshot()` to OUT.pickle when it ends. The two pickles, real
and simulated, are compared by `compare_memory_trace.py`: the allocator model's decisions
(sizes, segments, reuse) against the real allocator's, action by action.
"""
from __future__ import annotations

import atexit
import os
import pickle
import runpy
import sys


def main() -> None:
    argv = sys.argv[1:]
    stacks = argv[:1] == ["--stacks"]
    if stacks:
        argv = argv[1:]
    out, script, args = argv[0], argv[1], argv[2:]
    import torch

    torch.cuda.memory._record_memory_history(enabled="all", context="alloc" if stacks else None, stacks="python")

    def dump() -> None:
        snapshot = torch.cuda.memory._snapshot()
        with open(out, "wb") as f:
            pickle.dump(snapshot, f)

    atexit.register(dump)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
