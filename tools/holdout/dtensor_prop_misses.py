"""Count DTensor sharding-propagation cache misses per optimizer step of any script.

Usage: python tools/holdout/dtensor_prop_misses.py SCRIPT [ARGS...]
(also under torchrun, or under phantora-prof). Prints to stderr, once per optimizer step:
``PROPMISS rank R step N misses M ops {op: count}``.

Why: a miss runs DTensor's whole sharding propagation (the op on fake tensors under a dispatch
mode, ~1-3 ms of host time on the H200 host), a hit a cache lookup. Which calls miss depends on
the torch version (what the schema's hash keys on), so a real run and a simulated one with
different torch versions can differ by tens of ms per step for the same script. Plain
PyTorch; nothing here knows about phantora-prof.
"""
from __future__ import annotations

import collections
import os
import runpy
import sys


def _install() -> None:
    from torch.distributed.tensor import DTensor
    from torch.optim.optimizer import register_optimizer_step_post_hook

    prop = DTensor._op_dispatcher.sharding_propagator
    misses: collections.Counter = collections.Counter()
    original = prop.propagate_op_sharding_non_cached

    def counted(schema):
        misses[str(schema.op)] += 1
        return original(schema)

    prop.propagate_op_sharding_non_cached = counted
    cache = getattr(prop, "propagate_op_sharding", None)
    if cache is not None and type(cache).__name__ == "LocalLRUCache":
        # the Python cache holds the method it was built with: rebuild it around the counter
        prop.propagate_op_sharding = type(cache)(counted)
    step = [0]
    rank = os.environ.get("RANK", "0")

    def report(*_):
        print(f"PROPMISS rank {rank} step {step[0]} misses {sum(misses.values())} ops {dict(misses)}",
              file=sys.stderr, flush=True)
        misses.clear()
        step[0] += 1

    register_optimizer_step_post_hook(report)


def main() -> None:
    script, *args = sys.argv[1:]
    _install()
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
