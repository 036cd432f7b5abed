"""Inductor's lowering and scheduling of one graph, for the simulated CUDA device, with no GPU.

torch.compile's default backend (`torch._inductor.compile_fx.compile_fx`) runs Dynamo's graph
through AOTAutograd (decompositions, the joint-graph passes, the min-cut partitioner that
decides what the forward saves for the backward) and then, per forward / backward graph, its
`inner_compile`: post-grad passes, lowering to Inductor IR, and the scheduler that fuses
pointwise ops and reductions into kernels; then code generation (Triton source, compiled for
the real GPU). This module is that `inner_compile` up to and including the scheduler, on the
same fake inputs, then reads the scheduler's nodes into a `CompiledGraphPlan` instead of
generating code. Everything that decides which kernels run (fusion, extern GEMMs and
attention, what is materialised) is Inductor's own; what is ours is the reading of its nodes
and the kernel times (cost/triton.py).

The scheduler asks whether Triton is installed before it picks the GPU backend; a CPU-only
machine has none, so the answer is "yes" while it runs (the code generation that would
import Triton never runs). Inductor internals move between torch releases: a graph this
module cannot read raises `Unplannable`, and the backend runs that graph eagerly instead,
with a warning that says why.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import Any, Iterator

import torch

from phantora_prof.cost.kernels import last_pow2
from phantora_prof.cost.triton import TritonKernelShape, compute_class, kernel_name
from phantora_prof.runtime.compile import dynamic, hop_calls
from phantora_prof.runtime.dispatch.capture import _dtype_name
from phantora_prof.runtime.compile.plan import (
    AllocStep,
    BufferLayout,
    CompiledGraphPlan,
    ExternStep,
    Ref,
    TritonStep,
    Unplannable,
)

log = logging.getLogger(__name__)


def _int(x: Any) -> int:
    """A size as an int: a symbolic one (dynamic shapes) at the value its symbols have for the
    call being planned (the shape environment's hints: `dynamic.bound_hints`)."""
    try:
        return int(x)
    except TypeError:
        from torch._inductor.virtualized import V

        sizevars = V.graph.sizevars
        hint = getattr(sizevars, "optimization_hint", None) or sizevars.size_hint
        try:
            return int(hint(x))
        except Exception as exc:  # noqa: BLE001 - an unbacked size (data-dependent): no value to plan with
            raise Unplannable(f"symbolic size {x} without a value to plan with ({type(exc).__name__})") from exc


@contextlib.contextmanager
def _triton_present() -> Iterator[None]:
    """The scheduler checks for Triton before choosing the GPU backend; the code generation
    that really needs Triton never runs here."""
    from torch._inductor import scheduler

    prev = scheduler.has_triton
    scheduler.has_triton = lambda: True
    try:
        yield
    finally:
        scheduler.has_triton = prev


def lower(gm: torch.fx.GraphModule, example_inputs: list, graphed: bool = False,
          **kwargs: Any) -> CompiledGraphPlan | dynamic.DynamicPlan:
    """Lower `gm` (an AOTAutograd forward, backward or inference graph) as Inductor's
    inner_compile would, and read its schedule into a plan. `graphed`: the graph is compiled
    for CUDA graph trees (mode="reduce-overhead"): the plan says whether Inductor would skip them.
    A graph with symbolic sizes (dynamic shapes) gives a `dynamic.DynamicPlan`: Inductor's
    schedule is made once, as real Inductor makes it, and read again for each new set of sizes."""
    from torch._guards import detect_fake_mode
    from torch._inductor import compile_fx as cfx
    from torch._inductor.debug import DebugContext
    from torch._inductor.graph import GraphLowering
    from torch._inductor.scheduler import Scheduler
    from torch._inductor.virtualized import V

    is_backward = bool(kwargs.get("is_backward", False))
    is_inference = bool(kwargs.get("is_inference", False))
    graph_id = kwargs.get("graph_id")
    if hop_calls.has_hops(gm):  # flex attention: its Triton template stands in as one opaque call
        gm = hop_calls.replace_hops(gm)
    with DebugContext():
        # the steps of Inductor's codegen_and_compile before lowering
        cfx.view_to_reshape(gm)
        with torch.no_grad():
            fake_mode = cfx.fake_tensor_prop(gm, example_inputs)
        cfx._recursive_record_original_output_strides(gm)
        with V.set_fake_mode(fake_mode):
            cfx._recursive_post_grad_passes(gm, is_inference=is_inference)
            shape_env = gm.shape_env if getattr(gm, "shape_env", None) is not None else \
                getattr(detect_fake_mode(example_inputs), "shape_env", None)
            graph = GraphLowering(gm, example_inputs=example_inputs, shape_env=shape_env, graph_id=graph_id,
                                  is_inference=is_inference, is_backward=is_backward)
            graph.freeze_runtime_asserts()
            with V.set_graph_handler(graph), V.set_extern_kernel_nodes([]):
                graph.run(*example_inputs)
                with _triton_present():
                    sched = Scheduler(graph.operations)
                props = torch.cuda.get_device_properties(torch.cuda.current_device())
                categories: dict[str, str] = {}
                static_inputs = tuple(sorted(set(kwargs.get("static_input_idxs") or ())))
                skip = _cudagraph_skip(gm, graph, example_inputs, static_inputs) if graphed else None

                def read() -> CompiledGraphPlan:
                    plan = _read_schedule(graph, sched, graph_id, is_backward, props.multi_processor_count,
                                          categories)
                    plan.is_inference = is_inference
                    plan.static_inputs = static_inputs
                    plan.cudagraph_skip = skip
                    return plan

                plan = read()
                sources = dynamic.symbol_sources(graph)
                if not sources:
                    return plan

                def read_for(values: tuple[int, ...]) -> CompiledGraphPlan:
                    with V.set_fake_mode(fake_mode), V.set_graph_handler(graph), V.set_extern_kernel_nodes([]), \
                            dynamic.bound_hints(shape_env, sources, values):
                        return read()

                return dynamic.DynamicPlan(plan, tuple(_int(s.symbol) for s in sources), sources, read_for)


def _cudagraph_skip(gm: torch.fx.GraphModule, graph: Any, example_inputs: list, static: tuple) -> str | None:
    """Why Inductor would not put this graph in a CUDA graph (its message), or None: the checks
    of compile_fx and CompiledFxGraph, with Inductor's own functions where this torch has them.
    Approximate: a mutated input that is neither static nor another graph's output is checked
    here, at compile time; CUDA graph trees check it per call (and accept outputs of graphs)."""
    from torch._inductor import cudagraph_utils as cgu
    from torch._inductor import utils as ind_utils

    fmt = getattr(cgu, "format_default_skip_message", lambda r: f"skipping cudagraphs due to {r}")
    if graph.disable_cudagraphs_reason:
        return graph.disable_cudagraphs_reason
    incompatible = getattr(ind_utils, "get_first_incompatible_cudagraph_node", None)
    node = incompatible(gm) if incompatible is not None else None
    if node is not None:
        return f"disabling cudagraphs due to incompatible op {node.target}"
    devices = getattr(cgu, "check_multiple_devices_or_any_cpu_nodes", None)
    reason = devices(dict(graph.device_node_mapping)) if devices is not None else None
    if reason:
        return reason
    storage = getattr(cgu, "get_input_storage_mutation_info", None)
    if storage is not None:
        reason = cgu.get_input_storage_mutation_reason(storage(gm))
        if reason:
            return fmt(reason)
    static_set = set(static)
    mutated = [i for i in getattr(graph, "mutated_input_idxs", ()) if i not in static_set]
    if mutated:
        return fmt(f"mutated inputs ({len(mutated)} instances)")
    if not all(isinstance(t, (torch.Tensor, torch.SymInt, torch.Generator)) for t in example_inputs):
        return fmt("non-Tensor inputs")
    return None


def _layout(node: Any) -> BufferLayout:
    lay = node.get_layout()
    return BufferLayout(tuple(_int(s) for s in lay.size), tuple(_int(s) for s in lay.stride),
                        _dtype_name(lay.dtype), _int(getattr(lay, "offset", 0) or 0))


def _ref(node: Any) -> Ref:
    """A Ref for an IR tensor argument: a buffer or input read as it is, or through a view."""
    from torch._inductor import ir

    if isinstance(node, ir.ReinterpretView):
        return Ref(node.get_name(), _layout(node))
    if isinstance(node, (ir.TensorBox, ir.StorageBox)):
        return _ref(node.data)
    return Ref(node.get_name())


class _Reader:
    """Turns the scheduler's nodes into plan steps (one instance per graph)."""

    def __init__(self, graph: Any, sched: Any, categories: dict[str, str] | None = None) -> None:
        self.graph = graph
        self.sched = sched
        self.categories = {} if categories is None else categories  # scheduler node -> kernel category
        self.buffers: dict[str, BufferLayout] = {}
        self.kernel_ids: dict[tuple, int] = {}  # identical kernels share one name, as Inductor's source dedup does
        self.reads: list[set[str]] = []  # per step: the names it reads
        self.completed: set[str] = set()  # scheduler nodes already planned
        self.skip: set[str] = set()  # scheduler nodes another step stands for

    # ---- kernels
    def triton(self, node: Any, group: tuple[int, int] | None = None, category: str | None = None) -> TritonStep:
        from torch._inductor import config as ind_config
        from torch._inductor.utils import get_fused_kernel_name

        fused = get_fused_kernel_name(node.get_nodes(), ind_config.triton.descriptive_names) \
            if ind_config.triton.descriptive_names else ""
        allocs, reuses, shape, reads = self._kernel_parts(node, group, category, fused)
        key = (shape.category, fused, shape.numel, shape.rnumel, shape.bytes_read, shape.bytes_written)
        idx = self.kernel_ids.setdefault(key, len(self.kernel_ids))
        self.reads.append(reads)
        return TritonStep(kernel_name(shape.category, fused, idx), shape, tuple(allocs), reuses=reuses)

    def foreach(self, node: Any) -> list[TritonStep]:
        """A ForeachKernelSchedulerNode (a compiled optimizer's `_foreach_*` ops, independent
        nodes Inductor runs side by side): one combo kernel (`triton_for_...`) per partition of
        its subnodes, partitioned as Inductor's horizontal partition does by the arguments a
        launch may take (`combo_kernel_max_num_args`). Approximate: a combo kernel is timed by
        the Triton curve of its category over the summed bytes and elements of its subnodes
        (no combo kernel was measured); Inductor's split by tiling dimensions is not modelled."""
        from torch._inductor import config as ind_config
        from torch._inductor.utils import get_fused_kernel_name

        subnodes = list(getattr(node, "snodes", ()))
        if not subnodes:
            raise Unplannable("a foreach kernel node without subnodes")
        limit = int(getattr(ind_config, "combo_kernel_max_num_args", 250))
        partitions: list[list] = [[]]
        count = 0
        for sub in subnodes:
            n_args = len(sub.read_writes.reads) + len(sub.read_writes.writes)
            if partitions[-1] and count + n_args > limit:
                partitions.append([])
                count = 0
            partitions[-1].append(sub)
            count += n_args
        try:
            fused = get_fused_kernel_name([node], ind_config.triton.descriptive_names) \
                if ind_config.triton.descriptive_names else ""
        except Exception:  # noqa: BLE001 - other torch releases name combo kernels otherwise
            fused = ""
        steps = []
        for part in partitions:
            allocs, reuses, reads = [], {}, set()
            shapes = []
            for sub in part:
                sub_allocs, sub_reuses, shape, sub_reads = self._kernel_parts(sub, None, None, fused)
                allocs += sub_allocs
                reuses.update(sub_reuses)
                reads |= sub_reads
                shapes.append(shape)
            reduction = [sh for sh in shapes if sh.category != "pointwise"]
            merged = TritonKernelShape(
                reduction[0].category if reduction else "pointwise",
                sum(sh.numel for sh in shapes), max(sh.rnumel for sh in shapes),
                sum(sh.bytes_read for sh in shapes), sum(sh.bytes_written for sh in shapes),
                next((sh.compute for sh in shapes if sh.compute != "plain"), shapes[0].compute),
                sum(sh.n_buffers for sh in shapes), reduction[0].reduction_hint if reduction else "",
                any(sh.welford for sh in shapes))
            key = ("foreach", fused, merged.numel, merged.rnumel, merged.bytes_read, merged.bytes_written)
            idx = self.kernel_ids.setdefault(key, len(self.kernel_ids))
            self.reads.append(reads)
            name = "_".join(["triton", "for"] + ([fused] if fused else []) + [str(idx)])
            steps.append(TritonStep(name, merged, tuple(allocs), reuses=reuses))
        return steps

    def _kernel_parts(self, node: Any, group: tuple[int, int] | None, category: str | None,
                      fused: str) -> tuple[list[str], dict[str, str], TritonKernelShape, set[str]]:
        """(buffers it allocates, in-place reuses, its TritonKernelShape, names it reads) of
        one fused node's kernel."""
        numel, rnumel = group or tuple(_int(x) for x in node.group[1])
        if category is None:
            # decided once, on the symbolic sizes in a dynamic graph (as Inductor decides it)
            key = node.get_name()
            if key not in self.categories:
                self.categories[key] = self._category(node, *(group or node.group[1]))
            category = self.categories[key]
        members = {n.get_name() for n in node.get_nodes()}
        allocs, local = [], set()
        for n in node.get_nodes():
            for out in n.get_outputs():
                name = out.get_name()
                users = {u.get_name() for u in out.users}
                if name in self.graph.removed_buffers or (users and users <= members and
                                                          name not in self.graph.get_output_names()):
                    local.add(name)  # kept in registers inside this kernel
                    continue
                if out.node.get_mutation_names() or _is_none_layout(out.node):
                    continue  # writes into a buffer that exists already
                self.buffers[name] = _layout(out.node)
                allocs.append(name)
        reuses = self._inplace(node, allocs)
        self.completed |= members
        read_bytes, write_bytes = _accessed_bytes(node)
        origins = "_".join(sorted({str(getattr(o, "target", "")) for n in node.get_nodes() if n.node is not None
                                   for o in n.node.origins}))
        reads = {d.name for d in node.read_writes.reads} - local
        writes = {d.name for d in node.read_writes.writes} - local
        hint, welford = _reduction_kind(node)
        shape = TritonKernelShape(category, numel, max(1, rnumel), int(read_bytes), int(write_bytes),
                                  compute_class(f"{fused}_{origins}", category), len(reads | writes), hint, welford)
        return allocs, reuses, shape, reads

    def _inplace(self, node: Any, allocs: list[str]) -> dict[str, str]:
        """Outputs written over an input that dies in this kernel (Inductor's in-place buffer
        reuse, `in_out_ptr`: decided in its code generation, mirrored here with the same
        conditions: the kernel is the input's last user and may update it in place, the input
        was allocated by this graph or donated to it (a saved activation in a backward), and
        both have the same dtype and storage size)."""
        from torch._inductor import config as ind_config

        if not ind_config.inplace_buffers:
            return {}
        sched = self.sched
        donated = getattr(sched, "name_to_donated_buffer", {})
        members = {n.get_name() for n in node.get_nodes()}
        reuses: dict[str, str] = {}
        taken: set[str] = set()
        for out in allocs:
            lay = self.buffers[out]
            for dep in node.read_writes.reads:
                src = dep.name
                if src in taken or src in reuses.values():
                    continue
                buf = donated.get(src) or sched.name_to_buf.get(src)
                if buf is None or buf.node is None or _is_none_layout(buf.node):
                    continue
                if src not in self.buffers and src not in donated:
                    continue  # a graph input that was not donated
                remaining = [u for u in buf.users if u.node.get_name() not in self.completed]
                if len(remaining) != 1 or not remaining[0].can_inplace or \
                        remaining[0].node.get_name() not in members:
                    continue
                try:
                    src_lay = _layout(buf.node)
                except Unplannable:
                    continue
                if src_lay.dtype != lay.dtype or _storage_elems(src_lay) != _storage_elems(lay):
                    continue
                reuses[out] = src
                taken.add(src)
                break
        return reuses

    def mix_order(self, node: Any, num_sms: int) -> list:
        """A FusedMixOrderReductions node (torch >= 2.10): one Triton kernel computes a row
        reduction and, into a workspace, partial column reductions over `split_size` rows
        each; then one eager reduction per column result finishes them (`ws.view(nsplit,
        rnumel).sum(dim=0)`), as Inductor's codegen_mix_order_reduction emits. The split size
        follows Inductor's default choice (about 8 splits per SM, 16..128 rows)."""
        from torch._inductor.scheduler import MixOrderReduction

        numel, rnumel = (_int(x) for x in MixOrderReduction.get_numel_rnumel(node.node1))
        # always a persistent reduction (Inductor overrides its heuristic for these kernels)
        step = self.triton(node, group=(numel, rnumel), category="persistent_reduction")
        outer = [n for n in node.node2.get_nodes() if n.is_reduction()]
        split = max(16, min(128, last_pow2(numel // (num_sms * 8))))
        nsplit = -(-numel // split)
        ws = f"{step.kernel}_workspace"
        self.buffers[ws] = BufferLayout((len(outer) * nsplit * rnumel,), (1,), "float32")
        step.allocs = (ws,) + tuple(a for a in step.allocs if a not in {o.get_name() for n in outer
                                                                       for o in n.get_outputs()})
        step.shape = replace(step.shape, numel=numel, rnumel=rnumel,
                             bytes_written=step.shape.bytes_written + len(outer) * nsplit * rnumel * 4)
        steps: list = [step]
        for i, n in enumerate(outer):
            out = n.get_outputs()[0]
            if getattr(n.node, "_split_size", None) and out.users:
                # a split reduction: its second stage is replaced by the final sum, which
                # writes the second stage's buffer
                final = out.users[0].node
                self.skip.add(final.get_name())
                out = final.get_outputs()[0]
            name = out.get_name()
            self.buffers[name] = _layout(out.node)
            part = BufferLayout((nsplit, rnumel), (rnumel, 1), "float32", i * nsplit * rnumel)
            steps.append(ExternStep("aten::sum", (Ref(ws, part), [0], False, None), {}, (name,), (name,)))
            self.reads.append({ws})
        return steps

    @staticmethod
    def _category(node: Any, numel: int, rnumel: int) -> str:
        if not node.is_reduction():
            return "pointwise"
        try:
            from torch._inductor.codegen.simd_kernel_features import SIMDKernelFeatures
            from torch._inductor.virtualized import V

            features = SIMDKernelFeatures(node.get_nodes(), numel, rnumel)
            persistent = V.choices.should_use_persistent_reduction(features, False)
        except Exception:  # noqa: BLE001 - other torch releases: Inductor's default threshold
            log.debug("persistent-reduction heuristic unavailable", exc_info=True)
            persistent = _int(rnumel) <= 1024
        return "persistent_reduction" if persistent else "reduction"

    def extern(self, node: Any) -> ExternStep | None:
        from torch._inductor import ir

        k = node.node
        if isinstance(k, ir.MultiOutput):
            self.reads.append({k.inputs[0].get_name()} if k.inputs else set())
            return None  # an element of its fallback kernel's outputs, allocated with them
        op = getattr(k, "op_overload", None)
        if op is None or not hasattr(op, "_schema"):
            raise Unplannable(f"extern kernel {type(k).__name__} ({getattr(k, 'python_kernel_name', '?')}) "
                              "names no aten op")
        inputs = [_ref(i) for i in k.inputs]
        if isinstance(k, ir.FallbackKernel) and getattr(k, "unflatten_args", None) is not None:
            args, kwargs = k.unflatten_args(inputs, k.constant_args)
        else:
            args, kwargs = tuple(inputs) + tuple(k.constant_args), dict(k.kwargs or {})
        kwargs = {key: v for key, v in kwargs.items() if key != "out"}
        args = tuple(_plain(a) for a in args)
        kwargs = {key: _plain(v) for key, v in kwargs.items()}
        outputs, allocs = [], []
        if isinstance(k.layout, ir.MultiOutputLayout):
            for out in _multi_outputs(k):
                name = out.get_name()
                outputs.append(name)
                if not _is_none_layout(out):
                    self.buffers[name] = _layout(out)
                    allocs.append(name)
        elif _is_none_layout(k):
            outputs = [m for m in k.get_mutation_names()]  # in place on existing buffers
        else:
            name = k.get_name()
            outputs.append(name)
            self.buffers[name] = _layout(k)
            allocs.append(name)
        self.reads.append({r.name for r in _refs_in((args, kwargs))})
        return ExternStep(op._schema.name, args, kwargs, tuple(outputs), tuple(allocs))

    def nop(self, node: Any) -> AllocStep:
        allocs = []
        for out in node.get_outputs():
            name = out.get_name()
            if name in self.graph.removed_buffers or _is_none_layout(out.node):
                continue
            self.buffers[name] = _layout(out.node)
            allocs.append(name)
        self.reads.append(set())
        return AllocStep(tuple(allocs))


def _reduction_kind(node: Any) -> tuple[str, bool]:
    """(Inductor's reduction hint of the kernel's first reduction, lower case, "" without one;
    whether any of its reductions is a Welford one). A column sum (hint "outer") and a batch
    norm's statistics (Welford) run at other speeds per byte than a row sum (cost/triton.py)."""
    hint, welford = "", False
    for n in node.get_nodes():
        data = getattr(getattr(n, "node", None), "data", None)
        if data is None or not hasattr(data, "reduction_hint"):
            continue
        hint = hint or str(getattr(data.reduction_hint, "name", data.reduction_hint)).lower()
        welford = welford or "welford" in str(getattr(data, "reduction_type", ""))
    return hint, welford


def _accessed_bytes(node: Any) -> tuple[int, int]:
    """(bytes read, bytes written) by a Triton kernel: per buffer it reaches in memory, at most
    the elements its iteration points touch, at most the buffer's size.

    Inductor's own count (`get_read_write_buffer_accesses`) bounds each buffer by the
    node's iteration points only for a single node; for a fused node it counts every buffer
    whole. A fused kernel that gathers rows of an embedding table (or scatters a gradient
    into one) reads or writes only those rows, not the table: counted whole, the 50257 x 768
    table of GPT-2 made a 3 us kernel cost 36 us. So the fused node's buffers (Inductor's
    list, internal buffers left out) are bounded by the largest count of any member node,
    each of which Inductor bounds by its own iteration points."""
    members = node.get_nodes()
    if not hasattr(node, "get_read_write_buffer_accesses"):
        return int(node.get_read_buffer_sizes()), int(node.get_write_buffer_sizes())
    if len(members) == 1:
        # what get_read_buffer_sizes() sums, without its per-node cache (a dynamic graph's
        # schedule is read again for each new set of sizes)
        return tuple(int(sum(node.get_read_write_buffer_accesses(include_reads=r, include_writes=not r).values()))
                     for r in (True, False))
    out = []
    for reads in (True, False):
        whole = node.get_read_write_buffer_accesses(include_reads=reads, include_writes=not reads)
        bound: dict[str, int] = {}
        for m in members:
            for name, n in m.get_read_write_buffer_accesses(include_reads=reads, include_writes=not reads).items():
                bound[name] = max(bound.get(name, 0), int(n))
        out.append(sum(min(int(n), bound.get(name, int(n))) for name, n in whole.items()))
    return out[0], out[1]


def _storage_elems(lay: BufferLayout) -> int:
    if not lay.size:
        return 1
    if any(s == 0 for s in lay.size):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(lay.size, lay.stride))




def _is_none_layout(node: Any) -> bool:
    from torch._inductor import ir

    try:
        return isinstance(node.get_layout(), ir.NoneLayout)
    except Exception:  # noqa: BLE001 - nodes without a layout
        return True


def _multi_outputs(k: Any) -> list:
    """The MultiOutput nodes of a fallback kernel, in the op's output order."""
    from torch._inductor import ir

    found: list = []

    def walk(x: Any) -> None:
        if isinstance(x, ir.MultiOutput):
            found.append(x)
        elif isinstance(x, (list, tuple)):
            for y in x:
                walk(y)

    walk(getattr(k, "outputs", ()))
    return found


def _plain(v: Any) -> Any:
    """Constant arguments as plain Python values (sympy integers, dtypes, devices)."""
    if isinstance(v, Ref) or v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    if isinstance(v, torch.dtype):
        return v
    if isinstance(v, torch.device):
        return v
    try:
        import sympy

        if isinstance(v, sympy.Expr):
            return _int(v) if v.is_integer else float(v)
    except ImportError:  # pragma: no cover - sympy ships with torch
        pass
    return v


def _refs_in(x: Any) -> Iterator[Ref]:
    if isinstance(x, Ref):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _refs_in(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _refs_in(v)


def _read_schedule(graph: Any, sched: Any, graph_id: int | None, is_backward: bool,
                   num_sms: int = 132, categories: dict[str, str] | None = None) -> CompiledGraphPlan:
    from torch._inductor import ir
    from torch._inductor import scheduler as S

    reader = _Reader(graph, sched, categories)
    steps: list = []
    mix_order = getattr(S, "FusedMixOrderReductions", None)
    for node in sched.nodes:
        if node.get_name() in reader.skip:
            continue
        if mix_order is not None and isinstance(node, mix_order):
            steps.extend(reader.mix_order(node, num_sms))
        elif isinstance(node, S.ForeachKernelSchedulerNode):
            steps.extend(reader.foreach(node))
        elif isinstance(node, S.NopKernelSchedulerNode):
            steps.append(reader.nop(node))
        elif isinstance(node, S.ExternKernelSchedulerNode):
            step = reader.extern(node)
            steps.append(step if step is not None else AllocStep(()))
        elif isinstance(node, (S.SchedulerNode, S.FusedSchedulerNode)) and \
                type(node) in (S.SchedulerNode, S.FusedSchedulerNode):
            steps.append(reader.triton(node))
        else:
            raise Unplannable(f"scheduler node {type(node).__name__} is not simulated yet")
    inputs = tuple(graph.graph_input_names)
    outputs = []
    for out in graph.graph_outputs:
        if isinstance(out, ir.NoneAsConstantBuffer):
            outputs.append(None)
        elif isinstance(out, ir.ShapeAsConstantBuffer):
            outputs.append(_int(out.expr))
        else:
            outputs.append(_ref(out))
    # liveness: a buffer or input dies after the last step that reads it, unless returned
    returned = {o.name for o in outputs if isinstance(o, Ref)}
    last: dict[str, int] = {}
    for i, names in enumerate(reader.reads):
        for n in names:
            last[n] = i
    for i, step in enumerate(steps):
        dead = {n for n, j in last.items() if j == i and n not in returned}
        dead |= {n for n in step.allocs if n not in last and n not in returned}  # written, never read
        step.frees = tuple(sorted(dead))
    unread = tuple(n for n in inputs if n not in last and n not in returned)
    return CompiledGraphPlan(graph_id, is_backward, inputs, reader.buffers, steps, tuple(outputs), unread)
