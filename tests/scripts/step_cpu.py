"""Run a training script (argv[1:]) and print the rank process's CPU and wall seconds per optimizer step.

For tests/bench_runtime.py: one run gives a sample per step (an optimizer step post-hook reads
getrusage, the process's own user + system time, autograd's thread included), so start-up and
the machine's drift between runs stay out of a per-step figure. Prints
`STEP_CPU_S [..]` and `STEP_WALL_S [..]` at exit: the differences between consecutive steps. Wall
time is read with `time.clock_gettime(CLOCK_MONOTONIC)`, which the simulator leaves real (it
replaces `time.perf_counter` and friends with the virtual clock); a step's wall time includes
the rank's waits for the coordinator."""
import atexit
import json
import resource
import runpy
import sys
import time

from torch.optim.optimizer import register_optimizer_step_post_hook

marks: list[float] = []
walls: list[float] = []


def _mark(optimizer, args, kwargs) -> None:
    r = resource.getrusage(resource.RUSAGE_SELF)
    marks.append(r.ru_utime + r.ru_stime)
    walls.append(time.clock_gettime(time.CLOCK_MONOTONIC))


def _report() -> None:
    print("STEP_CPU_S " + json.dumps([round(b - a, 4) for a, b in zip(marks, marks[1:])]), flush=True)
    print("STEP_WALL_S " + json.dumps([round(b - a, 4) for a, b in zip(walls, walls[1:])]), flush=True)


register_optimizer_step_post_hook(_mark)
atexit.register(_report)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
