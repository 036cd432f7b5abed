"""Per-rank figures: steps, per-step GPU time by category, and the launching-op table.

Definitions (all per step, then averaged over the selected steps):

- wall: the step's host span (`ProfilerStep#N` duration, or boundary to boundary for
  detected steps).
- A GPU activity (kernel, gpu_memcpy, gpu_memset) belongs to the step whose host span
  contains its launch (the cuda_runtime/cuda_driver call with the same correlation), as
  HTA assigns kernels to iterations; work launched in one step and run in the next still
  counts for the step that launched it.
- gpu_time: the sum of the durations of the step's activities (kernel + memcpy + memset);
  `categories` splits it, so the categories add up to gpu_time.
- gpu_busy: the length of the union of the step's activity intervals, per device, summed
  over devices (overlapping streams count once). compute_busy: the same for compute
  kernels only (not communication, memcpy or memset), as HTA's temporal breakdown.
- communication exposed / overlapped: the union of the step's communication kernels minus
  / intersected with the union of all compute kernels on the same device (on any stream,
  from any step).
- host: where the host's time went per thread, and its outermost host events (tracing/diff/host.py).
- ops: every op that directly launches GPU work (the innermost host op enclosing the
  launch), keyed by (op name, `Input Dims` without the `[]` of non-tensor arguments);
  count is the number of such op instances, gpu_time the sum of the durations of what
  they launched.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from tracing.diff.align import StepPlan, _ranges, find_steps
from tracing.diff.categories import CATEGORIES, COMPUTE_CATEGORIES, categorize
from tracing.diff.events import DiffError, TraceEvents
from tracing.diff.host import HostOpStat, HostStep, host_figures
from tracing.diff.intervals import measure, merge, overlap

__all__ = ["StepStats", "OpStat", "RankSummary", "analyze", "NO_OP"]

NO_OP = "(launched outside any op)"
_CAT_INDEX = {c: i for i, c in enumerate(CATEGORIES)}
_COMM = _CAT_INDEX["communication"]
_COMPUTE = frozenset(_CAT_INDEX[c] for c in COMPUTE_CATEGORIES)


@dataclass
class StepStats:
    number: int
    regular: bool
    wall_ns: int
    gpu_ns: int = 0
    busy_ns: int = 0
    compute_busy_ns: int = 0
    cat_ns: list[int] = field(default_factory=lambda: [0] * len(CATEGORIES))
    comm_exposed_ns: int = 0
    comm_overlapped_ns: int = 0
    activities: int = 0


@dataclass
class OpStat:
    name: str
    dims: str
    count: int = 0  # op instances, summed over the selected steps
    gpu_ns: int = 0
    activities: int = 0
    order: int = 0  # first launch, in launch order over the selected steps
    cat_ns: list[int] = field(default_factory=lambda: [0] * len(CATEGORIES))

    @property
    def category(self) -> str:
        return CATEGORIES[max(range(len(CATEGORIES)), key=lambda i: self.cat_ns[i])]


@dataclass
class RankSummary:
    path: str
    rank: int
    world_size: int | None
    has_shapes: bool
    plan: StepPlan
    steps: list[StepStats]
    ops: dict[tuple[str, str], OpStat]
    notes: list[str]
    unassigned_gpu_ns: int = 0  # GPU work launched outside the selected steps, or by no op in the trace
    rank_known: bool = True  # from distributedInfo.rank (else 0)
    host_steps: list[HostStep] = field(default_factory=list)  # per selected step (tracing/diff/host.py)
    host_ops: dict[tuple[str, str], HostOpStat] = field(default_factory=dict)
    device: str | None = None  # the GPU the trace ran on (deviceProperties), None if it names none


def analyze(tr: TraceEvents, select: set[int] | None = None) -> RankSummary:
    plan = find_steps(tr)
    notes = list(plan.notes)
    available = [s.number for s in plan.steps]
    if select is None:
        chosen = [s for s in plan.steps if s.regular]
    else:
        missing = sorted(select - set(available))
        if missing:
            raise DiffError(f"{tr.path}: step(s) {_ranges(missing)} not in the trace; it has "
                            f"{plan.source} steps {_ranges(available)}")
        chosen = [s for s in plan.steps if s.number in select]
    chosen.sort(key=lambda s: s.start)
    stats = [StepStats(s.number, s.regular, s.wall) for s in chosen]
    starts = [s.start for s in chosen]
    ends = [s.end for s in chosen]

    names = tr.names
    n = len(tr.g_name)
    op_name, op_dims, op_in_opt = tr.op_name, tr.op_dims, tr.op_in_opt
    g_op, g_launch, g_start, g_end, g_dev = tr.g_op, tr.g_launch, tr.g_start, tr.g_end, tr.g_device
    g_cat, g_name = tr.g_cat, tr.g_name

    # category of every activity, and the compute union per device (for exposure)
    cat = [0] * n
    compute_iv: dict[int, list[tuple[int, int]]] = {}
    for i in range(n):
        o = g_op[i]
        if o >= 0:
            c = categorize(g_cat[i], names[g_name[i]], names[op_name[o]], op_in_opt[o])
        else:
            c = categorize(g_cat[i], names[g_name[i]], "", False)
        ci = _CAT_INDEX[c]
        cat[i] = ci
        if ci in _COMPUTE:
            compute_iv.setdefault(g_dev[i], []).append((g_start[i], g_end[i]))
    compute_union = {}
    for d, iv in compute_iv.items():
        m = merge(iv)
        compute_union[d] = ([s for s, _ in m], [e for _, e in m])

    order = sorted(range(n), key=lambda i: (g_launch[i], g_start[i]))
    per_step_iv: list[dict[int, list[tuple[int, int]]]] = [{} for _ in chosen]
    per_step_comp: list[dict[int, list[tuple[int, int]]]] = [{} for _ in chosen]
    per_step_comm: list[dict[int, list[tuple[int, int]]]] = [{} for _ in chosen]
    ops: dict[tuple[str, str], OpStat] = {}
    seen_ops: set[int] = set()
    unassigned = 0
    for i in order:
        t = g_launch[i]
        k = bisect_right(starts, t) - 1
        dur = g_end[i] - g_start[i]
        if t < 0 or k < 0 or t >= ends[k]:  # t < 0: no launch and no op in the trace (events.py)
            unassigned += dur
            continue
        st = stats[k]
        ci = cat[i]
        st.gpu_ns += dur
        st.cat_ns[ci] += dur
        st.activities += 1
        dev = g_dev[i]
        iv = (g_start[i], g_end[i])
        per_step_iv[k].setdefault(dev, []).append(iv)
        if ci in _COMPUTE:
            per_step_comp[k].setdefault(dev, []).append(iv)
        elif ci == _COMM:
            per_step_comm[k].setdefault(dev, []).append(iv)
        o = g_op[i]
        key = (names[op_name[o]], op_dims[o]) if o >= 0 else (NO_OP, "")
        op = ops.get(key)
        if op is None:
            op = ops[key] = OpStat(key[0], key[1], order=len(ops))
        if o < 0 or o not in seen_ops:
            op.count += 1
            if o >= 0:
                seen_ops.add(o)
        op.gpu_ns += dur
        op.activities += 1
        op.cat_ns[ci] += dur

    for k, st in enumerate(stats):
        st.busy_ns = sum(measure(merge(iv)) for iv in per_step_iv[k].values())
        st.compute_busy_ns = sum(measure(merge(iv)) for iv in per_step_comp[k].values())
        for dev, iv in per_step_comm[k].items():
            m = merge(iv)
            total = measure(m)
            cu = compute_union.get(dev)
            ov = overlap(m, cu[0], cu[1]) if cu else 0
            st.comm_overlapped_ns += ov
            st.comm_exposed_ns += total - ov

    host_steps, host_ops = host_figures(tr, starts, ends)
    rank = tr.rank if tr.rank is not None else 0
    return RankSummary(str(tr.path), rank, tr.world_size, tr.has_shapes, plan, stats, ops, notes, unassigned,
                       host_steps=host_steps, host_ops=host_ops, device=tr.device)
