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
import logging
from functools import lru_cache
from importlib import resources
from typing import Any

from phantora_prof.cost.families import BN_OPS
from phantora_prof.cost.roofline import bn_channels_last_batch, contiguous_strides, dense_order
from phantora_prof.engine.kineto_args import KINETO_TYPE_NAMES
from phantora_prof.protocol import TensorArg
from tracing.diff.categories import categorize
from tracing.model import Span

log = logging.getLogger(__name__)

# the profiler's non-tensor input types, abbreviated in the table's keys (a tensor is "T")
ARG_KINDS = {"Scalar": "S", "ScalarList": "SL", "TensorList": "TL", "": "-"}
_CARVE = 0.4  # at most this share of a launch call's span is given to the children after it


def kinds(types: list) -> str:
    return ",".join(ARG_KINDS.get(t, "T") for t in types)


def _layout(dims: list, strides: list | None, bn: bool = False) -> str:
    """"" for a contiguous tensor (or strides unknown), "c" for one dense in another dim order
    (channels-last), "s" for any other strides: a kernel's dispatches can differ by layout (an
    NHWC batch norm zeroes a counter where an NCHW one reshapes its input). For a batch norm
    (`bn`), a contiguous (N, C) batch is channels-last, as its kernels are
    (roofline.bn_channels_last_batch)."""
    if not strides or len(strides) != len(dims):
        return ""
    if contiguous_strides(dims, strides):
        return "c" if bn and bn_channels_last_batch(dims, strides) else ""
    return "c" if dense_order(TensorArg(tuple(dims), tuple(strides), "float32", 0)) is not None else "s"


def scalar_values(types: list, concrete: list | None) -> tuple:
    """The values of an op's Scalar arguments as the trace prints them ("1.", "2"), () when it
    has none: the table's finest level, for ops whose kernels dispatch by a scalar's value."""
    if not concrete:
        return ()
    return tuple(concrete[i] if i < len(concrete) else "" for i, t in enumerate(types) if t == "Scalar")


def _flag_list(value) -> str | None:
    """"m" and the bits of a boolean list argument as the trace writes it ("[True, False, True]"
    -> "m101"), None for anything else."""
    if not isinstance(value, str) or not value.startswith("[") or not value.endswith("]"):
        return None
    items = [v.strip() for v in value[1:-1].split(",")]
    if not items or any(v not in ("True", "False") for v in items):
        return None
    return "m" + "".join("1" if v == "True" else "0" for v in items)


def ranks(types: list, dims: list, strides: list | None = None, name: str = "", concrete: list | None = None) -> str:
    """Size classes of an op's tensor inputs (log2 of their element counts, then "c" / "s" for a
    channels-last / strided layout, then ":" and the tensor's number of dims), as
    phantora_prof/calibrate/op_children.py keys the table with this function ("13c:4,6:1,-,-").
    `name` (the op's) decides whether a contiguous (N, C) batch counts as channels-last, as it
    does for batch norm's kernels. The number of dims tells a 1-D convolution (whose
    `_convolution` unsqueezes its operands to 2-D) from a 2-D one of a similar size: without it
    RAFT's biased 2-D convolutions took whisper's 1-D template (session 38). A boolean list
    argument (`concrete`: the trace's Concrete Inputs) is its bits ("m110"): a convolution
    backward that computes the bias gradient runs an `aten::sum` inside, one that does not has
    none, and the output mask is all that tells them apart."""
    bn = name.partition("::")[2] in BN_OPS
    out = []
    for i, t in enumerate(types):
        k = ARG_KINDS.get(t, "T")
        if k == "T" and i < len(dims):
            n = 1
            for d in dims[i]:
                n *= d
            st = strides[i] if strides is not None and i < len(strides) else None
            out.append(f"{n.bit_length() - 1 if n > 0 else -1}{_layout(dims[i], st, bn)}:{len(dims[i])}")
        else:
            flags = _flag_list(concrete[i]) if concrete is not None and i < len(concrete) else None
            out.append(flags or ("L" if k == "TL" else "-"))
    return ",".join(out)


def _classes(text: str) -> tuple:
    """(log2 size, layout, number of dims) per tensor of a `ranks` string, ("m", bits, 0) per
    boolean list, None for the others."""
    out = []
    for x in text.split(","):
        if x.startswith("m") and x[1:].isdigit():
            out.append(("m", x[1:], 0))
            continue
        x, _, nd = x.partition(":")
        body = x.rstrip("cs")
        out.append((int(body), x[len(body):], int(nd) if nd else -1) if body.lstrip("-").isdigit() else None)
    return tuple(out)


_OTHER_LAYOUT = 64  # a layout mismatch weighs more than any size-class distance
_OTHER_DIMS = 256  # and a tensor of another number of dims more than a layout mismatch


def _distance(a: tuple, b: tuple) -> float:
    if len(a) != len(b):
        return float("inf")
    total = 0.0
    for x, y in zip(a, b):
        if x is None or y is None:
            continue
        if x[0] == "m" or y[0] == "m":  # boolean lists: equal, or as far as another number of dims
            total += 0 if x == y else _OTHER_DIMS
            continue
        total += abs(x[0] - y[0]) + (_OTHER_LAYOUT if x[1] != y[1] else 0) + (_OTHER_DIMS if x[2] != y[2] else 0)
    return total


class ChildTable:
    """Lookup of op -> children template: by `Input type` and the values of its Scalar arguments
    (where the table has them), by `Input type` and input sizes, by `Input type`, by input kinds,
    by name."""

    def __init__(self, data: dict):
        trees = data.get("trees", [])
        self.ops: dict[str, tuple[list, dict, dict, dict]] = {}
        # (name, Input type, scalar values) -> tree: ops that dispatch by a scalar's value
        self.values: dict[tuple, list] = {}
        self._valued: set[tuple] = set()  # (name, Input type) with such entries
        for name, e in data.get("ops", {}).items():
            for k, i in e.get("values", {}).items():
                t, _, v = k.rpartition("|")
                types_key = tuple(json.loads(t))
                self.values[(name, types_key, tuple(json.loads(v)))] = trees[i]
                self._valued.add((name, types_key))
            kk = {k: trees[i] for k, i in e.get("kinds", {}).items()}
            types = {tuple(json.loads(k)): trees[i] for k, i in e.get("types", {}).items()}
            shapes: dict[tuple, list] = {}  # types -> [(size classes, tree)]
            for k, i in e.get("shapes", {}).items():
                t, _, rk = k.rpartition("|")
                shapes.setdefault(tuple(json.loads(t)), []).append((_classes(rk), trees[i]))
            self.ops[name] = (trees[e["default"]], kk, types, shapes)
        # (name, Input type) -> (trees by size classes or None, the tree otherwise): a program
        # asks for the same few signatures at every step (issue #18)
        self._memo: dict[tuple, tuple[list | None, list]] = {}
        self._nearest: dict[tuple, list] = {}  # (name, Input type, size classes) -> tree

    def lookup(self, name: str, types: list | None, dims: list | None = None, strides: list | None = None,
               concrete: list | None = None) -> list:
        key = (name, None if types is None else tuple(types))
        if key in self._valued:
            tree = self.values.get(key + (scalar_values(types, concrete),))
            if tree is not None:
                return tree
        entry = self._memo.get(key)
        if entry is None:
            entry = self._memo[key] = self._entry(name, key[1])
        sized, tree = entry
        if sized is not None and dims is not None:  # the nearest size classes seen on a GPU
            rk = ranks(types, dims, strides, name, concrete)
            near = self._nearest.get(key + (rk,))
            if near is None:
                want = _classes(rk)
                near = self._nearest[key + (rk,)] = min(sized, key=lambda cv: _distance(cv[0], want))[1]
            return near
        return tree

    def _entry(self, name: str, types: tuple | None) -> tuple[list | None, list]:
        """What `lookup` answers for an op and its input types: the trees by size classes when
        the table has them for these types, and the tree by types, by kinds, or the default."""
        e = self.ops.get(name)
        if e is None:
            return None, []
        default, by_kinds, by_types, by_shapes = e
        if types is None:
            return None, default
        sized = (by_shapes.get(types) or None) if by_shapes else None
        t = by_types.get(types)
        if t is None:
            t = by_kinds.get(kinds(list(types)))
        return sized, (t if t is not None else default)


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


def _compile_codes(codes: list) -> tuple:
    """A child's argument codes (see phantora_prof/calibrate/op_children.py) as (kind, input
    index) pairs, parsed once per template rather than at every op: "i" input k, "c" input k
    as [1, numel, 1, ...] against the output, "o" the output, "e" a fresh empty tensor of the
    output's dtype, "s" the code itself as the type (a scalar or other non-tensor argument)."""
    out = []
    for c in codes:
        if c.startswith("i") and c[1:].isdigit():
            out.append(("i", int(c[1:])))
        elif c.startswith("c") and c[1:].isdigit():
            out.append(("c", int(c[1:])))
        elif c in ("o0", "e0"):
            out.append((c[0], 0))
        else:
            out.append(("s", c))
    return tuple(out)


def _resolve_args(compiled: tuple, parent: dict, op: Any) -> dict:
    """The record_shapes lists of a child from its argument codes (`_compile_codes`)."""
    pdims = parent.get("Input Dims") or []
    ptypes = parent.get("Input type") or []
    pstrides = parent.get("Input Strides") or []
    out0 = op.outputs[0] if op.outputs and isinstance(op.outputs[0], TensorArg) else None
    dims, types, strides = [], [], []
    for kind, k in compiled:
        if kind == "d":  # a copy's destination: the output where it has input k's dims, else input k
            kind = "o" if out0 is not None and k < len(pdims) and list(out0.shape) == list(pdims[k]) else "i"
        if kind == "i":
            dims.append(pdims[k] if k < len(pdims) else [])
            types.append(ptypes[k] if k < len(ptypes) else "")
            strides.append(pstrides[k] if k < len(pstrides) else [])
        elif kind == "c":  # input k as [1, numel, 1, ...] against the output
            n = pdims[k][0] if k < len(pdims) and len(pdims[k]) == 1 else 0
            rank = len(out0.shape) if out0 is not None else 4
            d = [1, n] + [1] * (rank - 2)
            dims.append(d)
            types.append(ptypes[k] if k < len(ptypes) else "")
            strides.append([n] + [1] * (rank - 1))
        elif kind == "s":
            dims.append([])
            types.append(k)
            strides.append([])
        else:
            if out0 is not None:
                d, t, st = _tensor_args(out0)
            else:
                d, t, st = [], "", []
            if kind == "e":  # a fresh empty tensor of the output's dtype (before its resize_)
                d, st = ([0], [1]) if t else ([], [])
            dims.append(d)
            types.append(t)
            strides.append(st)
    return {"Concrete Inputs": [""] * len(compiled), "Input type": types, "Input Strides": strides,
            "Input Dims": dims}


def _spread(times: list, lo: int, hi: int, k: int) -> None:
    """k increasing times strictly inside (lo, hi) when there is room."""
    span = max(hi - lo, 0)
    for i in range(k):
        times.append(lo + span * (i + 1) // (k + 1))


class _Plan:
    """What `expand` does for one template, op signature and launch kinds, worked out once:
    the tokens (("B", name, compiled argument codes, the record_shapes lists when they do not
    depend on the op) / ("E",) / ("L",)), the launches each launch marker takes, and the
    segments of tokens that share a stretch of time. Only the times and the spans are made per
    op (a GPT-2 step expands ~1,000 ops from ~30 plans)."""

    __slots__ = ("tokens", "groups", "segments", "last")

    def __init__(self, tokens: list, groups: dict[int, list[int]], parent: str = ""):
        self.tokens = [_node_token(t[1], parent) if t[0] == "B" else t for t in tokens]
        self.groups = groups  # token index of a launch marker -> indices of the launches it takes
        # the tokens before the first launch group share [start, first launch) (all of the op's
        # span when it launches nothing); those after a group, the tail of its last call
        self.segments: list[tuple[list[int], int | None]] = []  # (token indices, launch they follow)
        segment: list[int] = []
        after: int | None = None
        for i, t in enumerate(tokens):
            if t == ("L",):
                g = groups.get(i)
                if g:
                    self.segments.append((segment, after))
                    segment = []
                    after = g[-1]
                continue
            segment.append(i)
        self.last = (segment, after)  # the last segment: before the first launch, or the op's end


class _Plans:
    """Plans by (template, list length, output count, op name, launch kinds). Templates are
    keyed by id and kept in `_repeats` (never cleared: the table's own few hundred lists), so
    an id always means the same template."""

    def __init__(self, limit: int = 1 << 14):
        self.limit = limit  # a program with more signatures than this starts over (memory stays bounded)
        self._tokens: dict[tuple, tuple[list, list[int]]] = {}
        self._plans: dict[tuple, _Plan] = {}
        self._repeats: dict[int, tuple[list, bool, bool]] = {}  # id(template) -> (template, list0, outputs)

    def plan(self, template: list, op: Any, launches: list) -> _Plan:
        rep = self._repeats.get(id(template))
        if rep is None:
            rep = self._repeats[id(template)] = (template, _repeats(template, "list0"), _repeats(template, None))
        tkey = (id(template), _list_len(op.args) if rep[1] else 0, len(op.outputs) if rep[2] else 0)
        tok = self._tokens.get(tkey)
        if tok is None:
            if len(self._tokens) >= self.limit:
                self._tokens.clear()
            tokens: list = []
            _flatten(template, tokens, op)
            tok = self._tokens[tkey] = (tokens, [i for i, t in enumerate(tokens) if t == ("L",)])
        tokens, markers = tok
        parent = getattr(op, "name", "")
        kinds = tuple(_launch_kind(la) for la in launches) if markers else ()  # no markers: no launch matters
        pkey = (tkey, parent, kinds)
        plan = self._plans.get(pkey)
        if plan is None:
            if len(self._plans) >= self.limit:
                self._plans.clear()
            groups: dict[int, list[int]] = {}
            if markers:
                for i, m in enumerate(_assign_kinds(tokens, markers, list(kinds), parent)):
                    if m is not None:
                        groups.setdefault(markers[m], []).append(i)
            plan = self._plans[pkey] = _Plan(tokens, groups, parent)
        return plan


def _writes_new_tensor(parent: str) -> bool:
    """Whether captured op `parent` returns a tensor it allocated (out-of-place: `aten::clone`,
    `aten::_to_copy`), so that a `copy_` inside it writes that tensor and never the op's input."""
    base = parent.partition("::")[2].partition(".")[0]
    return bool(base) and not base.endswith("_") and parent.partition(".")[2] != "out"


def _destination_codes(name: str, compiled: tuple, parent: str) -> tuple:
    """A child `aten::copy_`'s destination (its first argument) as the parent's output where the
    table names the parent's first input: the table learns codes by dims and dtype, and a
    clone's destination has its input's (the learned examples were contiguous), while the
    tensor written is the clone's output: contiguous where a `.contiguous()` or a reshape copy
    of a transposed input makes it so (Qwen3's heads: the trace had drawn the destination with
    the transposed input's strides). "d" resolves to the output when its dims are the input's."""
    if name != "aten::copy_" or not compiled or compiled[0] != ("i", 0) or not _writes_new_tensor(parent):
        return compiled
    return (("d", 0),) + compiled[1:]


def _node_token(node: dict, parent: str = "") -> tuple:
    """A child's token in a plan: ("B", name, compiled codes, constant record_shapes lists or
    None). A child whose arguments are all non-tensors (an empty_strided's sizes and options)
    has the same lists for every op; its spans share them (nothing changes a span's lists
    after it is made: the trace writers only read them)."""
    compiled = _destination_codes(node["name"], _compile_codes(node["args"]), parent)
    const = None
    if all(kind == "s" for kind, _ in compiled):
        const = {"Concrete Inputs": [""] * len(compiled), "Input type": [c for _, c in compiled],
                 "Input Strides": [[] for _ in compiled], "Input Dims": [[] for _ in compiled]}
    return "B", node["name"], compiled, const


def _repeats(items: list, kind: str | None) -> bool:
    """Whether template `items` repeats a node per tensor of the first list argument
    ("list0") or, `kind` None, per output."""
    for it in items:
        if it == "L":
            continue
        if "repeat" in it:
            if (it["repeat"] == "list0") == (kind == "list0") or _repeats([it["item"]], kind):
                return True
        elif _repeats(it["kids"], kind):
            return True
    return False


_PLANS = _Plans()


def expand(op: Any, span: Span, launches: list, template: list, ids: Any) -> list[Span]:
    """The child spans of captured op `op` (its span `span`, its launches [(api span, [GPU
    spans])] in order) for `template`; re-labels launches made inside a child."""
    plan = _PLANS.plan(template, op, launches)
    tokens = plan.tokens
    if not tokens:
        return []
    start = span.ts_ns
    end = span.ts_ns + span.dur_ns
    times: list[int] = [0] * len(tokens)
    for segment, after in plan.segments:
        _place(segment, times, start, launches[0][0].ts_ns, None if after is None else launches[after][0])
    segment, after = plan.last
    _place(segment, times, start, launches[0][0].ts_ns if launches else end,
           None if after is None else launches[after][0])
    # spans, and who launches what
    out: list[Span] = []
    stack: list[Span] = []
    base = span.key if span.key is not None else (span.args.get("External id", 0), 0)
    pargs = span.args
    groups = plan.groups
    for i, t in enumerate(tokens):
        kind = t[0]
        if kind == "B":
            args = {"External id": ids(), "Record function id": 0}
            args.update(t[3] if t[3] is not None else _resolve_args(t[2], pargs, op))
            child = Span("cpu_op", t[1], span.tid, times[i], 0, args, key=base + (len(out) + 1,),
                         parent=stack[-1].key if stack else base)
            stack.append(child)
            out.append(child)
        elif kind == "E":
            child = stack.pop()
            child.dur_ns = max(times[i] - child.ts_ns, 0)
        elif stack and groups.get(i):
            ext = stack[-1].args["External id"]
            for j in groups[i]:
                api, gpu = launches[j]
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


@lru_cache(maxsize=1 << 12)
def _category(gpu_cat: str, kernel: str, op: str) -> str:
    """`categorize` outside an optimizer, memoized: a pure function of a few names that recur
    at every step (issue #18)."""
    return categorize(gpu_cat, kernel, op, False)


def _launch_kind(launch: tuple) -> str:
    """The category of a launch's (first) GPU work; "" when it ran nothing."""
    gpu = launch[1]
    if not gpu:
        return ""
    g = gpu[0]
    return _category(g.cat, g.name if g.cat == "kernel" else "", "")


def _assign_launches(tokens: list, markers: list[int], launches: list, parent: str) -> list[int | None]:
    """Which marker (index into `markers`) each launch belongs to, in order (`_assign_kinds`)."""
    return _assign_kinds(tokens, markers, [_launch_kind(la) for la in launches], parent)


def _assign_kinds(tokens: list, markers: list[int], kinds: list[str], parent: str) -> list[int | None]:
    """Which marker (index into `markers`) each launch belongs to, in order; `kinds`: each
    launch's category (`_launch_kind`).

    The learned subtree's launches need not match the captured op's kernels one for one: a
    cuDNN convolution of 5 kernels where the reference ran 1 before the bias `add_`, T5's
    efficient-attention backward launching its own kernel before the bias gradient's `sum`
    where the reference's order was the other way round. Launches are aligned to the markers
    in order (a monotone assignment) so that as many kernels as possible land in a child of
    their own kind (by the categories `phantora-prof diff` uses); among equally good
    alignments the plain one wins: one launch per marker in order, the rest with the last.
    Launches of the captured op's own kind at either end of a child's group of another kind
    stay the op's own (None), unless the child would keep none."""
    n, m = len(kinds), len(markers)
    if n == 0:  # nothing launched (a CUDA-graph replay launches once, elsewhere)
        return []
    plain = [min(i, m - 1) for i in range(n)]
    kids = [_category("kernel", "", name) for name in _marker_children(tokens, markers, parent)]
    own = _category("kernel", "", parent)
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


