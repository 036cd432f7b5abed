"""DTensor's strided-shard arithmetic memoised with its host time replayed
(runtime/patches/sharding_memo.py, issue #17)."""
from __future__ import annotations

from conftest import SCRIPTS


def _calls(out: str) -> tuple[bool, list[tuple[str, int]]]:
    lines = [ln.split() for ln in out.splitlines() if ln.strip()]
    memo = lines[0] == ["memo", "True"]
    calls = [(" ".join(ln[:-1]), int(ln[-1])) for ln in lines[1:]]
    return memo, calls


def test_memo_gives_the_same_results_and_host_time_as_running_the_ops(cli):
    script = str(SCRIPTS / "strided_shard_cost.py")
    fast = cli("--no-trace", "python", script)
    traced = cli("--out", "traces", "python", script)
    assert fast.returncode == 0, fast.stderr[-2000:]
    assert traced.returncode == 0, traced.stderr[-2000:]
    memo_on, fast_calls = _calls(fast.stdout)
    memo_off, traced_calls = _calls(traced.stdout)
    assert memo_on and not memo_off  # a trace records every op: no memo there
    assert [c for c, _ in fast_calls] == [c for c, _ in traced_calls]  # same results
    assert len(fast_calls) == 10
    for (_, fast_ns), (_, traced_ns) in zip(fast_calls, traced_calls):
        # each call costs its CPU ops (~0.3 ms here); a repeated one replays the first call's
        # charge (a nanosecond of rounding apart from running the ops again)
        assert fast_ns > 100_000
        assert abs(fast_ns - traced_ns) <= 5, (fast_calls, traced_calls)
