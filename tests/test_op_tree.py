"""The op tree of simulated traces: the native op recorder, the kernels' children table, the
host layout, and op counts against a real trace.

- recorder (native/op_recorder.cpp, in a child process: the library loads before torch);
- engine pieces without torch: children expansion, drawing calls at one instant, numbering;
- the children table is what `phantora-prof calibrate op-children` makes of the real traces;
- the reference GPT under the simulator records the op names and counts of the real H200
  profile (per profiled step, tools/holdout/opstream.py).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import reference_trace
from test_native import needs_cpu_torch, run_child

from phantora_prof.engine import host_layout, op_children
from phantora_prof.engine.rank_timeline import _number_ops
from phantora_prof.protocol import OpCall, OpKind, TensorArg
from tracing.model import Span

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "holdout"))  # opstream.py


# ---------------------------------------------------------------------------------------
# recorder


@needs_cpu_torch
def test_recorder_records_the_dispatcher_tree():
    out = run_child("""
        import json
        from phantora_prof.runtime.dispatch import op_recorder
        from phantora_prof.runtime.process import native_loader
        native_loader.load_fake_cuda(1)
        import torch
        rec = op_recorder.install()
        rec.enable()
        rec.now.value = 5000
        x = torch.randn(4, 8, requires_grad=True)
        w = torch.randn(16, 8)
        rec.drain()
        y = torch.nn.functional.linear(x, w)
        rec.now.value = 6000
        tls = rec.tls()
        tls.suppress = 1
        torch.relu(y)                      # hidden: the capture mode faking an op
        tls.suppress = 0
        tls.skip_next = 1
        torch.cat([y, y], 1)               # the re-dispatch of an op already recorded
        z = y.sum()
        z.backward()
        print(json.dumps(json.loads(rec.drain())))
    """)  # the machine's usual build cache: every simulation builds into it, once (test_native builds anew)
    recs = json.loads(out)
    by_id = {r[0]: r for r in recs}
    names = [r[5] for r in recs]
    assert "aten::relu" not in names and "aten::cat" not in names
    linear = next(r for r in recs if r[5] == "aten::linear")
    kids = [r[5] for r in recs if r[1] == linear[0]]
    assert kids == ["aten::t", "aten::matmul"]
    t = next(r for r in recs if r[5] == "aten::t")
    assert [r[5] for r in recs if r[1] == t[0]] == ["aten::transpose"]
    assert (linear[3], linear[4]) == (5000, 5000)                 # simulated time
    assert linear[9][:2] == [[4, 8], [16, 8]] and linear[10][:2] == ["float", "float"]
    assert linear[6] >= 0 and linear[7] == 0                      # sequence number, forward thread
    # autograd: evaluate_function > node, the node with its sequence number
    node = next(r for r in recs if r[5] == "SumBackward0")
    assert by_id[node[1]][5] == "autograd::engine::evaluate_function: SumBackward0"
    assert node[6] >= 0 and node[7] > 0 and node[3] == 6000
    assert all(not n.startswith(("prim::", "Python")) for n in names)


# ---------------------------------------------------------------------------------------
# engine: children, layout, numbering


def _op(name: str, args: tuple, outs: tuple, start: int, end: int, launch: int, ext: int = 10) -> OpCall:
    op = OpCall(0, ext, name, args, {}, outs, 0, start, end, 7, 0, OpKind.COMPUTE, depth=1)
    op.launch_ns = launch
    return op


def _host(name, ts, dur, ext, **kw):
    return Span("cpu_op", name, 100, ts, dur, {"External id": ext, "Record function id": 0}, **kw)


def test_children_of_to_copy_launch_inside_copy():
    a = TensorArg((8, 4), (4, 1), "float32", 0)
    b = TensorArg((8, 4), (4, 1), "bfloat16", 0)
    op = _op("aten::_to_copy", (a,), (b,), 1000, 13000, 10000)
    span = _host("aten::_to_copy", 1000, 12000, 10, key=(10, 0))
    span.args.update({"Input Dims": [[8, 4], [], [], [], [], [], []], "Input type": ["float", "Scalar", "", "", "",
                                                                                   "Scalar", ""],
                      "Input Strides": [[4, 1], [], [], [], [], [], []], "Concrete Inputs": [""] * 7})
    api = Span("cuda_runtime", "cudaLaunchKernel", 100, 10000, 3000, {"External id": 10, "correlation": 1})
    gpu = Span("kernel", "k", 7, 14000, 500, {"External id": 10, "correlation": 1}, on_gpu=True)
    ids = iter(range(-1, -100, -1))
    template = op_children.table().lookup("aten::_to_copy", span.args["Input type"])
    kids = op_children.expand(op, span, [(api, [gpu])], template, lambda: next(ids))
    assert [k.name for k in kids] == ["aten::empty_strided", "aten::copy_"]
    empty, copy = kids
    assert 1000 < empty.ts_ns and empty.ts_ns + empty.dur_ns <= copy.ts_ns < 10000      # before the launch
    assert copy.ts_ns + copy.dur_ns <= 13000 and api.ts_ns + api.dur_ns <= copy.ts_ns + copy.dur_ns
    assert api.ts_ns == 10000 and api.dur_ns < 3000                   # drawn shorter, not moved
    assert api.args["External id"] == gpu.args["External id"] == copy.args["External id"]
    assert copy.args["Input Dims"] == [[8, 4], [8, 4], []]           # output (bf16), input, non_blocking
    assert copy.args["Input type"] == ["c10::BFloat16", "float", "Scalar"]
    assert copy.parent == span.key and empty.parent == span.key


def test_a_clones_copy_writes_its_output_not_its_input():
    """A `.contiguous()` (or reshape copy) of transposed heads: the copy inside the clone writes the
    contiguous output, as a CUDA build's trace records it; the table's code for the destination
    is the input's (learned on contiguous clones), which drew it with the transposed strides."""
    src = TensorArg((4, 64, 8, 16), (8192, 16, 1024, 1), "bfloat16", 0)
    out = TensorArg((4, 64, 8, 16), (8192, 128, 16, 1), "bfloat16", 0)
    op = _op("aten::clone", (src,), (out,), 1000, 13000, 10000)
    span = _host("aten::clone", 1000, 12000, 10, key=(10, 0))
    span.args.update({"Input Dims": [[4, 64, 8, 16], []], "Input type": ["c10::BFloat16", "Scalar"],
                      "Input Strides": [[8192, 16, 1024, 1], []], "Concrete Inputs": ["", "0"]})
    api = Span("cuda_runtime", "cudaLaunchKernel", 100, 10000, 3000, {"External id": 10, "correlation": 1})
    gpu = Span("kernel", "k", 7, 14000, 500, {"External id": 10, "correlation": 1}, on_gpu=True)
    ids = iter(range(-1, -100, -1))
    template = op_children.table().lookup("aten::clone", span.args["Input type"], span.args["Input Dims"],
                                          span.args["Input Strides"])
    kids = op_children.expand(op, span, [(api, [gpu])], template, lambda: next(ids))
    copy = next(k for k in kids if k.name == "aten::copy_")
    assert copy.args["Input Strides"][:2] == [[8192, 128, 16, 1], [8192, 16, 1024, 1]]  # output <- input
    assert op_children._destination_codes("aten::copy_", (("i", 0), ("i", 0)), "aten::add_") == (("i", 0), ("i", 0))


def test_a_scalars_value_picks_its_own_children():
    """`pow(x, 1.)`, which autograd runs in the backward of `x.pow(2)` (RMSNorm's statistics), is a
    copy on a CUDA build (`aten::copy_` with a Memcpy DtoD inside), `pow(x, 2)` a kernel of its
    own: the table keys pow by its exponent's value as the trace prints it."""
    table = op_children.table()
    names = [c["name"] for c in table.lookup("aten::pow", ["float", "Scalar"], [[8, 16], []], [[16, 1], []],
                                             ["", "1."]) if isinstance(c, dict)]
    assert "aten::copy_" in names
    other = table.lookup("aten::pow", ["float", "Scalar"], [[8, 16], []], [[16, 1], []], ["", "2"])
    assert "aten::copy_" not in [c["name"] for c in other if isinstance(c, dict)]


def test_children_repeat_per_output_and_list():
    t = TensorArg((6, 4), (4, 1), "float32", 0)
    op = _op("aten::split", (t, 2), (t, t, t), 0, 3000, -1)
    span = _host("aten::split", 0, 3000, 10, key=(10, 0))
    span.args.update({"Input Dims": [[6, 4], [], []], "Input type": ["float", "Scalar", "Scalar"]})
    ids = iter(range(-1, -100, -1))
    kids = op_children.expand(op, span, [], op_children.table().lookup("aten::split", None), lambda: next(ids))
    assert [k.name for k in kids].count("aten::narrow") == 3
    assert all(0 < k.ts_ns and k.ts_ns + k.dur_ns <= 3000 for k in kids)


def test_table_lookup_order():
    table = op_children.ChildTable({"trees": [["L"], [{"name": "aten::y", "args": [], "kids": []}], [],
                                              [{"name": "aten::z", "args": [], "kids": []}]],
                                    "ops": {"aten::x": {"default": 0, "kinds": {"T,S": 1},
                                                        "types": {'["float","Scalar"]': 2},
                                                        "shapes": {'["float","Scalar"]|10,-': 3,
                                                                   '["float","Scalar"]|20,-': 2}}}})
    assert table.lookup("aten::x", ["float", "Scalar"]) == []
    assert table.lookup("aten::x", ["float", "Scalar"], [[32, 32], []])[0]["name"] == "aten::z"  # 2^10: nearest
    assert table.lookup("aten::x", ["float", "Scalar"], [[1 << 19], []]) == []                     # nearest 2^20
    assert table.lookup("aten::x", ["c10::BFloat16", "Scalar"])[0]["name"] == "aten::y"
    assert table.lookup("aten::x", ["float"]) == ["L"]
    assert table.lookup("aten::x", None) == ["L"] and table.lookup("aten::z", None) == []


def test_table_lookup_takes_the_inputs_layout_first():
    """A channels-last batch norm gets the children an NHWC one has on the GPU (a zeroed counter),
    not those of an NCHW one of the same size (reshape / view): the size classes carry the layout."""
    assert op_children.ranks(["float"], [[64, 128, 14, 14]], [[25088, 196, 14, 1]]) == "20:4"
    assert op_children.ranks(["float"], [[64, 128, 14, 14]], [[25088, 1, 1792, 128]]) == "20c:4"
    assert op_children.ranks(["float"], [[64, 128, 14, 7]], [[25088, 196, 14, 2]]) == "19s:4"
    table = op_children.ChildTable({"trees": [[], [{"name": "aten::reshape", "args": [], "kids": []}],
                                              [{"name": "aten::zeros", "args": [], "kids": []}]],
                                    "ops": {"aten::bn": {"default": 0,
                                                         "shapes": {'["float"]|20': 1, '["float"]|23c': 2}}}})
    nhwc = table.lookup("aten::bn", ["float"], [[64, 128, 14, 14]], [[25088, 1, 1792, 128]])
    nchw = table.lookup("aten::bn", ["float"], [[64, 128, 28, 28]], [[100352, 784, 28, 1]])
    assert nhwc[0]["name"] == "aten::zeros" and nchw[0]["name"] == "aten::reshape"


def test_a_2d_batch_norm_takes_the_channels_last_children():
    """ATen runs a contiguous (N, C) batch norm with the channels-last kernels (its dim 1 has
    stride 1), which zero a counter: LeViT's BatchNorm1d over tokens on the H200 has
    `aten::zeros` under every native_batch_norm. Only batch norm reads a 2-D input that way."""
    assert op_children.ranks(["c10::BFloat16"], [[12544, 256]], [[256, 1]], "aten::native_batch_norm") == "21c:2"
    assert op_children.ranks(["c10::BFloat16"], [[12544, 256]], [[256, 1]], "aten::mm") == "21:2"
    assert op_children.ranks(["float"], [[64, 128, 14, 14]], [[25088, 196, 14, 1]], "aten::native_batch_norm") == "20:4"


def _nesting(spans: list[Span]) -> dict[str, str]:
    """Parent name of each span as a reader sees it (sort by start, longer first; pop ended)."""
    out: dict[str, str] = {}
    stack: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.ts_ns, -s.dur_ns)):
        while stack and stack[-1].ts_ns + stack[-1].dur_ns <= s.ts_ns:
            stack.pop()
        out[s.name] = stack[-1].name if stack else "-"
        stack.append(s)
    return out


def test_layout_draws_calls_at_one_instant_nested_as_they_ran():
    # evaluate_function > [AddBackward0 (nothing to launch: zero length), aten::to > aten::_to_copy],
    # everything but the copy's modelled cost at one instant; then a sync right at its end
    ev = _host("evaluate_function", 100, 500, 1, key=(1, 0))
    node = _host("AddBackward0", 100, 0, 2, key=(2, 0), parent=(1, 0))
    to = _host("aten::to", 100, 500, 3, key=(3, 0), parent=(1, 0))
    cp = _host("aten::_to_copy", 100, 500, 4, key=(4, 0), parent=(3, 0))
    sync = Span("cuda_runtime", "cudaDeviceSynchronize", 100, 600, 50, {"correlation": 9})
    spans = [cp, to, sync, node, ev]
    host_layout.layout(spans)
    assert _nesting(spans) == {"evaluate_function": "-", "AddBackward0": "evaluate_function",
                               "aten::to": "evaluate_function", "aten::_to_copy": "aten::to",
                               "cudaDeviceSynchronize": "-"}
    assert all(s.dur_ns > 0 for s in spans)
    assert max(abs(s.ts_ns - 100) for s in (ev, node, to, cp)) <= 5  # a few ns, not more


def test_layout_outermost_records_are_siblings_inside_annotations():
    step = Span("user_annotation", "ProfilerStep#1", 100, 0, 1000, {"External id": 1})
    empty = _host("aten::empty", 200, 0, 2, key=(2, 0), parent=host_layout.TOP)
    to = _host("aten::to", 200, 0, 3, key=(3, 0), parent=host_layout.TOP)
    copy = _host("aten::_to_copy", 200, 0, 4, key=(4, 0), parent=(3, 0))
    spans = [copy, to, empty, step]
    host_layout.layout(spans)
    assert _nesting(spans) == {"ProfilerStep#1": "-", "aten::empty": "ProfilerStep#1", "aten::to": "ProfilerStep#1",
                               "aten::_to_copy": "aten::to"}


def test_number_ops_in_begin_order():
    a = _host("a", 0, 100, 50)
    b = _host("b", 10, 20, -3)
    api = Span("cuda_runtime", "cudaLaunchKernel", 100, 12, 5, {"External id": -3, "correlation": 1})
    k = Span("kernel", "k", 7, 40, 5, {"External id": -3, "correlation": 1}, on_gpu=True)
    _number_ops([k, api, b, a])
    assert (a.args["External id"], b.args["External id"]) == (1, 2)
    assert api.args["External id"] == k.args["External id"] == 2


# ---------------------------------------------------------------------------------------
# the table and the op counts


def test_children_table_is_fresh():
    """phantora_prof/cost/data/op_children.json is what `phantora-prof calibrate op-children` makes."""
    from phantora_prof.calibrate import op_children as gen
    from phantora_prof.calibrate.reference import reference_dir

    if reference_dir() is None:
        pytest.skip("reference traces not available (../shared/reference)")
    missing = [p for p in gen.default_sources() if not p.exists()]
    if missing:
        pytest.skip(f"real traces not available: {missing[0]}")
    r = subprocess.run([sys.executable, "-m", "phantora_prof", "calibrate", "op-children", "--check"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_reference_gpt_op_stream_matches_real(cli):
    """gpt.py (12 layers) profiled as the reference was: per step, the cpu_op names and counts
    of the real H200 profile (all ops: within 1%; each name outside attention, whose SDPA
    backend routing is another matter: within 3% or 2 ops)."""
    import opstream

    real_path = reference_trace("gpt_small")
    workloads = real_path.parent.parent.parent / "workloads"
    r = cli("--no-trace", sys.executable, str(workloads / "gpt.py"), "--steps", "6", "--profile-dir", "pd",
            timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    sim_path = next((cli.cwd / "pd").glob("*.pt.trace.json"))
    real, sim = opstream.load(real_path), opstream.load(sim_path)
    total = opstream.compare(opstream.per_step(real), opstream.per_step(sim))
    assert abs(total["sim_ops"] / total["real_ops"] - 1) < 0.01, total["ops_diff"][:10]
    outside = opstream.compare(opstream.per_step(real, opstream.attention_ops(real)),
                               opstream.per_step(sim, opstream.attention_ops(sim)), top=1000)
    bad = [(n, a, b) for n, a, b in outside["ops_diff"] if abs(b - a) > max(2, 0.03 * a)]
    assert not bad, bad


def test_reshape_records_the_cuda_builds_paths(cli):
    """A reshape that can be a view of a non-contiguous tensor records `aten::_reshape_alias(self,
    size, stride)` as a CUDA build does (it recorded `aten::view`: ATen's reshape takes view for a
    tensor subclass), whose backward node is ReshapeAliasBackward0; a contiguous input stays a
    view, a non-viewable one a clone."""
    from tracing.kineto import load_trace

    r = cli("--out", "out", sys.executable, str(ROOT / "tests" / "scripts" / "reshape_paths.py"))
    assert r.returncode == 0, r.stderr[-3000:]
    ops = sorted((e for e in load_trace(cli.cwd / "out" / "rank0.pt.trace.json.gz")["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    main = ops[0]["tid"]
    under = []
    for i, e in enumerate(ops):
        if e["name"] == "aten::reshape" and e["tid"] == main:
            under.append(ops[i + 1]["name"])
    assert under == ["aten::view", "aten::_reshape_alias", "aten::clone"], under
    alias = next(e for e in ops if e["name"] == "aten::_reshape_alias")
    assert alias["args"]["Input type"] == ["float", "ScalarList", "ScalarList"]
    assert alias["args"]["Concrete Inputs"] == ["", "[4, 64, 4, 16]", "[8192, 16, 1024, 1]"]
    # its autograd node is a CUDA build's, ReshapeAliasBackward0 (it was ViewBackward0)
    nodes = [e["name"] for e in ops if e["tid"] != main and "Backward0" in e["name"]]
    assert "ReshapeAliasBackward0" in nodes and "autograd::engine::evaluate_function: ReshapeAliasBackward0" in nodes
    assert "ViewBackward0" not in nodes, nodes


def test_index_backward_runs_in_place_as_a_cuda_build_does(cli):
    """The backward of advanced indexing (IndexBackward0) is `_index_put_impl_(zeros, indices,
    grad, accumulate=True, unsafe=True)` on a CUDA build, with the sort-based accumulation's ops
    under it; ATen takes `index_put` (a clone, then `index_put_`) only for tensor subclasses,
    which the simulated GPU's tensors are (HF Swin-v2's H100 profile: 24 `remainder` per step,
    none simulated before)."""
    from tracing.kineto import load_trace

    r = cli("--out", "out", sys.executable, str(ROOT / "tests" / "scripts" / "index_backward.py"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "grad ok (225, 24)" in r.stdout
    ops = sorted((e for e in load_trace(cli.cwd / "out" / "rank0.pt.trace.json.gz")["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    names = [e["name"] for e in ops]
    assert "aten::index_put" not in names and "aten::index_put_" not in names
    impls = [e for e in ops if e["name"] == "aten::_index_put_impl_"]
    assert len(impls) == 2
    for impl in impls:
        assert impl["args"]["Concrete Inputs"] == ["", "", "", "True", "True"]
        assert impl["args"]["Input Dims"] == [[225, 24], [], [4096, 24], [], []]
        end = impl["ts"] + impl["dur"]
        inside = [e["name"] for e in ops if e is not impl and e["tid"] == impl["tid"]
                  and impl["ts"] <= e["ts"] and e["ts"] + e["dur"] <= end]
        assert "aten::remainder" in inside and "aten::arange" in inside, inside
        node = [e for e in ops if e["name"] == "IndexBackward0" and e["ts"] <= impl["ts"] <= e["ts"] + e["dur"]]
        assert node, "the in-place call runs inside the IndexBackward0 node"


def test_cat_records_a_narrow_and_a_copy_per_input_where_a_cuda_build_does(cli):
    """A cat whose inputs a CUDA build cannot batch (another dtype than the output's, five dims,
    one input) runs a narrow per input and a copy into each slice: aten::narrow > aten::slice >
    aten::as_strided inside aten::cat, and a copy kernel per input with no aten::copy_ record,
    as HF Phi-3's H100 profile shows for its key/value cache (fp32 keys, bf16 values under
    autocast); cats over inputs of the output's dtype launch one batched copy kernel and record
    nothing inside."""
    from tracing.kineto import load_trace

    r = cli("--out", "out", sys.executable, str(ROOT / "tests" / "scripts" / "cat_paths.py"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "cache_values:float32" in r.stdout and "one_input:bfloat16" in r.stdout
    doc = load_trace(cli.cwd / "out" / "rank0.pt.trace.json.gz")
    events = doc["traceEvents"]
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: (e["ts"], -e["dur"]))
    launches = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"]
    gpu = {e["args"]["correlation"]: e["name"] for e in events
           if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")}

    def inside(outer, items):
        return [e for e in items if e is not outer and e["tid"] == outer["tid"]
                and outer["ts"] <= e["ts"] and e["ts"] + e.get("dur", 0) <= outer["ts"] + outer["dur"]]

    seen = []
    for cat in (e for e in ops if e["name"] == "aten::cat"):
        names = [e["name"] for e in inside(cat, ops)]
        kernels = [gpu[e["args"]["correlation"]] for e in inside(cat, launches) if e["args"].get("correlation") in gpu]
        seen.append((names.count("aten::narrow"), len(kernels), all("CatArrayBatchedCopy" in k for k in kernels)))
        if names:
            assert names[:3] == ["aten::narrow", "aten::slice", "aten::as_strided"], names
            assert "aten::copy_" not in names
    # dense, strided, cache keys: batched; cache values, five dims, one input: narrow + copy per input
    assert seen == [(0, 1, True), (0, 1, True), (0, 1, True), (1, 1, False), (2, 2, False), (1, 1, False)], seen


def test_a_reduction_that_reads_its_input_in_the_output_dtype_casts_it_first(cli):
    """ATen's sum / mean / prod kernels read the input in the output's dtype (make_reduction_from_out_ty),
    casting it first unless a 16-bit float is summed into float32: `mask.sum(dim)` records
    aten::to > aten::_to_copy > aten::empty_strided, aten::copy_ inside aten::sum, a copy kernel
    and then the reduction over int64 (timm Hiera's AmaxBackward0 on an H100); a whole int32 sum
    records the cast once (op_children's learned tree for sum.default lays it out) with the copy
    kernel its own; a bf16 sum into float32 and a float32 mean record no cast."""
    from tracing.kineto import load_trace

    r = cli("--out", "out", sys.executable, str(ROOT / "tests" / "scripts" / "reduce_casts.py"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "dtypes torch.int64 torch.int64 torch.float32 torch.float32" in r.stdout
    doc = load_trace(cli.cwd / "out" / "rank0.pt.trace.json.gz")
    events = doc["traceEvents"]
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: (e["ts"], -e["dur"]))
    launches = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"]
    gpu = {e["args"]["correlation"]: e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"}

    def inside(outer, items):
        return [e for e in items if e is not outer and e["tid"] == outer["tid"]
                and outer["ts"] <= e["ts"] and e["ts"] + e.get("dur", 0) <= outer["ts"] + outer["dur"]]

    outer = [e for e in ops if e["name"] in ("aten::sum", "aten::mean") and not any(
        e in inside(o, ops) for o in ops if o["name"] in ("aten::sum", "aten::mean"))]
    assert [e["args"]["Input type"][0] for e in outer] == ["bool", "int", "c10::BFloat16", "float"], outer
    for e, casts in zip(outer, (True, True, False, False)):
        names = [c["name"] for c in inside(e, ops)]
        kernels = [gpu[c["args"]["correlation"]] for c in inside(e, launches) if c["args"].get("correlation") in gpu]
        assert names.count("aten::to") == (1 if casts else 0), (e["args"]["Input type"], names)
        if casts:
            i = names.index("aten::to")
            assert names[i:i + 4] == ["aten::to", "aten::_to_copy", "aten::empty_strided", "aten::copy_"], names
            assert len(kernels) == 2 and "copy" in kernels[0] and "reduce_kernel" in kernels[1], kernels
        else:
            assert len(kernels) == 1 and "reduce_kernel" in kernels[0], kernels


def test_an_index_accumulation_is_timed_by_the_longest_run_of_known_indices(cli):
    """ATen's accumulation kernel walks each row's indices one by one, so the longest run decides
    its time: Swin's 7 x 7 relative-position index, built on the CPU, takes its zero offset 49
    times in 2,401 indices (the H200: 10.8 us), where the mean run is 14 (the estimate without the
    values, kept for indices drawn on the GPU: ~6 us)."""
    from tracing.kineto import load_trace

    r = cli("--gpu", "h200", "--out", "out", sys.executable, str(ROOT / "tests" / "scripts" / "index_runs.py"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "runs ok 49" in r.stdout
    kernels = [e for e in load_trace(cli.cwd / "out" / "rank0.pt.trace.json.gz")["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") == "kernel" and "indexing_backward_kernel" in e["name"]]
    assert len(kernels) == 2
    known, drawn = (k["dur"] for k in kernels)
    assert known == pytest.approx(10.8, rel=0.1)
    assert drawn == pytest.approx(6.1, rel=0.1)


def test_subclass_dispatch_is_a_python_subclass_range(cli):
    """A DTensor op shows as on a GPU: the op, inside it a `PythonSubclass` range (the
    subclass's own dispatch, with the op's inputs), inside that the op on the local tensors."""
    from tracing.kineto import load_trace
    from tracing.validate import validate_trace

    r = cli("--out", "out", sys.executable, str(ROOT / "tools" / "holdout" / "dtensor_ops.py"),
            "--no-count", "--iters", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = load_trace(cli.cwd / "out" / "rank0.pt.trace.json.gz")
    assert validate_trace(doc) == []
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    subs = [e for e in ops if e["name"] == "PythonSubclass"]
    assert len(subs) >= 11 * 2  # every case dispatches at least one DTensor op per iteration

    def inside(inner, outer):
        return (inner is not outer and inner["tid"] == outer["tid"] and outer["ts"] <= inner["ts"]
                and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"])

    for s in subs:
        parents = [e for e in ops if e["name"] != "PythonSubclass" and inside(s, e)]
        op = min(parents, key=lambda e: e["dur"])  # the op it belongs to
        assert op["args"]["Input Dims"] == s["args"]["Input Dims"]
        assert op["ts"] <= s["ts"] and abs(s["ts"] + s["dur"] - op["ts"] - op["dur"]) < 0.005  # ends with it
        children = [e for e in ops if inside(e, s)]
        # (a view op's own autograd record has the bare name: aten::detach > detach > PythonSubclass
        # > aten::detach, as on a GPU)
        assert any(c["name"].removeprefix("aten::") == op["name"].removeprefix("aten::") for c in children), op["name"]
    # plain-tensor ops have none
    plain_mm = [e for e in ops if e["name"] == "aten::mm" and not any(inside(s, e) for s in subs)
                and not any(inside(e, s) for s in subs)]
    assert plain_mm


def _launch(cat: str, name: str):
    from tracing.model import Span

    return (Span("cuda_runtime", "cudaLaunchKernel", 1, 0, 1), [Span(cat, name, 7, 0, 1)])


def _tokens(*children):
    """A template's tokens: each child ("aten::x", launches) or a bare launch of the op itself ("L")."""
    out = []
    for c in children:
        if c == "L":
            out.append(("L",))
            continue
        name, n = c
        node = {"name": name, "args": [], "kids": []}
        out += [("B", node)] + [("L",)] * n + [("E", node)]
    return out


def test_extra_kernels_go_to_the_child_of_their_kind():
    """A bias convolution learned as cudnn_convolution (1 launch) + add_ (1 launch) that the cost
    model runs as 5 cuDNN kernels and the bias add: the 5 stay in cudnn_convolution."""
    from phantora_prof.engine.op_children import _assign_launches

    toks = _tokens(("aten::cudnn_convolution", 1), ("aten::add_", 1))
    markers = [i for i, t in enumerate(toks) if t == ("L",)]
    conv = "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_128x128_32x5_nhwc_align8>"
    pad = ("void nhwcAddPaddingKernel<__nv_bfloat16, __nv_bfloat16, float, true, (cudnnKernelDataType_t)0>"
           "(int, cudnn::reduced_divisor)")
    add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>"
    launches = [_launch("kernel", pad), _launch("kernel", conv), _launch("kernel", pad), _launch("kernel", conv),
                _launch("kernel", pad), _launch("kernel", add)]
    assert _assign_launches(toks, markers, launches, "aten::convolution") == [0, 0, 0, 0, 0, 1]
    # nothing to tell the children apart: one per marker in order, the rest with the last
    same = [_launch("gpu_memset", "Memset (Device)")] * 4
    assert _assign_launches(toks, markers, same, "aten::convolution") == [0, 1, 1, 1]
    assert _assign_launches(toks, markers, same[:1], "aten::convolution") == [0]
    assert _assign_launches(toks, markers, [], "aten::convolution") == []  # a CUDA-graph replay


def test_an_ops_own_kernel_is_not_given_to_a_child_of_another_kind():
    """T5's efficient-attention backward: the reference's subtree has the bias gradient's sum
    launch first; the simulated op launches its attention kernel first."""
    from phantora_prof.engine.op_children import _assign_launches

    toks = _tokens(("aten::sum", 1), "L")
    markers = [i for i, t in enumerate(toks) if t == ("L",)]
    attn = "fmha_cutlassB_bf16_aligned_64x64_k64_seqaligned_sm80(PyTorchMemEffAttention::AttentionBackwardKernel)"
    red = "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16>>"
    out = _assign_launches(toks, markers, [_launch("kernel", attn), _launch("kernel", red)],
                           "aten::_efficient_attention_backward")
    assert out == [None, 0]  # the attention kernel stays the op's own, the reduction is the sum's


def _subtrees(doc: dict, name: str) -> list[list[str]]:
    """For each cpu_op called `name`: the names of the ops inside it and of the GPU activities
    they launched ("op" or "-> kernel"), in order."""
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    gpu = {e["args"].get("correlation"): e["name"] for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    host = sorted((e for e in ev if e.get("cat") in ("cpu_op", "cuda_runtime")), key=lambda e: (e["ts"], -e["dur"]))
    out = []
    for root in (e for e in host if e["name"] == name):
        inside = [e for e in host if e is not root and e["tid"] == root["tid"] and root["ts"] <= e["ts"]
                  and e["ts"] + e["dur"] <= root["ts"] + root["dur"]]
        out.append([e["name"] if e["cat"] == "cpu_op" else "-> " + gpu.get(e["args"].get("correlation"), "")
                    for e in inside])
    return out


def test_composite_bodies_run_as_on_a_cuda_build(cli):
    """Ops a CUDA build runs as their composite C++ body (cuda_dispatch.COMPOSITE_BODIES) show the
    ops that body calls, each with its own kernels: a select backward is zeros and a memcpy into
    the contiguous slab (it was one strided kernel), masked_fill and index_put a clone first (a
    script's index_put: the backward of indexing calls `_index_put_impl_` in place on a CUDA build),
    F.pad without a positive pad a clone. A fill of a strided view takes the legacy kernel."""
    r = cli("--no-trace", sys.executable, str(ROOT / "tests" / "scripts" / "composite_bodies.py"), "trace.json")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((cli.cwd / "trace.json").read_text())

    selects = _subtrees(doc, "aten::select_backward")
    assert len(selects) == 3
    for tree in selects:
        assert tree[:2] == ["aten::zeros", "aten::empty"] and "aten::copy_" in tree
        launched = [n for n in tree if n.startswith("-> ")]
        assert len(launched) == 2 and "FillFunctor" in launched[0] and launched[1].startswith("-> Memcpy DtoD")
    (slice_tree,) = _subtrees(doc, "aten::slice_backward")
    assert [n for n in slice_tree if n.startswith("-> ")][1].startswith("-> void at::native::elementwise_kernel<")

    (masked,) = _subtrees(doc, "aten::masked_fill")
    assert masked[0] == "aten::clone" and "-> Memcpy DtoD (Device -> Device)" in masked and "aten::masked_fill_" in masked

    no_pad, pad = _subtrees(doc, "aten::constant_pad_nd")
    assert no_pad[0] == "aten::clone" and "aten::fill_" not in no_pad
    assert "aten::fill_" in pad and "aten::copy_" in pad

    (index_put,) = _subtrees(doc, "aten::index_put")  # the script's own call; the index backward has none
    assert index_put[0] == "aten::clone" and "aten::index_put_" in index_put and "aten::_index_put_impl_" in index_put
    assert len(_subtrees(doc, "aten::_index_put_impl_")) == 2  # the backward's in-place call and index_put's

    fills = [t for t in _subtrees(doc, "aten::fill_") if t and "FillFunctor<float>" in t[-1]]
    strided = [t for t in fills if "elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast" in t[-1]]
    assert len(strided) == 1  # mask[:7, 7:] = 1.0; the contiguous fills stay vectorized


def test_torchs_python_cuda_kernels_run_as_on_a_cuda_build(cli):
    """A non-ATen op whose CUDA kernel is torch's own Python (FSDP2's fsdp:: ops) runs that Python,
    as a CUDA build does: the ops it calls are captured inside it (they were one faked op with one
    kernel), as the real FSDP2 profile (tests/data/real/h200x2/traces/fsdp_rank0) shows them."""
    import torch

    from phantora_prof.runtime.dispatch.cuda_dispatch import python_cuda_kernel

    assert not python_cuda_kernel(torch.ops.aten.mm.default)
    assert not python_cuda_kernel(torch.ops.c10d.allreduce_.default)  # a C++ kernel
    import torch.distributed._symmetric_memory  # noqa: F401  (defines symm_mem's Python ops)

    # CUDA-only Python kernels keep the faked path: symmetric memory needs the devices' buffers
    assert not python_cuda_kernel(torch.ops.symm_mem.fused_all_gather_matmul.default)
    r = cli("--no-trace", sys.executable, str(ROOT / "tests" / "scripts" / "torch_python_kernels.py"), "trace.json")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((cli.cwd / "trace.json").read_text())
    (copy_in,) = _subtrees(doc, "fsdp::all_gather_copy_in")
    assert "aten::narrow" in copy_in and "aten::split_with_sizes" in copy_in and "aten::_foreach_copy_" in copy_in
    (copy_out,) = _subtrees(doc, "fsdp::split_with_sizes_copy")
    (chunk,) = _subtrees(doc, "fsdp::chunk_cat")
    # the sizes go to the GPU in the copy_ child (a pinned HtoD memcpy), then the copy kernel runs
    for tree, op in ((copy_out, "aten::split_with_sizes_copy"), (chunk, "aten::_chunk_cat")):
        assert tree[0] == op
        launched = [n for n in tree if n.startswith("-> ")]
        assert launched[0] == "-> Memcpy HtoD (Pinned -> Device)" and len(launched) == 2
        assert tree.index(launched[0]) == tree.index("aten::copy_") + 1


# Cases of tools/holdout/composite_probe.py whose simulated op tree differs from the H200's, and
# why: torch 2.13's autograd formulas call the out-of-place ops (index_put, index_add, scatter_add)
# where 2.11's call the in-place ones (gather_backward, index_select_backward, index_put_*), or its
# CPU build takes a shape-only path (one_hot); the remaining ones are known gaps (upsample kernels,
# a Python scalar's remainder kernel (BUnaryFunctor), and template children whose recorded dims
# name another of the op's tensors).
_PROBE_DIFFERS = {"index_put_accumulate", "index_put_rows", "interpolate_nearest", "interpolate_bilinear",
                  "stack_three", "repeat", "one_hot", "gather_backward", "index_select_backward"}


def test_single_ops_dispatch_and_launch_as_on_the_h200(cli):
    """Every case of the single-op probe outside _PROBE_DIFFERS has the H200's op tree: the ops
    (names, input dims) and the GPU activities (kernel names) each op and its children ran, on
    the script's thread and autograd's (real: tools/holdout/real_h200/session24/probe_real.json.gz,
    torch 2.11 on the H200)."""
    import composite_probe

    real = composite_probe.trees(str(ROOT / "tools" / "holdout" / "real_h200" / "session24" / "probe_real.json.gz"))
    r = cli("--no-trace", sys.executable, str(ROOT / "tools" / "holdout" / "composite_probe.py"), "sim.json")
    assert r.returncode == 0, r.stderr[-3000:]
    sim = composite_probe.trees(str(cli.cwd / "sim.json"))
    assert set(sim) == set(real)

    def strip(lines):
        return [line.split("  [")[0] for line in lines]

    differ = {c for c in real if strip(real[c]) != strip(sim[c])}
    assert differ <= _PROBE_DIFFERS, sorted(differ - _PROBE_DIFFERS)
    assert len(real) - len(differ) >= 36


def test_a_wrapped_python_scalar_is_a_zero_dim_child_argument():
    """`x.remainder(768)` on CUDA: remainder.Scalar calls remainder.Tensor with the scalar wrapped
    in a 0-dim tensor, which the H200's profile records with dims []. The op-children table keeps
    it so (its dtype as the code) instead of naming the output, which drew the scalar as a full
    [8, 512] operand; a 0-dim tensor alone in a child (a full reduction's output) stays "o0"."""
    from phantora_prof.calibrate.op_children import _child_args

    def ev(name, dims, types):
        return {"name": name, "args": {"Input Dims": dims, "Input type": types}}

    parent = ev("aten::remainder", [[8, 512], []], ["long int", "Scalar"])
    child = ev("aten::remainder", [[8, 512], []], ["long int", "long int"])
    assert _child_args(child, parent) == ["i0", "long int"]
    view = ev("aten::as_strided", [[], [], [], []], ["float", "ScalarList", "ScalarList", ""])
    assert _child_args(view, ev("aten::mean", [[8, 512], [], [], []], ["float", "ScalarList", "Scalar", ""]))[0] == "o0"


def test_a_child_takes_the_parents_input_at_its_own_position():
    """SDPA's q, k and v have the same dims: the inner `_cudnn_attention_forward(q, k, v, ...)`
    names each at its own position (naming the first match made all three q in the trace, with
    q's strides where a fused projection's v has others); an input with no same-position match
    still names the first that matches."""
    from phantora_prof.calibrate.op_children import _child_args

    def ev(name, dims, types):
        return {"name": name, "args": {"Input Dims": dims, "Input type": types}}

    qkv = [[16, 12, 512, 64]] * 3
    bf = ["c10::BFloat16"] * 3
    parent = ev("aten::_scaled_dot_product_cudnn_attention", qkv + [[]], bf + ["Scalar"])
    child = ev("aten::_cudnn_attention_forward", qkv + [[]], bf + ["Scalar"])
    assert _child_args(child, parent) == ["i0", "i1", "i2", "Scalar"]
    elsewhere = ev("aten::empty_like", [[], [], [], [16, 12, 512, 64]], ["Scalar", "Scalar", "Scalar", "c10::BFloat16"])
    assert _child_args(elsewhere, parent) == ["Scalar", "Scalar", "Scalar", "i0"]


def test_cuda_build_paths_where_meta_kernels_differ(cli):
    """torch._grouped_mm of float32 experts runs ATen's fallback as a CUDA build does (the group
    ends copied to the host, then one mm per group: 4 groups, forward and both gradients, as in
    the H100 profile of an fp32 Mixtral step); bf16 experts on an H100 stay one op with the
    grouped-GEMM kernels. An element-wise op over an all-contiguous [N, C, 1, 1] map returns
    contiguous strides (TensorIterator's fast set-up: the later upsample then runs NCHW), one
    with a wrapped Python number keeps the stride order (CPU torch printed the same strides)."""
    r = cli("--no-trace", "--gpu", "h100", sys.executable, str(ROOT / "tests" / "scripts" / "cuda_build_paths.py"),
            "trace.json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "strides (16, 1, 1, 1) (256, 16, 4, 1) (16, 1, 16, 16) (16, 1, 1, 1)" in r.stdout, r.stdout
    doc = json.loads((cli.cwd / "trace.json").read_text())
    trees = _subtrees(doc, "aten::_grouped_mm")
    assert len(trees) == 4  # the fp32 forward, its two gradients, the bf16 call
    for tree in trees[:3]:
        assert tree.index("-> Memcpy DtoH (Device -> Pageable)") < tree.index("aten::mm")
        assert tree.count("aten::mm") == 4 and tree.count("aten::item") == 4
        gemms = [n for n in tree if n.startswith("-> ") and "gemm" in n]
        assert len(gemms) == 4 and all("f32f32" in g for g in gemms)
    fast = trees[3]
    assert "aten::mm" not in fast and any("grouped_gemm" in n for n in fast)


def _child_names(tree: list) -> list[str]:
    out: list[str] = []
    for node in tree:
        if isinstance(node, dict):
            out.append(node["name"])
            out += _child_names(node["kids"])
    return out


def test_a_2d_convolution_never_takes_the_1d_template():
    """A biased 2-D convolution runs `_convolution` -> cudnn_convolution + add_ on a CUDA build; a
    1-D one unsqueezes its operands to 2-D first. The size classes carry each tensor's number of
    dims, so RAFT's [8, 242, 46, 62] convolution (nearest in size to whisper's 1-D ones in the
    table) no longer took the 1-D children (session 38: unsqueeze / squeeze, and a
    cudnn_convolution whose inputs were its output's shape)."""
    table = op_children.table()
    types = ["c10::BFloat16"] * 3 + ["ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    two_d = table.lookup("aten::convolution", types, [[8, 242, 46, 62], [96, 242, 3, 3], [96]] + [[]] * 6)
    one_d = table.lookup("aten::convolution", types, [[16, 80, 3000], [384, 80, 3], [384]] + [[]] * 6)
    assert "aten::unsqueeze" not in _child_names(two_d) and "aten::cudnn_convolution" in _child_names(two_d)
    assert _child_names(one_d).count("aten::unsqueeze") == 2
    assert op_children.ranks(types[:2], [[8, 242, 46, 62], [96, 242, 3, 3]]) == "22:4,17:4"
