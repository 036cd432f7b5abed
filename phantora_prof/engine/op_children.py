"""The ops a CUDA build's kernel dispatches inside a captured op, put back into the trace.

The capture mode fakes an op whole, below the Python dispatch key, so its record has no
children; on a GPU torch.profiler shows what the CUDA (or CompositeExplicitAutograd) kernel
dispatches inside it: `aten::_to_copy > aten::empty_strided, aten::copy_` with the copy's
launch inside `aten::copy_`. cost/data/op_children.json holds those subtrees, learned from
real H200 traces by phantora_prof/calibrate/op_children.py; `expand` lays one out inside the captured op's
host span without moving anything the simulation timed:

- children before the op's first launch share the time before it (the op's dispatch cost),
- launches stay where the simulation put them; the child that launches on a GPU (the copy_ of
  a _to_copy) spans them, and the launch and its GPU work carry that child's External id,
- children after a launch take the tail of that launch's runtime-call span (the call's span
  is drawn shorter; the GPU timeline does not move).

Children get temporary (negative) External ids; the trace builder numbers all host ops.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from phantora_prof.engine.kineto_args import KINETO_TYPE_NAMES
from phantora_prof.protocol import TensorArg
from tracing.diff.categories import categorize
from tracing.model import Span

# the profiler's non-tensor input types, abbreviated in the table's keys (a tensor is "T")
ARG_KINDS = {"Scalar": "S", "ScalarList": "SL", "TensorList": "TL", "": "-"}
_CARVE = 0.4  # at most this share of a launch call's span is given to the children after it


def kinds(types: list) -> str:
    return ",".join(ARG_KINDS.get(t, "T") for t in types)


def ranks(types: list, dims: list) -> str:
    """Size classes of an op's tensor inputs (log2 of their element counts), as
    phantora_prof/calibrate/op_children.py keys the table with this function ("13,13,-,-")."""
    out = []
    for i, t in enumerate(types):
        k = ARG_KINDS.get(t, "T")
        if k == "T" and i < len(dims):
            n = 1
            for d in dims[i]:
                n *= d
            out.append(str(n.bit_length() - 1 if n > 0 else -1))
        else:
            out.append("L" if k == "TL" else "-")
    return ",".join(out)


def _classes(text: str) -> tuple:
    return tuple(int(x) if x.lstrip("-").isdigit() else None for x in text.split(","))


def _distance(a: tuple, b: tuple) -> float:
    if len(a) != len(b):
        return float("inf")
    return sum(abs(x - y) for x, y in zip(a, b) if x is not None and y is not None)


class ChildTable:
    """Lookup of op -> children template: by `Input type` and input sizes, by `Input type`, by
    input kinds, by name."""

    def __init__(self, data: dict):
        trees = data.get("trees", [])
        self.ops: dict[str, tuple[list, dict, dict, dict]] = {}
        for name, e in data.get("ops", {}).items():
            kk = {k: trees[i] for k, i in e.get("kinds", {}).items()}
            types = {tuple(json.loads(k)): trees[i] for k, i in e.get("types", {}).items()}
            shapes: dict[tuple, list] = {}  # types -> [(size classes, tree)]
            for k, i in e.get("shapes", {}).items():
                t, _, rk = k.rpartition("|")
                shapes.setdefault(tuple(json.loads(t)), []).append((_classes(rk), trees[i]))
            self.ops[name] = (trees[e["default"]], kk, types, shapes)

    def lookup(self, name: str, types: list | None, dims: list | None = None) -> list:
        e = self.ops.get(name)
        if e is None:
            return []
        default, by_kinds, by_types, by_shapes = e
        if types is not None:
            if by_shapes and dims is not None:
                sized = by_shapes.get(tuple(types))
                if sized:  # the nearest size classes seen on a GPU
                    want = _classes(ranks(types, dims))
                    return min(sized, key=lambda cv: _distance(cv[0], want))[1]
            t = by_types.get(tuple(types))
            if t is not None:
                return t
            k = by_kinds.get(kinds(types))
            if k is not None:
                return k
        return default


@lru_cache(maxsize=1)
def table() -> ChildTable:
    text = resources.files("phantora_prof").joinpath("cost/data/op_children.json").read_text()
    return ChildTable(json.loads(text))


def _tensor_args(t: TensorArg) -> tuple[list, str, list]:
    return list(t.shape), KINETO_TYPE_NAMES.get(t.dtype, t.dtype), list(t.stride)


def _list_len(args: tuple) -> int:
    for a in args:
        if isinstance(a, tuple) and a and all(isinstance(b, TensorArg) for b in a):
            return len(a)
    return 0


def _flatten(items: list, out: list, op: Any) -> None:
    """Template items -> the nodes in DFS order as ("B", node) / ("E", node) / ("L",) tokens."""
    for it in items:
        if it == "L":
            if not out or out[-1] != ("L",):
                out.append(("L",))
        elif "repeat" in it:
            n = _list_len(op.args) if it["repeat"] == "list0" else len(op.outputs)
            for _ in range(n):
                _flatten([it["item"]], out, op)
        else:
            node = {"name": it["name"], "args": it["args"]}
            out.append(("B", node))
            _flatten(it["kids"], out, op)
            out.append(("E", node))


def _resolve_args(codes: list, parent: dict, op: Any) -> dict:
    """The record_shapes lists of a child from its argument codes (see phantora_prof/calibrate/op_children.py)."""
    pdims = parent.get("Input Dims") or []
    ptypes = parent.get("Input type") or []
    pstrides = parent.get("Input Strides") or []
    out0 = op.outputs[0] if op.outputs and isinstance(op.outputs[0], TensorArg) else None
    dims, types, strides = [], [], []
    for c in codes:
        if c.startswith("i") and c[1:].isdigit():
            k = int(c[1:])
            dims.append(pdims[k] if k < len(pdims) else [])
            types.append(ptypes[k] if k < len(ptypes) else "")
            strides.append(pstrides[k] if k < len(pstrides) else [])
        elif c.startswith("c") and c[1:].isdigit():  # input k as [1, numel, 1, ...] against the output
            k = int(c[1:])
            n = pdims[k][0] if k < len(pdims) and len(pdims[k]) == 1 else 0
            rank = len(out0.shape) if out0 is not None else 4
            d = [1, n] + [1] * (rank - 2)
            dims.append(d)
            types.append(ptypes[k] if k < len(ptypes) else "")
            strides.append([n] + [1] * (rank - 1))
        elif c in ("o0", "e0"):
            if out0 is not None:
                d, t, s = _tensor_args(out0)
            else:
                d, t, s = [], "", []
            if c == "e0":  # a fresh empty tensor of the output's dtype (before its resize_)
                d, s = ([0], [1]) if t else ([], [])
            dims.append(d)
            types.append(t)
            strides.append(s)
        else:
            dims.append([])
            types.append(c)
            strides.append([])
    return {"Concrete Inputs": [""] * len(codes), "Input type": types, "Input Strides": strides, "Input Dims": dims}


def _spread(times: list, lo: int, hi: int, k: int) -> None:
    """k increasing times strictly inside (lo, hi) when there is room."""
    span = max(hi - lo, 0)
    for i in range(k):
        times.append(lo + span * (i + 1) // (k + 1))


def expand(op: Any, span: Span, launches: list, template: list, ids: Any) -> list[Span]:
    """The child spans of captured op `op` (its span `span`, its launches [(api span, [GPU
    spans])] in order) for `template`; re-labels launches made inside a child."""
    tokens: list = []
    _flatten(template, tokens, op)
    if not tokens:
        return []
    markers = [i for i, t in enumerate(tokens) if t == ("L",)]
    groups: dict[int, list] = {}
    if markers:
        parent = getattr(op, "name", "")
        for launch, m in zip(launches, _assign_launches(tokens, markers, launches, parent)):
            if m is not None:
                groups.setdefault(markers[m], []).append(launch)
    start = span.ts_ns
    end = span.ts_ns + span.dur_ns
    # segments: the tokens before the first launch group share [start, first launch) (all of
    # the op's span when it launches nothing); those after a group, the tail of its last call
    times: list[int] = [0] * len(tokens)
    segment: list[int] = []
    after: Span | None = None
    for i, t in enumerate(tokens):
        if t == ("L",):
            g = groups.get(i)
            if g:
                _place(segment, times, start, launches[0][0].ts_ns, after)
                segment = []
                after = g[-1][0]
            continue
        segment.append(i)
    _place(segment, times, start, launches[0][0].ts_ns if launches else end, after)
    # spans, and who launches what
    out: list[Span] = []
    stack: list[Span] = []
    base = span.key if span.key is not None else (span.args.get("External id", 0), 0)
    for i, t in enumerate(tokens):
        if t[0] == "B":
            node = t[1]
            child = Span("cpu_op", node["name"], span.tid, times[i], 0,
                         {"External id": ids(), "Record function id": 0,
                          **_resolve_args(node["args"], span.args, op)},
                         key=base + (len(out) + 1,), parent=stack[-1].key if stack else base)
            stack.append(child)
            out.append(child)
        elif t[0] == "E":
            child = stack.pop()
            child.dur_ns = max(times[i] - child.ts_ns, 0)
        elif stack and groups.get(i):
            ext = stack[-1].args["External id"]
            for api, gpu in groups[i]:
                api.args["External id"] = ext
                for g in gpu:
                    g.args["External id"] = ext
    return out


def _marker_children(tokens: list, markers: list[int], parent: str) -> list[str]:
    """The name of the child each launch marker sits in (the innermost open one; the captured
    op itself for a launch of its own)."""
    names: list[str] = []
    stack: list[str] = []
    at = set(markers)
    for i, t in enumerate(tokens):
        if t[0] == "B":
            stack.append(t[1]["name"])
        elif t[0] == "E":
            stack.pop()
        elif i in at:
            names.append(stack[-1] if stack else parent)
    return names


def _assign_launches(tokens: list, markers: list[int], launches: list, parent: str) -> list[int | None]:
    """Which marker (index into `markers`) each launch belongs to, in order.

    The learned subtree's launches need not match the captured op's kernels one for one: a
    cuDNN convolution of 5 kernels where the reference ran 1 before the bias `add_`, T5's
    efficient-attention backward launching its own kernel before the bias gradient's `sum`
    where the reference's order was the other way round. Launches are aligned to the markers
    in order (a monotone assignment) so that as many kernels as possible land in a child of
    their own kind (by the categories `phantora-prof diff` uses); among equally good
    alignments the plain one wins: one launch per marker in order, the rest with the last.
    Launches of the captured op's own kind at either end of a child's group of another kind
    stay the op's own (None), unless the child would keep none."""
    n, m = len(launches), len(markers)
    if n == 0:  # nothing launched (a CUDA-graph replay launches once, elsewhere)
        return []
    plain = [min(i, m - 1) for i in range(n)]
    kids = [categorize("kernel", "", name, False) for name in _marker_children(tokens, markers, parent)]
    own = categorize("kernel", "", parent, False)

    def kind(launch) -> str:
        gpu = launch[1]
        if not gpu:
            return ""
        g = gpu[0]
        return categorize(g.cat, g.name if g.cat == "kernel" else "", "", False)

    kinds = [kind(la) for la in launches]
    if len(set(kids)) == 1 and n <= m:
        return plain
    eps = 1.0 / (2 * n + 1)  # a preference for the plain alignment, below one category match

    def score(i: int, j: int) -> float:
        # a launch of the op's own kind in another child half counts: at the group's edge it
        # goes back to the op below
        hit = 1.0 if kinds[i] == kids[j] else (0.5 if kinds[i] == own else 0.0)
        return hit + (eps if plain[i] == j else 0.0)

    neg = float("-inf")
    best = [[neg] * m for _ in range(n)]
    came = [[0] * m for _ in range(n)]
    for j in range(m):
        best[0][j] = score(0, j)
    for i in range(1, n):
        run, arg = neg, 0
        for j in range(m):
            if best[i - 1][j] > run:
                run, arg = best[i - 1][j], j
            best[i][j], came[i][j] = run + score(i, j), arg
    j = max(range(m), key=lambda k: (best[n - 1][k], k))
    out: list[int | None] = [0] * n
    for i in range(n - 1, -1, -1):
        out[i] = j
        j = came[i][j]
    # a child spans its launches, so only those at either end of its group can stay outside it
    for j in set(out):
        idx = [i for i, k in enumerate(out) if k == j]
        stray = [i for i in idx if kinds[i] != kids[j] and kinds[i] == own]
        if len(stray) == len(idx):
            continue  # the child keeps something: its launch must be somewhere
        for ends in (idx, idx[::-1]):
            for i in ends:
                if i not in stray:
                    break
                out[i] = None
    return out


def _place(idx: list, times: list, lo: int, hi: int, after: Span | None) -> None:
    """Times for tokens `idx`: spread in [lo, hi), or, after a launch, in the tail of that
    runtime call's span `after` (drawn shorter by as much; the GPU side does not move)."""
    if not idx:
        return
    if after is not None:
        room = max(int(after.dur_ns * _CARVE), 1)
        hi = after.ts_ns + after.dur_ns
        after.dur_ns -= room
        lo = hi - room
        tt: list[int] = []
        _spread(tt, lo, hi + 1, len(idx))  # the last token may end with the call (== hi)
    else:
        tt = []
        _spread(tt, lo, hi, len(idx))
    for i, t in zip(idx, tt):
        times[i] = min(t, hi)


