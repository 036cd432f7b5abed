"""Compiled graphs with symbolic sizes (dynamic shapes), planned per set of sizes.

When a compiled function sees a second input size, Dynamo recompiles it with that dimension
symbolic (automatic dynamic shapes; also `torch.compile(dynamic=True)` and
`torch._dynamo.mark_dynamic`), and Inductor schedules the graph once, for every size: which
ops fuse into which kernels, persistent or looped reductions, what is materialised. The
generated code then reads the sizes from its inputs at each call.

Here the schedule is made once the same way (runtime/compile/lowering.py), and read into a
plan for each distinct set of sizes the graph is called with: the shape environment's hints
(the values Inductor's size arithmetic substitutes for the symbols) are set to the call's
sizes while the scheduler's nodes are read again, so buffer layouts, byte counts and element
counts come out for that call. Kernel names and categories stay those of the first reading
(one generated kernel serves every size). Plans are kept per set of sizes.

Approximate: a kernel generated for symbolic sizes is timed like one generated for fixed
sizes (the Triton curves were measured on static kernels; a dynamic kernel's index arithmetic
is not modelled), and in-place buffer reuse is decided per set of sizes (Inductor decides it
once, symbolically).
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from phantora_prof.runtime.compile.plan import CompiledGraphPlan, TritonStep, Unplannable

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SymbolSource:
    """Where a call's value of one size symbol is read: graph input `index`, as an int
    argument (`dim` None) or as a tensor's size (`stride` False) or stride along `dim`."""

    symbol: Any  # sympy.Symbol
    index: int
    dim: int | None = None
    stride: bool = False

    def value(self, args: list) -> int:
        a = args[self.index]
        if self.dim is None:
            return int(a)
        return int(a.stride(self.dim) if self.stride else a.shape[self.dim])


def symbol_sources(graph: Any) -> tuple[SymbolSource, ...]:
    """Where each size symbol of a lowered graph's inputs is found in a call's arguments (as
    Inductor's generated wrapper reads them: `s0 = arg0_1.size(1)`); () for a static graph.
    A symbol no input carries bare (only inside an expression) cannot be read: Unplannable."""
    import sympy

    found: dict[Any, SymbolSource] = {}
    wanted: set = set()
    for index, name in enumerate(graph.graph_input_names):
        value = graph.graph_inputs[name]
        if isinstance(value, sympy.Expr):
            wanted |= value.free_symbols
            if isinstance(value, sympy.Symbol):
                found.setdefault(value, SymbolSource(value, index))
            continue
        if not hasattr(value, "get_size"):
            continue
        for stride, exprs in ((False, value.get_size()), (True, value.get_stride())):
            for dim, e in enumerate(exprs):
                if isinstance(e, sympy.Expr) and e.free_symbols:
                    wanted |= e.free_symbols
                    if isinstance(e, sympy.Symbol):
                        found.setdefault(e, SymbolSource(e, index, dim, stride))
    missing = wanted - set(found)
    if missing:
        raise Unplannable(f"symbolic sizes {sorted(map(str, missing))} that no graph input carries as such")
    return tuple(sorted(found.values(), key=lambda s: str(s.symbol)))


@contextlib.contextmanager
def bound_hints(shape_env: Any, sources: tuple[SymbolSource, ...], values: tuple[int, ...]) -> Iterator[None]:
    """The shape environment's hints for the graph's symbols set to `values` for the block
    (Inductor's size arithmetic substitutes hints for symbols: `optimization_hint`)."""
    import sympy

    if shape_env is None:
        raise Unplannable("a graph with symbolic sizes but no shape environment")
    # torch >= 2.12 keeps backed hints in `backed_var_to_val` (`var_to_val` a property over it)
    hints = shape_env.__dict__.get("backed_var_to_val")
    if hints is None:
        hints = shape_env.var_to_val
    bound = {s.symbol: sympy.Integer(v) for s, v in zip(sources, values)}
    for sym in list(bound):  # a symbol the environment replaced by another one: bind that one too
        other = shape_env.replacements.get(sym)
        if isinstance(other, sympy.Symbol):
            bound.setdefault(other, bound[sym])
    saved = {sym: hints[sym] for sym in bound if sym in hints}
    hints.update(bound)
    try:
        yield
    finally:
        for sym in bound:
            if sym in saved:
                hints[sym] = saved[sym]
            else:
                hints.pop(sym, None)


@dataclass
class DynamicPlan:
    """A graph with symbolic sizes: its plan for the sizes it was compiled with, where each
    symbol's value is read in a call, and a function that reads the schedule for other values."""

    first: CompiledGraphPlan
    first_values: tuple[int, ...]  # the symbols' values `first` was read for
    sources: tuple[SymbolSource, ...]
    read_for: Callable[[tuple[int, ...]], CompiledGraphPlan]

    def plan_for(self, values: tuple[int, ...]) -> CompiledGraphPlan:
        """The plan for the symbols' `values` (read from the schedule unless they are the first's)."""
        if values == self.first_values:
            return self.first
        plan = self.read_for(values)
        _keep_names(plan, self.first)
        log.info("compiled graph %s planned for sizes %s", plan.graph_id,
                 ", ".join(f"{s.symbol}={v}" for s, v in zip(self.sources, values)))
        return plan


def _keep_names(plan: CompiledGraphPlan, first: CompiledGraphPlan) -> None:
    """One generated kernel serves every size: the first reading's names stand (a reading for
    other sizes can number identical-looking kernels differently)."""
    if len(plan.steps) != len(first.steps):
        raise Unplannable("a graph's schedule read for other sizes has another number of steps")
    for step, ref in zip(plan.steps, first.steps):
        if isinstance(step, TritonStep) and isinstance(ref, TritonStep):
            step.kernel = ref.kernel


class ShapeBoundRunner:
    """Runs a DynamicPlan: each distinct set of sizes gets its plan and its runner (made by
    `make_runner`: a PlanRunner, or a CUDA-graphed call, which real CUDA graph trees also
    record once per set of sizes), kept for the process's life."""

    def __init__(self, dplan: DynamicPlan, make_runner: Callable[[CompiledGraphPlan], Callable],
                 simulator_work: Callable[[], Any], eager: Callable[[list], list],
                 warn: Callable[[str], None]) -> None:
        self.dplan = dplan
        self.make_runner = make_runner
        self.simulator_work = simulator_work
        self.eager = eager  # the graph run op by op: for sizes whose schedule cannot be read
        self.warn = warn
        self.runners: dict[tuple[int, ...], Callable] = {}

    def __call__(self, args: list) -> list:
        values = tuple(s.value(args) for s in self.dplan.sources)
        run = self.runners.get(values)
        if run is None:
            try:
                with self.simulator_work():  # reading the schedule is the simulator's work
                    plan = self.dplan.plan_for(values)
                run = self.make_runner(plan)
            except Unplannable as exc:
                self.warn(f"a compiled graph runs eagerly under simulation for sizes {values} ({exc})")
                run = self.eager
            self.runners[values] = run
        return run(args)
