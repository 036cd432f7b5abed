"""Iterations (steps) of a trace: `ProfilerStep#N` spans, or detected from repetition.

With `ProfilerStep#N` annotations (torch.profiler with a schedule, or `prof.step()`), step
N is that host span, and its wall time is the span's duration.

Without them (a simulated run traced from start to end, a profiler used without steps),
steps are found from the repeated structure of the main thread (the thread whose first
op starts earliest):

1. Tokens: the main thread's top-level host events in time order: ops and annotations
   that no other op encloses, plus top-level `cuda*Synchronize` calls.
2. For every token that occurs at least twice, cut the sequence at its occurrences; the
   pieces between consecutive occurrences are compared by a rolling hash. A token
   qualifies when at least 60% of its pieces equal its most common piece (so a
   synchronize called twice per iteration, whose pieces alternate, does not); its block
   length L is that piece's length and its coverage m x L (m = pieces equal to it).
3. If optimizer tokens qualify (`Optimizer.step#...` / `Optimizer.zero_grad#...`
   annotations, optimizer ops), only tokens with the block length of the best of them stay
   candidates: the training loop is where the optimizer steps, even when a setup phase
   repeats more (a short run that copies its parameters to the GPU one by one, each with a
   synchronize). The anchor, among the candidates whose coverage is at least a quarter of
   the best:
   - if any is a step-ending kind (a `cuda*Synchronize` call, an `Optimizer.step#...` or
     `Optimizer.zero_grad#...` annotation, an optimizer op: `_fused_adam*`,
     `_fused_sgd*`, `_foreach_*`): the one with the shortest block (one training step,
     not a synchronize before and after the whole loop), then the most specific kind in
     that order, then the token that comes last in the block. These end an iteration,
     so a step boundary is the END of each occurrence (where `prof.step()` after the
     synchronize would put it). Tokens with two or more equal pieces are preferred; a
     step-ending token with a single piece (a trace of two iterations) is used only when
     none has more.
   - otherwise the token with the LONGEST block (the outermost repetition: one training
     iteration, not one transformer layer, whose block repeats more often but is nested
     in it), boundaries at the START of each occurrence.
4. Step k is the host time from boundary k to boundary k+1 (numbered from 0); setup
   before the first occurrence and teardown after the last are left out. Steps whose
   token block differs from the most common block (a warm-up, an evaluation, a
   checkpoint) are marked irregular and left out of the default selection.

A trace with no repeated token is one step covering all of its host ops.
The cost is linear in the number of top-level events (one prefix hash, then one pass per
candidate over its own occurrences). Limits: a loop whose iterations differ (logging every
k steps without a synchronize or optimizer op) may be cut into blocks of k iterations; a
trace whose main thread has no top-level structure (everything in one annotation) is one
step; pass `--steps` to pick steps by hand, or record `ProfilerStep#N` annotations.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tracing.diff.events import PROFILER_STEP_RE, TraceEvents

__all__ = ["Step", "StepPlan", "find_steps", "parse_steps_spec", "SYNC_NAMES"]

_MOD = (1 << 61) - 1
_BASE = 1_000_003
SYNC_NAMES = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
               "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize")


@dataclass
class Step:
    number: int
    start: int  # host ns
    end: int
    regular: bool = True

    @property
    def wall(self) -> int:
        return self.end - self.start


@dataclass
class StepPlan:
    steps: list[Step]
    source: str  # "ProfilerStep", "detected" or "whole trace"
    description: str
    notes: list[str] = field(default_factory=list)
    training: bool = False  # detected from the optimizer's steps: training iterations, not some setup


def _priority(name: str, is_runtime: bool) -> tuple[int, bool]:
    """(class, boundary at end?) of an anchor candidate; lower class is preferred."""
    if is_runtime:
        return 0, True
    if name.startswith("Optimizer.step"):
        return 1, True
    if name.startswith("Optimizer.zero_grad"):
        return 2, True
    low = name.lower()
    if "_fused_adam" in low or "_fused_sgd" in low or "_foreach_" in low:
        return 3, True
    return 4, False


def find_steps(tr: TraceEvents) -> StepPlan:
    steps: dict[int, Step] = {}
    for i, nid in enumerate(tr.op_name):
        m = PROFILER_STEP_RE.match(tr.names[nid])
        if m:
            n = int(m.group(1))
            if n not in steps:
                steps[n] = Step(n, tr.op_start[i], tr.op_end[i])
    if steps:
        ordered = sorted(steps.values(), key=lambda s: s.start)
        nums = [s.number for s in ordered]
        return StepPlan(ordered, "ProfilerStep", f"ProfilerStep#{_ranges(nums)}")
    return _detect(tr)


def _whole(tr: TraceEvents, why: str) -> StepPlan:
    starts = tr.op_start or tr.g_launch
    ends = tr.op_end or tr.g_end
    lo = min(starts) if starts else 0
    hi = max(ends) if ends else 0
    return StepPlan([Step(0, lo, hi)], "whole trace", "the whole trace as one step", [why])


def _detect(tr: TraceEvents) -> StepPlan:
    main = tr.first_thread()
    if main is None:
        return _whole(tr, f"{tr.path}: no host ops, so no steps; the whole trace is one step")
    # (start, end, token, is_runtime)
    toks: list[tuple[int, int, int, bool]] = []
    for i, th in enumerate(tr.op_thread):
        if th == main and tr.op_parent[i] < 0:
            toks.append((tr.op_start[i], tr.op_end[i], tr.op_name[i], False))
    sync_ids = {tr.name_id(n) for n in SYNC_NAMES} - {None}
    if sync_ids:
        for i, th in enumerate(tr.rt_thread):
            if th == main and tr.rt_op[i] < 0 and tr.rt_name[i] in sync_ids:
                toks.append((tr.rt_start[i], tr.rt_end[i], tr.rt_name[i], True))
    toks.sort()
    n = len(toks)
    seq = [t[2] for t in toks]
    why = f"{tr.path}: no ProfilerStep#N annotations and no repeated op pattern on the main thread; " \
          "the whole trace is one step"
    if n < 4:
        return _whole(tr, why)
    # prefix hashes: H[i] = hash(seq[:i]); hash(seq[l:r]) = H[r] - H[l] * B^(r-l)
    H = [0] * (n + 1)
    P = [1] * (n + 1)
    h = 0
    p = 1
    for i, t in enumerate(seq):
        h = (h * _BASE + t + 1) % _MOD
        p = p * _BASE % _MOD
        H[i + 1] = h
        P[i + 1] = p
    positions: dict[int, list[int]] = {}
    for i, t in enumerate(seq):
        positions.setdefault(t, []).append(i)
    is_rt = {t[2]: t[3] for t in toks}
    cands = []  # (class, score, length, first position, token, pieces, mode_key)
    for t, pos in positions.items():
        if len(pos) < 2:
            continue
        cls, _ = _priority(tr.names[t], is_rt[t])
        keys = []
        for a, b in zip(pos, pos[1:]):
            ln = b - a
            keys.append((ln, (H[b] - H[a] * P[ln]) % _MOD))
        counts = Counter(keys)
        m = max(counts.values())
        # ties between equally common pieces: the longest
        mode_key = max((k for k, c in counts.items() if c == m), key=lambda k: k[0])
        if m < 0.6 * len(keys) or (m < 2 and cls == 4):
            continue
        cands.append((cls, m * mode_key[0], mode_key[0], pos[0], t, keys, mode_key))
    if not cands:
        return _whole(tr, why)
    # A training loop is where the optimizer steps: its block (one iteration, or one optimizer step
    # of several micro-batches) is the step, even when some setup repeats more often or for longer
    # (a short run: `.to("cuda")` copying parameter by parameter, each with a synchronize, spans more
    # than three training steps do)
    optimizer = [c for c in cands if c[0] in (1, 2, 3)]
    if optimizer:
        length = max(optimizer, key=lambda c: (c[1], -c[0]))[2]
        cands = [c for c in cands if c[2] == length]
    best = max((c[1] for c in cands if c[0] == 4 or len(c[5]) >= 2), default=max(c[1] for c in cands))
    good = [c for c in cands if c[1] >= 0.25 * best]
    marked = [c for c in good if c[0] < 4 and len(c[5]) >= 2] or [c for c in good if c[0] < 4]
    if marked:  # step-ending tokens: the shortest block (one training step), then the most
        # specific kind, then the token that comes last in the block (the boundary is its end)
        length = min(c[2] for c in marked)
        cls = min(c[0] for c in marked if c[2] == length)
        group = [c for c in marked if c[0] == cls and c[2] == length]
        ref = min(c[3] for c in group)
        chosen = max(group, key=lambda c: ((c[3] - ref) % length, -c[3]))
    else:  # the outermost repeated block that covers a good part of the run
        chosen = min(good, key=lambda c: (-c[2], c[3]))
    _cls, _score, length, _first, token, keys, mode_key = chosen
    _cls, at_end = _priority(tr.names[token], is_rt[token])
    pos = positions[token]
    bounds = [toks[i][1] if at_end else toks[i][0] for i in pos]
    steps = [Step(k, bounds[k], bounds[k + 1], keys[k] == mode_key) for k in range(len(keys))]
    irregular = [s.number for s in steps if not s.regular]
    where = "end" if at_end else "start"
    desc = (f"detected: {len(steps)} steps of {length} top-level ops, boundaries at the {where} of "
            f"each '{tr.names[token]}'")
    notes = []
    if irregular:
        notes.append(f"{tr.path}: detected steps {_ranges(irregular)} differ from the repeated pattern "
                     "and are left out (select them with --steps)")
    return StepPlan(steps, "detected", desc, notes, training=bool(optimizer))


def _ranges(nums: list[int]) -> str:
    """[3, 4, 5, 7] -> '3-5,7'."""
    if not nums:
        return "none"
    nums = sorted(nums)
    out = []
    lo = prev = nums[0]
    for x in nums[1:]:
        if x == prev + 1:
            prev = x
            continue
        out.append(f"{lo}-{prev}" if prev > lo else f"{lo}")
        lo = prev = x
    out.append(f"{lo}-{prev}" if prev > lo else f"{lo}")
    return ",".join(out)


def parse_steps_spec(spec: str | None) -> tuple[set[int] | None, set[int] | None]:
    """'3-5' (both sides) or '3-5/0-2' (base/other) -> sets of step numbers (None: default)."""
    if spec is None or not spec.strip():
        return None, None
    parts = spec.split("/")
    if len(parts) > 2:
        raise ValueError(f"--steps {spec!r}: at most one '/' (BASE_STEPS/OTHER_STEPS)")
    sets = [_parse_one(p, spec) for p in parts]
    return (sets[0], sets[0]) if len(sets) == 1 else (sets[0], sets[1])


def _parse_one(part: str, spec: str) -> set[int] | None:
    part = part.strip()
    if part in ("", "all", "*"):
        return None
    out: set[int] = set()
    for item in part.split(","):
        item = item.strip()
        try:
            if "-" in item[1:]:
                a, b = item.split("-", 1) if not item.startswith("-") else (item, "")
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(item))
        except ValueError:
            raise ValueError(f"--steps {spec!r}: {item!r} is not a step number or range like 3-5") from None
    return out
