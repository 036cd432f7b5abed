"""Learn what a CUDA build's kernels dispatch inside each op, from real torch.profiler traces.

    phantora-prof calibrate op-children [--reference DIR]           # writes phantora_prof/cost/data/op_children.json
    phantora-prof calibrate op-children [--reference DIR] --check   # exit 1 if the shipped table is stale

On a GPU, torch.profiler shows the ops a CUDA kernel (or a CompositeExplicitAutograd kernel)
dispatches inside the op it implements: `aten::_to_copy > aten::empty_strided, aten::copy_`,
`aten::t > aten::transpose > aten::as_strided`, `aten::native_layer_norm > aten::empty x3,
aten::view x2`, and where the kernel launches happen among them. The simulator fakes such an
op whole (below the Python dispatch key), so its record has no children; this table gives
them back (the coordinator emits them inside the captured op: engine/op_children.py).

Which ops: those the capture mode sees as one op on a CUDA build, decided from torch's own
dispatcher tables (not a list): an aten op none of whose overloads named like it decomposes
(CompositeImplicitAutograd without a CUDA kernel) above the Python key. An autocast wrapper
(the op recorded twice, nested, with the same kind of inputs) is not the op: the inner one is.
The children are the whole subtree the real trace records under that op, launches included
(consecutive launches collapse into one marker: the simulated op has its own kernel count),
except records that are not dispatcher calls directly under the op (`detach`, which the
autograd kernel records above the Python key and the simulation records itself). A run of
identical siblings as long as the op's first tensor list (the per-tensor calls of a foreach
op) is stored as a repeat over that list.

Keys: (op name, its `Input type` list, the size classes of its tensor inputs) first, then (name,
`Input type`), then (name, kinds of inputs: tensor / scalar / scalar list / tensor list /
other), then the name; each with the most common subtree among
the real instances that launch GPU work if any do (a trace does not record the device: the
others ran on CPU tensors, which the simulation runs for real and records as they are). A child's tensor inputs refer to the op's own inputs when they match one
exactly (dims and dtype), else to its first output; its other inputs keep their kind (their
values, which depend on the shapes, are not kept).

Sources (development set only; the held-out zoo models are never read): the reference H200
traces in shared/reference/h200/ (--reference), the 2 x H200 traces in tests/data/real/h200x2/traces, the
held-out CNN trace (tools/holdout/real_h200/traces/cnn.pt.trace.json.gz), the zoo traces of
hf_llama, hf_gpt2, timm_vit, tv_resnet50, and single ops one at a time
(tools/holdout/real_h200/session24/probe_real.json.gz, tools/holdout/composite_probe.py).
"""
from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

from phantora_prof.calibrate.reference import require_reference
# the keys the engine looks the table up by (engine/op_children.py)
from phantora_prof.engine.op_children import ARG_KINDS, kinds, ranks, scalar_values

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "phantora_prof" / "cost" / "data" / "op_children.json"
ZOO_DEV = ("hf_llama", "hf_gpt2", "timm_vit", "tv_resnet50", "lstm", "timm_convnext")  # lstm: clip_grad_norm_'s _foreach_norm;
# timm_convnext (session 38): convolution backwards with a bias gradient (an aten::sum inside), 4-D
REFERENCE_RUNS = ("gpt_b32", "gpt_ddp1", "gpt_small", "gpt_small_memory", "streams")


def default_sources(reference: Path | None = None) -> list[Path]:
    """Every source trace, listed by name: one that is not there makes the table incomplete
    (--check then says which instead of comparing a table built from fewer traces)."""
    shared = require_reference(reference) / "h200"
    out = [shared / run / "trace.pt.trace.json.gz" for run in REFERENCE_RUNS]
    out += sorted((ROOT / "tests" / "data" / "real" / "h200x2" / "traces").glob("*.pt.trace.json.gz"))
    out.append(ROOT / "tools" / "holdout" / "real_h200" / "traces" / "cnn.pt.trace.json.gz")
    out += [ROOT / "tools" / "holdout" / "real_h200" / "zoo" / "traces" / f"{m}.pt.trace.json.gz" for m in ZOO_DEV]
    out.append(ROOT / "tools" / "holdout" / "real_h200" / "session24" / "probe_real.json.gz")  # single ops
    # a dev case since session 21: layer norms over a permuted input (contiguous > clone > copy_ first)
    out.append(ROOT / "tools" / "holdout" / "real_h200" / "session21" / "traces" / "hf_whisper.pt.trace.json.gz")
    # dev since session 29 (its profile was read after blind set 8's one comparison): baddbmm's
    # copy of its C. (hf_segformer's is not a source: it would teach the autocast wrapper's
    # children, a cast and the inner op, to the inner upsample op the simulation captures)
    out += [ROOT / "tools" / "holdout" / "real_h200" / "session29" / "traces" / f"{m}.pt.trace.json.gz"
            for m in ("hf_bloom",)]
    return out


class Classifier:
    """Whether torch's dispatcher hands an op name to the capture mode as one op (not when the
    capture mode runs its composite body: runtime/dispatch/cuda_dispatch.COMPOSITE_BODIES)."""

    def __init__(self) -> None:
        import torch

        from phantora_prof.runtime.dispatch import cuda_dispatch

        self.torch = torch
        self.cuda_dispatch = cuda_dispatch
        self.cache: dict[str, bool] = {}

    def captured(self, name: str) -> bool:
        r = self.cache.get(name)
        if r is not None:
            return r
        r = False
        ns, _, op = name.partition("::")
        if op and ns == "aten":
            torch = self.torch
            packet = getattr(torch.ops.aten, op, None)
            cia = torch._C.DispatchKey.CompositeImplicitAutograd
            if packet is not None:
                for ov in packet.overloads():
                    if ov == "out" or ov.endswith("_out") or ov.startswith("out"):
                        continue  # out= variants are never what a script calls first
                    f = getattr(packet, ov)
                    try:
                        implicit = torch._C._dispatch_has_kernel_for_dispatch_key(f.name(), cia)
                    except RuntimeError:  # a TorchScript-only overload (to.prim_Device): no dispatcher op
                        continue
                    if self.cuda_dispatch.composite_body_key(f) is not None:
                        continue  # its composite body runs under the capture mode: its parts are captured
                    if not implicit or self.cuda_dispatch.has_cuda_kernel(f):
                        r = True
                        break
        self.cache[name] = r
        return r


    def returns_list(self, name: str) -> bool:
        """Whether the op's default overload returns a list of tensors (split, unbind)."""
        ns, _, op = name.partition("::")
        packet = getattr(self.torch.ops.aten, op, None) if ns == "aten" else None
        if packet is None:
            return False
        ov = "default" if "default" in packet.overloads() else packet.overloads()[0]
        rets = getattr(packet, ov)._schema.returns
        return len(rets) == 1 and str(rets[0].type).startswith("List[Tensor]")


def _load(path: Path) -> list:
    with gzip.open(path, "rt") if path.name.endswith(".gz") else open(path) as f:
        return json.load(f)["traceEvents"]


def _trees(events: list) -> list[dict]:
    """Per host thread, the cpu_op forest with launches of GPU work as leaves ("L")."""
    gpu_corr = {e.get("args", {}).get("correlation") for e in events
                if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    threads: dict = collections.defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat == "cpu_op" or (cat in ("cuda_runtime", "cuda_driver")
                               and e.get("args", {}).get("correlation") in gpu_corr):
            ts = round(e["ts"] * 1000)
            threads[(e["pid"], e["tid"])].append((ts, ts + round(e.get("dur", 0) * 1000), cat, e))
    roots = []
    for items in threads.values():
        items.sort(key=lambda x: (x[0], -x[1]))
        stack: list[dict] = []
        for ts, end, cat, e in items:
            while stack and stack[-1]["end"] <= ts:
                stack.pop()
            node = {"e": e, "end": end, "op": cat == "cpu_op", "kids": []}
            (stack[-1]["kids"] if stack else roots).append(node)
            if node["op"]:
                stack.append(node)
    return roots


def _args(e: dict) -> tuple[list, list, list]:
    a = e.get("args", {})
    return a.get("Input Dims", []), a.get("Input type", []), a.get("Concrete Inputs", [])


def _child_args(child: dict, parent: dict) -> list:
    """One code per input of `child`: "i<k>" = the parent's input k (same dims and type, or the
    same tensor list), "e0" = a fresh empty tensor (dims [0], before a resize_) of the parent's
    first output's dtype, "c<k>" = the parent's input k viewed as [1, numel, 1, ...] (a bias
    broadcast over the channels of a 3-d or wider output), "o0" = the parent's first output (any
    other tensor), else the input's kind as the profiler types it ("Scalar", "ScalarList",
    "TensorList", ""). A 0-dim tensor beside a tensor operand that is none of the parent's inputs
    (the wrapped Python scalar of `x.remainder(768)`'s inner `remainder.Tensor`) is its dtype as
    the profiler types it ("long int", "double"), which the expansion writes with dims [] as the
    H200 recorded it; "o0" there named the output and drew the scalar as a full operand."""
    pdims, ptypes, _ = _args(parent)
    dims, types, _ = _args(child)
    out = []
    for i, t in enumerate(types):
        d = dims[i] if i < len(dims) else []
        if t in ARG_KINDS and t != "TensorList":
            out.append(t)
            continue
        # the parent's input at the same position first: SDPA's q, k and v have the same dims, and
        # the inner `_cudnn_attention_forward(q, k, v, ...)` takes each at its own position (the
        # first match named all three q: a fused projection's v strides were lost)
        same = i < len(pdims) and i < len(ptypes) and pdims[i] == d and ptypes[i] == t
        ref = f"i{i}" if same else next((f"i{k}" for k, (pd, pt) in enumerate(zip(pdims, ptypes))
                                         if pd == d and pt == t), None)
        if ref is None:
            ref = next((f"c{k}" for k, (pd, pt) in enumerate(zip(pdims, ptypes))
                        if pt == t and _is_channel_view(d, pd)), None)
        if ref is None and d == [] and t and t != "TensorList" and any(
                x for j, x in enumerate(dims) if j != i and types[j] not in ARG_KINDS):
            ref = t  # a 0-dim tensor beside a real operand: a wrapped scalar
        if ref is None:
            ref = "TensorList" if t == "TensorList" else ("e0" if d == [0] else "o0")
        out.append(ref)
    return out


def _is_channel_view(d: list, source: list) -> bool:
    """`d` is [1, n, 1, ...] (3 or more dims) where n is the element count of a 1-d `source`."""
    return (len(d) >= 3 and len(source) == 1 and d[0] == 1 and d[1] == source[0] and
            all(x == 1 for x in d[2:]))


def _subtree(node: dict, top: dict, list_len: int | None, multi_out: bool = False) -> list:
    """The children of `node` as template items: {"name", "args", "kids"} / "L" / repeats."""
    items = []
    for k in node["kids"]:
        if not k["op"]:
            if not items or items[-1] != "L":
                items.append("L")
            continue
        items.append({"name": k["e"]["name"], "args": _child_args(k["e"], top["e"]),
                      "kids": _subtree(k, top, list_len)})
    # runs of identical siblings: per-tensor calls of a foreach op
    out: list = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[i] and items[i] != "L":
            j += 1
        n = j - i + 1
        if n >= 2 and list_len is not None and (n == list_len or (list_len == 0 and n > 30)):
            out.append({"repeat": "list0", "item": items[i]})
        elif n >= 2 and multi_out and i == 0 and j == len(items) - 1:
            out.append({"repeat": "outputs", "item": items[i]})  # one view per output (split, unbind)
        else:
            out.extend(items[i:j + 1])
        i = j + 1
    return out


def _list_len(e: dict) -> int | None:
    """Length of the op's first tensor list input: known up to 30, 0 beyond (dims not recorded)."""
    dims, types, _ = _args(e)
    for d, t in zip(dims, types):
        if t == "TensorList":
            return len(d)
    return None


def collect(paths: list[Path], clf: Classifier) -> dict:
    counts: dict = collections.defaultdict(collections.Counter)  # (name, types) -> template -> n
    for path in paths:
        for root in _trees(_load(path)):
            stack = [root]
            while stack:
                n = stack.pop()
                if not n["op"]:
                    continue
                e = n["e"]
                name = e["name"]
                wrapper = any(k["op"] and k["e"]["name"] == name and kinds(_args(k["e"])[1]) == kinds(_args(e)[1])
                              for k in n["kids"])
                if clf.captured(name) and not wrapper:
                    kids = [k for k in n["kids"] if not (k["op"] and "::" not in k["e"]["name"])]
                    tmpl = _subtree({"kids": kids}, n, _list_len(e), clf.returns_list(name))
                    dims, types, _ = _args(e)
                    concrete = e.get("args", {}).get("Concrete Inputs")
                    rk = ranks(types, dims, e.get("args", {}).get("Input Strides"), e["name"], concrete)
                    key = (name, tuple(types), rk, scalar_values(types, concrete))
                    counts[key][json.dumps(tmpl, separators=(",", ":"))] += 1
                else:
                    stack.extend(reversed(n["kids"]))
    return counts


# a scalar value gets a subtree of its own only where the traces saw it this often: two calls of a
# 31-input `cat` along dim 1 (the kernel's many-inputs path) would otherwise give every dim-1 cat
# their children
VALUES_MIN_CALLS = 8


def build(counts: dict) -> dict:
    """{op: {"default": tree, "kinds": {kinds: tree}, "types": {types: tree}, "shapes":
    {types|size classes: tree}, "values": {types|scalar values: tree}}}, each level only where it
    differs from the coarser one (values: see VALUES_MIN_CALLS)."""
    by_name: dict = collections.defaultdict(collections.Counter)
    by_kinds: dict = collections.defaultdict(collections.Counter)
    by_types: dict = collections.defaultdict(collections.Counter)
    by_values: dict = collections.defaultdict(collections.Counter)
    by_sizes: dict = collections.defaultdict(collections.Counter)
    for (name, types, rk, values), c in counts.items():
        by_values[(name, types, values)].update(c)
        by_sizes[(name, types, rk)].update(c)
        by_name[name].update(c)
        by_kinds[(name, kinds(list(types)))].update(c)
        by_types[(name, types)].update(c)
    ops: dict = {}

    def best(c: collections.Counter) -> str:
        # Instances that launch nothing ran on CPU tensors (a trace does not say which device):
        # the simulation captures CUDA ops only, so a subtree with launches wins if there is one.
        launching = {t: n for t, n in c.items() if '"L"' in t}
        return sorted((launching or c).items(), key=lambda kv: (-kv[1], kv[0]))[0][0]

    def key(types) -> str:
        return json.dumps(list(types), separators=(",", ":"))

    def finer(fine: str, coarse: str) -> str:
        # a group seen only on CPU tensors (no launches) says nothing about the CUDA op
        return coarse if '"L"' in coarse and '"L"' not in fine else fine

    for name in sorted(by_name):
        default = best(by_name[name])
        chosen_kinds = {k: finer(best(c), default) for (n, k), c in by_kinds.items() if n == name}
        chosen_types = {t: finer(best(c), chosen_kinds[kinds(list(t))]) for (n, t), c in by_types.items() if n == name}
        kk = {k: b for k, b in sorted(chosen_kinds.items()) if b != default}
        tt = {key(t): b for t, b in sorted(chosen_types.items()) if b != chosen_kinds[kinds(list(t))]}
        # size classes: where one differs from its types' choice, all of that types' classes
        # are kept (the simulation takes the nearest one)
        sized = {(t, rk): finer(best(c), chosen_types[t]) for (n, t, rk), c in by_sizes.items() if n == name}
        varies = {t for (t, rk), b in sized.items() if b != chosen_types[t]}
        ss = {key(t) + "|" + rk: b for (t, rk), b in sorted(sized.items()) if t in varies}
        # scalar values: where one takes another subtree than its types' choice (autograd's
        # `pow(x, 1.)` in the backward of `x.pow(2)` runs a copy, `pow(x, 2)` a kernel of its own),
        # for types without size classes only: where sizes decide, a value seen with one model's
        # sizes (a vocabulary of 32000, a group count) says nothing about another's
        valued = {(t, v): finer(best(c), chosen_types[t]) for (n, t, v), c in by_values.items()
                  if n == name and v and t not in varies and sum(c.values()) >= VALUES_MIN_CALLS}
        vv = {key(t) + "|" + key(v): b for (t, v), b in sorted(valued.items()) if b != chosen_types[t]}
        entry: dict = {"default": json.loads(default)}
        for field, d in (("kinds", kk), ("types", tt), ("shapes", ss), ("values", vv)):
            if d:
                entry[field] = {k: json.loads(v) for k, v in d.items()}
        if entry["default"] or len(entry) > 1:
            ops[name] = entry
    return ops


def _source_name(p: Path, reference: Path | None) -> str:
    """A source's path relative to the repository ("../shared/reference/..." for the shared
    references, wherever --reference has them)."""
    p = p.resolve()
    if ROOT in p.parents:
        return p.relative_to(ROOT).as_posix()
    if reference is not None and Path(reference).resolve() in p.parents:
        return "../shared/reference/" + p.relative_to(Path(reference).resolve()).as_posix()
    return p.name


def generate(paths: list[Path], reference: Path | None = None) -> dict:
    clf = Classifier()
    ops = build(collect(paths, clf))
    # each distinct subtree once ("trees"); the ops refer to them by index
    trees: list = []
    index: dict[str, int] = {}

    def ref(tree) -> int:
        k = json.dumps(tree, separators=(",", ":"))
        if k not in index:
            index[k] = len(trees)
            trees.append(tree)
        return index[k]

    refs: dict = {}
    for name, e in ops.items():
        r: dict = {"default": ref(e["default"])}
        for field in ("kinds", "types", "shapes", "values"):
            if field in e:
                r[field] = {k: ref(v) for k, v in e[field].items()}
        refs[name] = r
    # the comment names the generator's old path: kept as the shipped file has it (the file
    # rebuilds byte for byte); change both together
    return {
        "comment": "Ops a CUDA build's kernels dispatch inside each captured op, and where they launch (\"L\"); "
                   "learned from real H200 traces by tools/gen_op_children.py (do not edit).",
        "sources": [_source_name(p, reference) for p in paths],
        "trees": trees,
        "ops": refs,
    }


def render(table: dict) -> str:
    """Compact JSON, one line per tree and per op (small, and diffs stay readable)."""
    def dumps(x) -> str:
        return json.dumps(x, separators=(",", ":"))

    lines = ["{", f' "comment": {dumps(table["comment"])},', f' "sources": {dumps(table["sources"])},',
             ' "trees": [']
    lines += ["  " + dumps(t) + ("," if i < len(table["trees"]) - 1 else "") for i, t in enumerate(table["trees"])]
    lines.append(" ],")
    lines.append(' "ops": {')
    items = list(table["ops"].items())
    lines += [f"  {dumps(k)}: {dumps(v)}" + ("," if i < len(items) - 1 else "") for i, (k, v) in enumerate(items)]
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"
