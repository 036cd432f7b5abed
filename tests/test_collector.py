"""The coordinator's collector policy (engine/collector.py)."""
from __future__ import annotations

import gc


def test_freezing_follows_the_launchers_policy_without_counting_frozen_objects(monkeypatch):
    """`freezing()` is asked once per rank's trace build: it must not walk the frozen objects
    (gc.get_freeze_count does; with 256 live ranks that took ~6 s a trace)."""
    from phantora_prof.engine import collector
    from phantora_prof.launcher import _quiet_collector

    def walks(*_a):
        raise AssertionError("gc.get_freeze_count walks every frozen object")

    monkeypatch.setattr(gc, "get_freeze_count", walks)
    assert not collector.freezing()  # a program using the engine on its own keeps its policy
    with _quiet_collector():
        assert collector.freezing()
        with collector.paused():
            assert not gc.isenabled()
        assert gc.isenabled()
    assert not collector.freezing()
