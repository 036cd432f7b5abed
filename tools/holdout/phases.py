"""Host time per phase of a training step: forward, backward, optimizer (issue #15).

Runs a training script unchanged and reads `time.perf_counter` after every
`torch.cuda.synchronize()`, around `torch.autograd.backward` and around every optimizer step
(torch's global optimizer hooks). A step's forward is the time from the last synchronize (or
the previous optimizer step) before its backward to the backward's start. Under `python` or
`torchrun` on a GPU these are the host's times (nothing in a phase waits for the GPU unless
the script syncs inside it); under phantora-prof they are the simulated host clock's.
Comparing the two says which phase the host model gets wrong.

    python tools/holdout/phases.py [--cprofile FILE] SCRIPT ARGS...
    phantora-prof python tools/holdout/phases.py SCRIPT ARGS...

Prints `PHASES {"forward": [ms per step], "backward": [...], "optimizer": [...]}` when the
script ends (rank 0 only). With `--cprofile FILE` (real runs only) the main thread's work
from the fourth optimizer step on runs under cProfile and the statistics are written to FILE
(autograd's thread is not seen).
"""
from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import time
from collections.abc import Callable

WARM_STEPS = 3


def phases_of(marks: list[tuple[str, float]]) -> dict[str, list[float]]:
    """Per optimizer step: forward (from the last sync or optimizer step before the backward to
    the backward's start), backward and optimizer durations in ms."""
    out: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
    start = None
    bwd0 = bwd1 = opt0 = None
    for kind, t in marks:
        if kind in ("sync1", "opt1") and bwd0 is None:
            start = t
        if kind == "bwd0" and bwd0 is None:
            bwd0 = t
        elif kind == "bwd1":
            bwd1 = t
        elif kind == "opt0":
            opt0 = t
        elif kind == "opt1" and opt0 is not None:
            if bwd0 is not None and bwd1 is not None and start is not None:
                out["forward"].append(round((bwd0 - start) * 1e3, 4))
                out["backward"].append(round((bwd1 - bwd0) * 1e3, 4))
                out["optimizer"].append(round((t - opt0) * 1e3, 4))
            start, bwd0, bwd1, opt0 = t, None, None, None
    return out


def mark_phases(mark: Callable[[str], None]) -> None:
    """Call `mark("opt0")` / `mark("opt1")` around every optimizer step and `mark("bwd0")` /
    `mark("bwd1")` around every `torch.autograd.backward` (Tensor.backward goes through it).
    The optimizer pre-hook goes first of the global pre-hooks: under phantora-prof the
    simulator's own hook charges the step's per-parameter host work, which belongs to the
    optimizer phase. (Also host_interleaved.py's.)"""
    import torch
    from torch.optim import optimizer as _optimizer
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    def opt_pre(*_) -> None:  # a hook must return None
        mark("opt0")

    def opt_post(*_) -> None:
        mark("opt1")

    handle = register_optimizer_step_pre_hook(opt_pre)
    _optimizer._global_optimizer_pre_hooks.move_to_end(handle.id, last=False)
    register_optimizer_step_post_hook(opt_post)
    backward = torch.autograd.backward

    def timed_backward(*a, **k):
        mark("bwd0")
        try:
            return backward(*a, **k)
        finally:
            mark("bwd1")

    torch.autograd.backward = timed_backward


def main() -> None:
    args = sys.argv[1:]
    cprofile_out = None
    if args[:1] == ["--cprofile"]:
        cprofile_out, args = args[1], args[2:]
    script_dir = os.path.dirname(os.path.abspath(args[0]))
    sys.path.insert(0, script_dir)
    import torch

    marks: list[tuple[str, float]] = []
    prof = None
    if cprofile_out is not None:
        import cProfile
        prof = cProfile.Profile()
    opt_steps = [0]

    def mark(kind: str) -> None:
        marks.append((kind, time.perf_counter()))
        if kind == "opt1":
            opt_steps[0] += 1
            if prof is not None and opt_steps[0] == WARM_STEPS:
                prof.enable()

    mark_phases(mark)
    synchronize = torch.cuda.synchronize

    def timed_synchronize(*a, **k):
        r = synchronize(*a, **k)
        marks.append(("sync1", time.perf_counter()))
        return r

    torch.cuda.synchronize = timed_synchronize

    def report() -> None:
        if prof is not None:
            prof.disable()
            prof.dump_stats(cprofile_out)
        if int(os.environ.get("RANK", "0")) == 0:
            print("PHASES " + json.dumps(phases_of(marks)), flush=True)

    atexit.register(report)
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
