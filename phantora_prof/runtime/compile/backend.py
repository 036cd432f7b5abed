"""torch.compile under the simulator: Dynamo and AOTAutograd as they are, Inductor up to its
schedule, and a replay of that schedule on the simulated GPU (issue #16).

`torch.compile(model)` (and `nn.Module.compile()`) keeps its real behaviour: Dynamo traces
the Python, breaks graphs where real torch breaks them (the broken parts run eagerly and are
captured op by op, as before), guards and recompiles as real torch does; AOTAutograd builds
the forward and backward graphs with Inductor's decompositions and partitioner, which decide
what is saved for the backward and therefore the memory. Only Inductor's final stage
changes: instead of generating Triton code, `runtime/compile/lowering.py` reads the
scheduler's fused kernels into a plan and `runtime/compile/runner.py` replays it.

Backends other than Inductor ("eager", "aot_eager", a user's function) run as real torch
runs them; their graphs' ops are captured like eager ops. Modes: "max-autotune" and
"max-autotune-no-cudagraphs" plan like the default (extern GEMMs: no Triton templates are
chosen, since autotuning would need to run kernels); "reduce-overhead" and "max-autotune" run
their graphs as CUDA graph trees do (runtime/compile/cudagraphs.py), as does
`torch._inductor.config.triton.cudagraphs = True`. A graph whose schedule cannot be read runs
eagerly, with a warning naming the reason.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from typing import Any, Callable

import torch

from phantora_prof.runtime.compile.cudagraphs import GraphedCall, SkippedGraph
from phantora_prof.runtime.compile.dynamic import DynamicPlan, ShapeBoundRunner
from phantora_prof.runtime.compile.lowering import lower
from phantora_prof.runtime.compile import shape_padding
from phantora_prof.runtime.compile.plan import Unplannable
from phantora_prof.runtime.host import pyhost
from phantora_prof.runtime.compile.runner import PlanRunner

log = logging.getLogger(__name__)

_real_compile: Callable | None = None
_capture_mode: Any = None
_warned: set[str] = set()
_patched = False
# The plans compiled in this process, in order (for tools such as tools/holdout/triton_sweep.py
# that pair simulated kernels with measured ones; a plan is small, kept for the process' life).
PLANS: list = []


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"phantora-prof: {message}", stacklevel=3)


def _host() -> Any:
    """The rank's Python host model (runtime/host/pyhost.py), or None."""
    return _capture_mode.st.pyhost if _capture_mode is not None else None


def _boxed(fn: Callable) -> Callable:
    fn._boxed_call = True  # type: ignore[attr-defined]
    return fn


def inner_compile(gm: torch.fx.GraphModule, example_inputs: list, graphed: bool = False, **kwargs: Any) -> Callable:
    """Inductor's inner_compile for the simulated GPU: plan and replay, or eager on failure.
    `graphed`: compiled for CUDA graph trees (runtime/compile/cudagraphs.py)."""
    # Inductor's passes rewrite the graph in place (post-grad passes make functional foreach
    # ops in-place ones whose results its lowering, not Python, reads): the eager fallback runs
    # the graph as it came
    as_given = _graph_copy(gm)
    try:
        with pyhost.simulator_work(_host()):  # compiling is the simulator's work here (its real cost: below)
            plan = lower(gm, list(example_inputs), graphed=graphed, **kwargs)
    except Unplannable as exc:
        _warn_once(str(exc), f"a compiled graph runs eagerly under simulation ({exc})")
        return _eager(as_given)
    except Exception as exc:  # noqa: BLE001 - Inductor internals of another release: run eagerly, say why
        log.debug("Inductor lowering failed", exc_info=True)
        _warn_once(type(exc).__name__, f"a compiled graph runs eagerly under simulation: Inductor's lowering "
                                       f"failed here ({type(exc).__name__}: {exc})")
        return _eager(as_given)
    if isinstance(plan, DynamicPlan):  # symbolic sizes: a plan per set of sizes (runtime/compile/dynamic.py)
        PLANS.append(plan.first)
        log.info("compiled graph %s (%s) with symbolic sizes %s: %d Triton kernels, %d extern calls",
                 plan.first.graph_id, "backward" if plan.first.is_backward else "forward",
                 ", ".join(str(s.symbol) for s in plan.sources), plan.first.triton_kernels,
                 plan.first.extern_kernels)
        return _boxed(ShapeBoundRunner(plan, functools.partial(_runner, graphed=graphed),
                                       lambda: pyhost.simulator_work(_host()), _eager(as_given),
                                       lambda message: _warn_once(message, message)))
    PLANS.append(plan)
    log.info("compiled graph %s (%s): %d Triton kernels, %d extern calls", plan.graph_id,
             "backward" if plan.is_backward else "forward", plan.triton_kernels, plan.extern_kernels)
    return _boxed(_runner(plan, graphed))


def _runner(plan: Any, graphed: bool) -> Callable:
    runner = PlanRunner(plan, _capture_mode)
    if not graphed:
        return runner
    if plan.cudagraph_skip:
        return SkippedGraph(runner, plan.cudagraph_skip)
    return GraphedCall(runner)


def _graph_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` with a copy of its graph (its attributes shared, not copied)."""
    import copy

    return torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))


def _eager(gm: torch.fx.GraphModule) -> Callable:
    def run(args: list) -> Any:
        a = list(args)
        args.clear()
        return gm(*a)

    return _boxed(run)


def _gemm_cost_ns(call: Any) -> float:
    """GPU time of a call as the capture mode would launch it (the pad_mm decision's timing)."""
    from phantora_prof.runtime.dispatch.capture import _matmul_tf32

    return float(sum(k.duration_ns for k in _capture_mode.costs.estimate(call, allow_tf32=_matmul_tf32())))


def _pad_mm_ratio() -> float:
    from phantora_prof.cost.profiles import profile_for

    return profile_for(_capture_mode.gpu).pad_mm_ratio


def simulated_inductor(gm: torch.fx.GraphModule, example_inputs: list, cudagraphs: bool | None = None) -> Callable:
    """The "inductor" backend under simulation. AOTAutograd and Inductor's Python are the
    simulator's work here (their host time is charged as `compile_cost_ns`, not by counting
    the simulator's instructions). `cudagraphs`: CUDA graph trees (mode="reduce-overhead");
    None: as Inductor's config says (`torch._inductor.config.triton.cudagraphs`)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx

    graphed = bool(inductor_config.triton.cudagraphs) if cudagraphs is None else cudagraphs
    # shape_padding: Inductor's pad_mm pass times padded and unpadded GEMMs on the GPU to choose;
    # here the cost model decides (shape_padding.py). Without a capture mode to cost the calls,
    # or on a torch whose pass this cannot replace, misaligned GEMMs stay unpadded.
    # triton.cudagraphs: CUDA graphs are the runner's (runtime/compile/cudagraphs.py)
    padding = _capture_mode is not None and shape_padding.available()
    patches = {"triton.cudagraphs": False, **({} if padding else {"shape_padding": False})}
    with pyhost.simulator_work(_host()), \
            (shape_padding.decided_by(_gemm_cost_ns, _pad_mm_ratio()) if padding else contextlib.nullcontext()):
        try:
            compiled = compile_fx(gm, example_inputs, inner_compile=functools.partial(inner_compile, graphed=graphed),
                                  config_patches=patches)
        except Exception as exc:  # noqa: BLE001 - AOTAutograd / Inductor could not trace it here: eager, say why
            if _is_restart(exc):
                raise  # Dynamo's own control flow: it traces the frame again (e.g. scalars made tensors)
            log.debug("compile_fx failed", exc_info=True)
            _warn_once(f"aot:{type(exc).__name__}",
                       f"a compiled graph runs eagerly under simulation: compiling it failed on the simulated "
                       f"device ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
            compiled = gm.forward
    if _capture_mode is not None:
        cost = compile_cost_ns(gm)
        log.info("compiled a graph of %d nodes: %.1f s of host time charged", len(gm.graph.nodes), cost / 1e9)
        _capture_mode.st.clock.advance(cost)
        _capture_mode.st.compile_ns += cost
    return compiled


def _is_restart(exc: BaseException) -> bool:
    """Dynamo's RestartAnalysis exceptions ask it to trace the frame again (AOTAutograd raises
    one when it turns a float input into a tensor: `TensorifyScalarRestartAnalysis`); they are
    not failures and must reach Dynamo."""
    try:
        from torch._dynamo.exc import RestartAnalysis
    except ImportError:  # pragma: no cover - every torch this runs on has it
        return False
    return isinstance(exc, RestartAnalysis)


def _patch_compilers() -> None:
    """What compiling on the simulated device needs from Dynamo, AOTAutograd and Inductor;
    done at the first torch.compile call (importing Inductor costs ~3 s, which a run that
    never compiles should not pay)."""
    global _patched
    if _patched:
        return
    from phantora_prof.runtime.patches import fake_identity

    _fold_without_cuda()
    _prim_metas_without_cuda()
    _dynamo_is_not_the_program()
    _optimizer_state_on_the_simulated_gpu()
    _simulator_is_never_traced()
    fake_identity.show_the_real_class()  # Dynamo's guards need one answer for everyone
    _patched = True


def _dynamo_is_not_the_program() -> None:
    """Dynamo's frame conversion (bytecode analysis, tracing, guards, then the backend) is
    compilation: its Python is not counted instruction by instruction as the program's
    (runtime/host/pyhost.py); each compiled graph is charged `compile_cost_ns` instead. And
    it traces with fake tensors only: no small constant is computed on the (absent) GPU."""
    from torch._dynamo import convert_frame

    orig = convert_frame._compile
    if getattr(orig, "_phantora", False):
        return

    from torch.fx.experimental import proxy_tensor
    from torch.utils._python_dispatch import _disable_current_modes

    from phantora_prof.runtime.process import clock

    @functools.wraps(orig)
    def _compile(*args: Any, **kwargs: Any) -> Any:
        # make_fx propagates small constant tensors by computing them for real on their
        # device (`torch.tensor([2.0], device=x.device)` is copied to the GPU while tracing):
        # no constant propagation while compiling here, the ops are traced instead
        limit = proxy_tensor.CONSTANT_NUMEL_LIMIT
        proxy_tensor.CONSTANT_NUMEL_LIMIT = -1  # not even empty ones (`torch.tensor([], device=...)`)
        clock.compiling += 1  # its waits (cache locks) are not the program's sleeps
        try:
            # Dynamo traces with the dispatch modes set aside (`_disable_current_modes` in
            # ConvertFrame), except on its DDPOptimizer path (a DistributedDataParallel module),
            # where the capture mode stayed on the stack above AOTAutograd's FunctionalTensorMode
            # ("Attempting to use FunctionalTensor on its own")
            with pyhost.simulator_work(_host()), _disable_current_modes():
                return orig(*args, **kwargs)
        finally:
            clock.compiling -= 1
            proxy_tensor.CONSTANT_NUMEL_LIMIT = limit

    _compile._phantora = True  # type: ignore[attr-defined]
    convert_frame._compile = _compile


def _simulator_is_never_traced() -> None:
    """The simulator's Python that C++ calls while a compiled function runs (the capture mode's
    `__torch_dispatch__`, the simulated process group's collectives, their Work objects) runs as
    plain Python under Dynamo, with everything it calls. torch wraps a mode's dispatch in
    `torch._disable_dynamo` (this mode does without the wrapper: CaptureMode._should_skip_dynamo,
    its Python ran once per op), and a real process group is C++: here Dynamo took such frames
    for frames to convert while a compiled DistributedDataParallel module ran ("'dict' object has
    no attribute 'node'" inside fake_wrap, "unregistered member on an OpaqueObject" in
    `broadcast`). Their code objects are marked for Dynamo to skip, recursively, once Dynamo
    is loaded (no per-op cost); inlining, when traced code calls the simulator's stand-ins for
    torch functions, is unaffected."""
    from torch._dynamo.eval_frame import set_code_exec_strategy
    from torch._dynamo.types import FrameAction, FrameExecStrategy

    from phantora_prof.runtime.dispatch.capture import CaptureMode
    from phantora_prof.runtime.distributed.backend import PhantoraProcessGroup, SimWork

    skip = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
    for cls in (CaptureMode, PhantoraProcessGroup, SimWork):
        for value in vars(cls).values():
            fn = getattr(value, "__func__", value)  # staticmethod / classmethod
            code = getattr(fn, "__code__", None)
            if code is not None:
                set_code_exec_strategy(code, skip)


def _optimizer_state_on_the_simulated_gpu() -> None:
    """A compiled optimizer step: Dynamo does not trace an optimizer's `_init_group` (too slow),
    it calls it for real while tracing, with the dispatch modes set aside, so that the state
    (exp_avg, step counters moved to the GPU when capturable) exists as real CUDA tensors. Here
    CUDA tensors exist only under the capture mode: the call runs under it, and its ops (the
    state's zero fills, a real first step's work) are captured as the real ones run."""
    try:
        from torch._dynamo.variables.optimizer import OptimizerVariable
    except ImportError:  # pragma: no cover - every torch with ignore_compile_internals has it
        return
    orig = OptimizerVariable.call_method
    if getattr(orig, "_phantora", False):
        return

    @functools.wraps(orig)
    def call_method(self, tx, name, args, kwargs):
        if name != "_init_group" or _capture_mode is None:
            return orig(self, tx, name, args, kwargs)
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        if any(m is _capture_mode for m in _get_current_dispatch_mode_stack()):
            return orig(self, tx, name, args, kwargs)
        with _capture_mode:
            return orig(self, tx, name, args, kwargs)

    call_method._phantora = True  # type: ignore[attr-defined]
    OptimizerVariable.call_method = call_method


def _prim_metas_without_cuda() -> None:
    """A prim's meta function builds its example output with `TensorMeta`, which allocates a
    tensor on the output's device; `prims.device_put` (what tracing turns `.to("cuda")` of a
    CPU tensor into) runs it outside any fake mode, only to check its arguments, and drops
    the result. There is no CUDA here: such a tensor is made on the meta device instead."""
    from torch import _prims

    orig = _prims.TensorMeta
    if getattr(orig, "_phantora", False):
        return

    @functools.wraps(orig)
    def tensor_meta(*args: Any, **kwargs: Any) -> Any:
        try:
            return orig(*args, **kwargs)
        except (NotImplementedError, RuntimeError) as exc:
            if "CUDA" not in str(exc):
                raise
            return orig(*args, **dict(kwargs, device=torch.device("meta")))

    tensor_meta._phantora = True  # type: ignore[attr-defined]
    _prims.TensorMeta = tensor_meta


def _fold_without_cuda() -> None:
    """Inductor's constant folding computes small constant tensors for real, on the graph's
    device (`scalar_tensor(0, device="cuda")`), with every mode disabled. There is no CUDA
    here: such a node is left unfolded (as folding leaves any node it cannot evaluate). A real
    GPU would fold it into a constant; the difference is at most a tiny kernel."""
    from torch._inductor import constant_folding
    from torch._inductor.fx_passes import joint_graph

    for cls in (constant_folding.ConstantFolder, getattr(joint_graph, "UniformValueConstantFolder", None)):
        if cls is None or "_deduce_value" not in cls.__dict__ or getattr(cls._deduce_value, "_phantora", False):
            continue
        orig = cls.__dict__["_deduce_value"]

        @functools.wraps(orig)
        def deduce(self, node, _orig=orig):
            try:
                return _orig(self, node)
            except (NotImplementedError, RuntimeError) as exc:
                if "CUDA" not in str(exc):
                    raise
                return self.unknown_value

        deduce._phantora = True  # type: ignore[attr-defined]
        cls._deduce_value = deduce


# Host time of compiling one Dynamo graph with Inductor on the reference host, per node of the
# graph Dynamo hands the backend (Dynamo's tracing, AOTAutograd, Inductor's lowering, Triton
# code generation and compilation, caches cold). Approximate, from one case: the compiled
# reference GPT's first step on the H200 machine took 30.19 s against 19-29 ms for the
# others, for a 436-node graph (tools/holdout/real_h200/session12; other models: README).
COMPILE_NS_PER_NODE = 69_000_000


def compile_cost_ns(gm: torch.fx.GraphModule) -> int:
    return COMPILE_NS_PER_NODE * len(gm.graph.nodes)


# Settings of torch.compile's modes that change nothing in a plan: autotuning picks among
# kernels by running them, which cannot happen here, so the default choices stand (extern GEMMs).
_PLANNED_ALIKE = frozenset({"max_autotune", "coordinate_descent_tuning"})


def simulated_compile(model: Any = None, *, fullgraph: bool = False, dynamic: bool | None = None,
            backend: Any = "inductor", mode: str | None = None, options: dict | None = None,
            disable: bool = False, **kwargs: Any) -> Any:
    """torch.compile with the simulated Inductor backend (same signature and behaviour)."""
    _patch_compilers()
    if backend == "inductor":
        from torch._inductor import config as inductor_config

        # No pool of compile workers: nothing is compiled for a GPU here, and the pool's idle
        # timer thread would sleep on the simulated clock (30 s at a time).
        inductor_config.compile_threads = 1
        # what the mode means, from Inductor's own table (reduce-overhead and max-autotune use CUDA graphs)
        settings = dict(torch._inductor.list_mode_options(mode) if mode else {})
        settings.update(options or {})
        graphed = settings.pop("triton.cudagraphs", None)
        settings = {k: v for k, v in settings.items() if k not in _PLANNED_ALIKE}
        if settings:
            _warn_once("options", f"torch.compile options {sorted(settings)} are not simulated")
        backend = simulated_inductor if graphed is None else functools.partial(simulated_inductor,
                                                                               cudagraphs=bool(graphed))
        mode = None
        options = None
    return _real_compile(model, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                         options=options, disable=disable, **kwargs)


def supported() -> bool:
    """Whether this torch can trace compiled code under the capture mode (the mode must be
    able to step aside while Dynamo and Inductor compile: TorchDispatchMode's
    ignore_compile_internals, torch >= 2.9)."""
    
    from torch.utils._python_dispatch import TorchDispatchMode

    return hasattr(TorchDispatchMode, "ignore_compile_internals")


def install(mode: Any) -> None:
    """Route torch.compile through the simulated Inductor (or, on an older torch, run compiled
    code eagerly with a warning)."""
    global _real_compile, _capture_mode
    from torch._subclasses.fake_tensor import FakeTensorMode

    _capture_mode = mode
    if _real_compile is None:
        _real_compile = torch.compile
    # The simulated CUDA device must never be initialised for real: FakeTensorMode's constant
    # folding of CUDA ops (Inductor's pattern setup builds example CUDA tensors) stays fake.
    FakeTensorMode.avoid_device_init = property(lambda self: True)  # type: ignore[assignment]
    if supported():
        torch.compile = functools.wraps(_real_compile)(simulated_compile)
    else:
        torch.compile = _eager_compile


def _eager_compile(model: Any = None, **kwargs: Any) -> Any:
    _warn_once("eager", f"torch.compile runs eagerly under simulation on torch {torch.__version__} "
                        "(simulating Inductor needs torch >= 2.9), so simulated times are those of the eager model")
    if model is None:
        return lambda m: m
    return model
