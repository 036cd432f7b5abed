"""`phantora-prof diff`: where two runs' traces differ (torch-free).

    from tracing.diff import diff_traces
    result = diff_traces("real/trace.json.gz", "sim/rank0.pt.trace.json.gz", steps="3-5/1-3")
    result.to_json()["base"]["step_time_ms"], result.differences

Modules: `events` (load one trace into columns, nest host ops, link GPU work to its
launch), `align` (steps: ProfilerStep#N or detected from repetition), `categories`
(kernel categories), `analyze` (per-rank figures), `host` (where the host's time went per
thread), `intervals` (span arithmetic both use), `ops` (matching launching ops),
`compare` (sides, rank pairing, `diff_traces`), `result` (`DiffResult`, JSON), `report`
(rich terminal report), `plot` (matplotlib PNG, optional).
"""
from tracing.diff.categories import CATEGORIES, categorize
from tracing.diff.compare import diff_traces
from tracing.diff.events import DiffError
from tracing.diff.result import SCHEMA, DiffResult
from tracing.kineto import TraceFormatError

__all__ = ["diff_traces", "DiffResult", "DiffError", "TraceFormatError", "CATEGORIES", "categorize", "SCHEMA"]
