"""The coordinator's objects and Python's cyclic garbage collector.

Nearly everything the coordinator allocates lives until the traces are written: the spans,
their argument dicts and shape lists, flows, GPU work. The collector nevertheless traverses
every container that survived since its last collection, at each of its collections: with the
launcher's policy (launcher._quiet_collector: start-up frozen, a first-generation threshold of
100,000), each collection during a GPT-2 124M run walked the ~100,000 survivors of the last
one (20-35 ms apiece), and that was 20% of the coordinator's handling time without traces,
35% with them, and 25% of the trace build (tests/bench_coordinator.py, issue #18).

None of it is garbage: the engine makes no reference cycles (spans refer to their parents
by key, not by object). So the survivors of each round of messages are frozen (`gc.freeze`:
moved out of the collector's sight, O(1)), and the trace build runs with the collector paused
and freezes what it built. Objects frozen are still freed by reference counting as usual; only
a cycle among them would wait for `gc.unfreeze`, which the launcher calls when the run ends.
Freezing happens only in a process that already keeps frozen objects, i.e. under the launcher's
policy (it freezes start-up and unfreezes at the end): a program that uses the engine on its
own (the tests) keeps its own collector policy, and a build there only pauses the collector.
"""
from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator

log = logging.getLogger(__name__)


_policies = 0  # freezing policies in force in this process (the launcher's, around a run)


@contextlib.contextmanager
def freezing_policy() -> Iterator[None]:
    """Mark the length of a run that keeps frozen objects (the launcher freezes its start-up and
    unfreezes at the end), for `freezing`. A flag rather than `gc.get_freeze_count()`, which
    walks every frozen object to count them: the coordinator of 256 live ranks with traces
    holds ~17 GB of them, and asking once per rank's trace build took ~6 s a trace (95% of
    writing 256 traces, 25 minutes)."""
    global _policies
    _policies += 1
    try:
        yield
    finally:
        _policies -= 1


def freezing() -> bool:
    """The process runs a freezing policy (the launcher's) and the collector at all."""
    return _policies > 0 and gc.isenabled()


def freeze_survivors() -> None:
    """Take what is alive now out of the collector's future walks (the caller has checked
    `freezing`)."""
    if gc.isenabled():
        gc.freeze()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No collection inside (a build that only makes long-lived objects); under a freezing
    policy what it made is frozen after, so the collections of whoever uses it (a trace
    writer) do not walk it."""
    enabled = gc.isenabled()
    freeze = freezing()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()
