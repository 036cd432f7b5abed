"""Host-side figures of a step: where the CPU's time went, per thread, as the profiler saw it.

A host-bound step is explained by its host timeline, not by its kernels: how long the script's
thread was inside ops, how long it spent between them (the program's Python, the framework's
hooks, waits for the autograd thread or for the GPU), what the other threads (autograd's
backward, a DataLoader's pinning thread) did, and which ops took the time. These figures line
a simulated profile up against a real one the same way on both sides.

Definitions (per step; a host event belongs to the step whose span contains its start):

- script thread: the thread of the `ProfilerStep#N` annotations (else the thread whose first
  op starts earliest, as step detection uses); other threads: every other thread with host ops.
- outermost events: `cpu_op` / `user_annotation` events that no other host event on their
  thread encloses (on the script thread, the `ProfilerStep#N` span itself does not count as
  enclosing, and is not an event here).
- busy: the length of the union of a thread's outermost events in the step, clipped to the
  step; summed over threads for the other threads.
- synchronize (script thread): `cuda*Synchronize` calls that no host event encloses (the
  program's own `torch.cuda.synchronize()`, a profiler step's), clipped to the step: the host
  waiting for the GPU. (A `.item()` waits inside its op and counts as busy.)
- outside ops (script thread): the step's wall time less the script thread's busy and
  synchronize time. On a real profile it is the program's Python between ops, waits for other
  threads (the backward pass, a DataLoader), and the profiler's own per-op work at op boundaries.
  Of it, `while other threads run ops`: the part during which another thread is inside an
  outermost event (the script thread blocked in `backward()` while autograd's thread works, or
  its Python running beside a pinning thread); the rest is the script thread's own time between
  ops with no other thread in an op.
- host ops: outermost events keyed by (thread kind, name), with their count and time.

Profiling costs the host real time per recorded event (its callbacks and CUPTI's), so a
profiled real step's host figures run longer than an unprofiled step; compare ratios between
phases and ops rather than absolute host times of a real profile (README, "Accuracy").
"""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass

from tracing.diff.align import SYNC_NAMES
from tracing.diff.events import PROFILER_STEP_RE, TraceEvents
from tracing.diff.intervals import gaps, measure, merge, overlap

__all__ = ["HostStep", "HostOpStat", "host_figures", "SCRIPT", "OTHER"]

SCRIPT = "script"
OTHER = "other threads"


@dataclass
class HostStep:
    """One step's host figures (ns and event counts)."""

    wall_ns: int
    script_busy_ns: int = 0
    script_ops: int = 0
    other_busy_ns: int = 0
    other_ops: int = 0
    script_sync_ns: int = 0
    script_outside_beside_others_ns: int = 0  # of script_outside_ns: while another thread is in an op

    @property
    def script_outside_ns(self) -> int:
        return max(0, self.wall_ns - self.script_busy_ns - self.script_sync_ns)


@dataclass
class HostOpStat:
    """An outermost host event name on one kind of thread, summed over the selected steps."""

    thread: str  # SCRIPT or OTHER
    name: str
    count: int = 0
    ns: int = 0


def _script_thread(tr: TraceEvents, step_ops: list[int]) -> int | None:
    if step_ops:
        return Counter(tr.op_thread[i] for i in step_ops).most_common(1)[0][0]
    return tr.first_thread()


def host_figures(tr: TraceEvents, starts: list[int], ends: list[int]
                 ) -> tuple[list[HostStep], dict[tuple[str, str], HostOpStat]]:
    """Host figures of the steps [starts[k], ends[k]) (sorted, disjoint) of one trace."""
    names = tr.names
    is_step = [PROFILER_STEP_RE.match(n) is not None for n in names]
    step_ops = [i for i, nid in enumerate(tr.op_name) if is_step[nid] and tr.op_annot[i]]
    script = _script_thread(tr, step_ops)
    steps = [HostStep(e - s) for s, e in zip(starts, ends)]
    spans: list[dict[int, list[tuple[int, int]]]] = [{} for _ in steps]
    ops: dict[tuple[str, str], HostOpStat] = {}
    op_name, op_thread, op_start, op_end, parent = tr.op_name, tr.op_thread, tr.op_start, tr.op_end, tr.op_parent
    for i in range(len(op_name)):
        nid = op_name[i]
        if is_step[nid] and tr.op_annot[i]:
            continue
        p = parent[i]
        if p >= 0 and not (is_step[op_name[p]] and tr.op_annot[p]):
            continue  # enclosed by another host event of its thread
        s = op_start[i]
        k = bisect_right(starts, s) - 1
        if k < 0 or s >= ends[k]:
            continue
        th = op_thread[i]
        e = min(op_end[i], ends[k])
        spans[k].setdefault(th, []).append((s, e))
        kind = SCRIPT if th == script else OTHER
        st = steps[k]
        if kind == SCRIPT:
            st.script_ops += 1
        else:
            st.other_ops += 1
        key = (kind, names[nid])
        row = ops.get(key)
        if row is None:
            row = ops[key] = HostOpStat(kind, names[nid])
        row.count += 1
        row.ns += op_end[i] - s
    syncs = {i for i, n in enumerate(names) if n in SYNC_NAMES}
    sync_spans: list[list[tuple[int, int]]] = [[] for _ in steps]
    for i, nid in enumerate(tr.rt_name):
        if nid not in syncs or tr.rt_thread[i] != script:
            continue
        p = tr.rt_op[i]
        if p >= 0 and not (is_step[op_name[p]] and tr.op_annot[p]):
            continue  # inside an op (an .item()'s wait): the op's time
        s = tr.rt_start[i]
        k = bisect_right(starts, s) - 1
        if 0 <= k and s < ends[k]:
            sync_spans[k].append((s, min(tr.rt_end[i], ends[k])))
    for k, (st, sp) in enumerate(zip(steps, sync_spans)):
        st.script_sync_ns = measure(merge(sp))
        per_thread = spans[k]
        others: list[tuple[int, int]] = []
        for th, tsp in per_thread.items():
            if th == script:
                st.script_busy_ns = measure(merge(tsp))
            else:
                st.other_busy_ns += measure(merge(tsp))
                others += tsp
        outside = gaps(merge(per_thread.get(script, []) + sp), starts[k], ends[k])
        busy_elsewhere = merge(others)
        st.script_outside_beside_others_ns = overlap(outside, [s for s, _ in busy_elsewhere],
                                                     [e for _, e in busy_elsewhere])
    return steps, ops
