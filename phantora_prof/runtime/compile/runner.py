"""Replays a compiled graph's plan on the simulated GPU, as Inductor's generated wrapper runs.

The generated `call(args)` of a compiled graph takes its inputs as a list it clears at once,
allocates each buffer just before its first kernel (`empty_strided_cuda`), launches Triton
kernels and calls extern kernels (cuBLAS, cuDNN, attention) in the scheduled order, and drops
every buffer and input after its last use; in a backward graph the saved activations are
inputs, so they are freed one by one as the backward goes. The runner does the same with
simulated tensors: allocations go to the simulated caching allocator (no op: Inductor's
`empty_strided_cuda` is C++ that a real profile does not show), each Triton kernel is one recorded launch with its modelled time, and
each extern call is recorded and costed as the aten op it is.

Host time: the simulator's own Python here is not the program's (the interpreter's hook is
paused). What a real call costs on the host instead is charged from measurements
(`hostcost.compiled_call_ns`, host_model.json "compiled_calls"): per call (guards, AOTAutograd's
wrappers, the autograd Function of a training graph and each tensor it saves or unpacks), per
Triton launch (`hostcost.TRITON_LAUNCH_NS`), and per extern op its eager cost less the
allocation the wrapper's out= call skips (`hostcost.COMPILED_EXTERN_ADJUST_NS`).

Where in the call the per-tensor part lands matters as much as its total: charged before the
first launch, a GPT-2 forward's saved tensors (8 us each) left the GPU idle 2.2 ms at every
step's start. Profiled calls on the H200 host (tools/holdout/compiled_host.py --trace-dir) put
a forward's per-input cost before its first launch and most per-output cost between the
launches, where the wrapper allocates the buffers. So (`hostcost.CompiledTensorCosts`) inputs
are charged at the start, an output where its buffer is allocated, a backward's saved input
where it is freed, and only what no step allocates or frees (outputs that are inputs or views,
inputs alive to the end) at the end.
"""
from __future__ import annotations

import base64
import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import torch

from phantora_prof import hostcost
from phantora_prof.cost.triton import triton_kernel
from phantora_prof.protocol import TensorArg
from phantora_prof.runtime.compile import hop_calls
from phantora_prof.runtime.compile.plan import AllocStep, BufferLayout, CompiledGraphPlan, ExternStep, Ref, TritonStep
from phantora_prof.runtime.device import op_allocations
from phantora_prof.runtime.dispatch.capture import _matmul_tf32, _to_arg
from phantora_prof.runtime.host import pyhost

log = logging.getLogger(__name__)

def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _step_name(step: Any) -> str:
    if isinstance(step, TritonStep):
        return step.kernel
    if isinstance(step, ExternStep):
        return step.op
    return "alloc"


def _in_layout(t: torch.Tensor, size: tuple, stride: tuple, offset: int) -> torch.Tensor:
    """`t` itself where it already has that layout, else a view of its storage in it."""
    if tuple(t.shape) == size and tuple(t.stride()) == stride and t.storage_offset() == offset:
        return t
    return torch.as_strided(t, size, stride, offset)


def _arg_of(layout: BufferLayout, device: int) -> TensorArg:
    return TensorArg(layout.size, layout.stride, layout.dtype, device)


@dataclass(frozen=True)
class _TensorCharges:
    """Where a call's per-tensor host time is charged (ns), fixed by its plan: at the start
    (inputs dropped unread), before each step (outputs it allocates), after each step (inputs
    it frees), and at the end (outputs and inputs no step allocated or freed)."""

    start_ns: int
    before_step_ns: tuple[int, ...]
    after_step_ns: tuple[int, ...]
    end_ns: int

    @classmethod
    def of(cls, plan: CompiledGraphPlan, costs: hostcost.CompiledTensorCosts) -> _TensorCharges:
        outputs = {o.name for o in plan.outputs if isinstance(o, Ref)}
        alive = set(plan.inputs) - set(plan.input_frees)
        freed_inputs = len(set(plan.inputs)) - len(alive)
        start_ns = costs.per_freed_input_ns * freed_inputs
        allocated_outputs = 0
        before, after = [], []
        for step in plan.steps:
            n_out = sum(1 for name in step.allocs if name in outputs)
            allocated_outputs += n_out
            before.append(costs.per_output_ns * n_out)
            freed = alive.intersection(step.frees)
            alive -= freed
            freed_inputs += len(freed)
            after.append(costs.per_freed_input_ns * len(freed))
        end_ns = (costs.per_output_ns * max(0, len(plan.outputs) - allocated_outputs)
                  + costs.per_freed_input_ns * max(0, len(plan.inputs) - freed_inputs))
        return cls(start_ns, tuple(before), tuple(after), end_ns)


class PlanRunner:
    """Runs one plan per call; `mode` is the rank's CaptureMode."""

    def __init__(self, plan: CompiledGraphPlan, mode: Any) -> None:
        self.plan = plan
        self.mode = mode
        # Inductor's wrapper marks each call with the compiled graph's cache key; here a digest
        # of the plan's kernels stands for it (deterministic, 52 base-32 characters like a key)
        digest = hashlib.sha256("\n".join(_step_name(s) for s in plan.steps).encode()).digest()
        self.range_name = f"## Call CompiledFxGraph f{base64.b32encode(digest).decode().lower()[:51]} ##"
        self.call_ns = hostcost.compiled_call_ns(plan.is_backward, plan.is_inference)
        self.tensor_costs = hostcost.compiled_tensor_costs(plan.is_backward, plan.is_inference)
        self.charges = _TensorCharges.of(plan, self.tensor_costs)

    def __call__(self, args: list) -> list:
        with pyhost.simulator_work(self.mode.st.pyhost):
            self.mode.st.clock.advance(self.call_ns + self.tensor_costs.per_input_ns * len(self.plan.inputs))
            return self._run(args)

    def _device(self, env: dict) -> int:
        for v in env.values():
            if isinstance(v, torch.Tensor) and v.device.type == "cuda":
                return v.device.index or 0
        return self.mode.st.current_device

    def _run(self, args: list) -> list:
        from phantora_prof.runtime.dispatch import annotations

        handle = annotations.range_start(self.range_name)
        try:
            return self._launch(args)
        finally:
            annotations.range_end(handle)

    def _launch(self, args: list) -> list:
        plan = self.plan
        env: dict[str, Any] = dict(zip(plan.inputs, args))
        args.clear()  # boxed calling convention: the graph owns its inputs from here
        device = self._device(env)
        clock, charges = self.mode.st.clock, self.charges
        for name in plan.input_frees:
            env.pop(name, None)
        clock.advance(charges.start_ns)
        for step, before_ns, after_ns in zip(plan.steps, charges.before_step_ns, charges.after_step_ns):
            reuses = step.reuses if isinstance(step, TritonStep) else {}
            clock.advance(before_ns)
            for name in step.allocs:
                lay = plan.buffers[name]
                src = env.get(reuses.get(name, ""))
                if src is not None:  # written in place over an input this kernel is the last to read
                    env[name] = _in_layout(src, lay.size, lay.stride, src.storage_offset())
                    continue
                env[name] = self.mode.allocate_buffer(lay.size, lay.stride, _torch_dtype(lay.dtype), device)
            if isinstance(step, TritonStep):
                k = triton_kernel(step.kernel, step.shape, self.mode.gpu)
                self.mode.record_compiled_call(step.kernel, (), {}, (), (k,), hostcost.TRITON_LAUNCH_NS, device)
            elif isinstance(step, ExternStep) and step.op == hop_calls.HOP_CALL:
                # a flex attention Triton template (and its backward's reduction before it), timed
                # as the HOP (hop_calls.py)
                tensors = [self._value(r, env) for r in step.args[1]]
                for ks in hop_calls.launches(step.args[0], tensors, self.mode.gpu, _matmul_tf32()):
                    self.mode.record_compiled_call(ks[0].name, (), {}, (), ks, hostcost.TRITON_LAUNCH_NS, device)
            elif isinstance(step, ExternStep):
                targs = tuple(self._arg(a, env, device) for a in step.args)
                tkwargs = {k: self._arg(v, env, device) for k, v in step.kwargs.items()}
                touts = tuple(self._arg(Ref(n), env, device) for n in step.outputs if n in env)
                self.mode.record_compiled_call(step.op, targs, tkwargs, touts, None, None, device,
                                               dispatch_adjust_ns=hostcost.COMPILED_EXTERN_ADJUST_NS)
                op_allocations.note_compiled_extern(step.op, targs, tkwargs, device)
            elif not isinstance(step, AllocStep):  # pragma: no cover - plans hold only these
                raise TypeError(f"unknown plan step {step!r}")
            clock.advance(after_ns)
            for name in step.frees:
                env.pop(name, None)
        clock.advance(charges.end_ns)
        return [self._value(o, env) for o in plan.outputs]

    def outputs_only(self, args: list) -> list:
        """The call's outputs without running its steps (a CUDA graph replay ran them:
        runtime/compile/cudagraphs.py): each output buffer allocated anew, or the view of the
        input a kernel wrote it over."""
        plan = self.plan
        env: dict[str, Any] = dict(zip(plan.inputs, args))
        args.clear()
        device = self._device(env)
        reused = {out: src for step in plan.steps if isinstance(step, TritonStep) for out, src in step.reuses.items()}
        # inputs no output is (or is written over) die before the outputs are allocated, as the
        # steps would have freed them (a backward's saved activations before its gradients)
        needed = {o.name for o in plan.outputs if isinstance(o, Ref)}
        needed |= {reused[n] for n in needed if n in reused}
        for name in plan.inputs:
            if name not in needed:
                env.pop(name, None)
        values = []
        for o in plan.outputs:
            if isinstance(o, Ref) and o.name not in env and o.name in plan.buffers:
                lay = plan.buffers[o.name]
                src = env.get(reused.get(o.name, ""))
                env[o.name] = (_in_layout(src, lay.size, lay.stride, src.storage_offset()) if src is not None else
                               self.mode.allocate_buffer(lay.size, lay.stride, _torch_dtype(lay.dtype), device))
            values.append(self._value(o, env))
        return values

    def _arg(self, a: Any, env: dict, device: int) -> Any:
        """An argument as an OpCall holds it: a Ref as the TensorArg of what it reads, anything
        else as the capture mode records eager arguments (`capture._to_arg`)."""
        if isinstance(a, Ref):
            if a.view is not None:
                return _arg_of(a.view, device)
            t = env.get(a.name)
            if isinstance(t, torch.Tensor):
                return _to_arg(t)
            lay = self.plan.buffers.get(a.name)
            if lay is None:
                raise KeyError(f"compiled graph reads {a.name!r}, which it never made")
            return _arg_of(lay, device)
        if isinstance(a, (list, tuple)) and any(isinstance(b, Ref) for b in a):
            return tuple(self._arg(b, env, device) for b in a)
        return _to_arg(a)

    def _value(self, o: Any, env: dict) -> Any:
        if not isinstance(o, Ref):
            return o
        t = env[o.name]
        if o.view is None:
            return t
        return _in_layout(t, o.view.size, o.view.stride, o.view.offset)
