"""Count the Python a real run executes, per code object, with the simulator's own hook (issue #15).

    COUNT_OUT=counts.json python tools/holdout/count_python.py SCRIPT ARGS...

Runs SCRIPT as `python SCRIPT ARGS` would (no simulator), with native/pyhost/pyhost.c's
trace hook counting on the main thread, and writes [[file, first line, qualname, calls,
instructions], ...] at exit: the same counts a simulated run charges, so that a sampled real
run's time per file can be turned into a cost per instruction (tools/holdout/python_rates.py).
Two runs that differ only in their step count give the counts of one step.
"""
from __future__ import annotations

import atexit
import json
import os
import runpy
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from phantora_prof.runtime.host import pyhost  # noqa: E402


def main() -> None:
    native = pyhost.load()
    if native is None:
        sys.exit("count_python.py: the hook could not be built (no C compiler?)")
    native.configure("/nonexistent-prefix/", [])  # no file is the simulator's
    native.by_code(True)
    out = os.environ["COUNT_OUT"]

    def write() -> None:
        rows = sorted(native.code_counts(), key=lambda r: (-r[4], r[0], r[1]))
        with open(out, "w") as f:
            json.dump(rows, f)

    atexit.register(write)
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    native.attach()
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
