"""torch.compile(mode="reduce-overhead"): Inductor's CUDA graph trees on the simulated GPU.

With CUDA graphs, each compiled graph (a forward, a backward, an inference graph) runs in
three ways over its life, as `torch/_inductor/cudagraph_trees.py` runs it:
1. warm-up, the first call: the generated code runs as in the default mode (its launches,
   its host time), with its memory in the graphs' pool;
2. record, the second call: the inputs that are not static (parameters, buffers and the saved
   tensors a backward reads are static; the data a forward is given and a backward's incoming
   gradients are not) are copied into buffers the graph owns, the generated code runs once
   more under stream capture (its host ops run, nothing reaches the GPU), and the graph is
   replayed once;
3. replay, every later call: the non-static inputs are copied into the graph's buffers with
   one `_foreach_copy_`, the graph is launched with one `cudaGraphLaunch`, and the outputs
   are rebuilt from the recording's metadata: no kernel is launched one by one, and the
   generated wrapper's Python does not run.

Here warm-up is a plan run (runtime/compile/runner.py); the record captures a plan run with
the simulated `torch.cuda.CUDAGraph` (runtime/device/cuda_graphs.py) and replays it; a replay
sends the captured kernels again as one graph launch (the trace shows `cudaGraphLaunch` and
the kernels, as torch.profiler does) and charges the host time measured for a replayed call
(hostcost.graph_replay_ns, tools/holdout/cudagraph_host.py).

A graph Inductor would not put in a CUDA graph (a CPU tensor in it, an incompatible op, a
mutated non-static input: lowering._cudagraph_skip) runs as in the default mode, and the
reason is logged as Inductor logs it ("skipping cudagraphs due to ...").

Approximations (README, torch.compile): a replay's outputs are allocated as new blocks of the
simulated caching allocator and its intermediate buffers are not allocated at all (in real
torch both stay in the graphs' private pool: `memory_allocated` then counts them from the
record on, `max_memory_allocated` is reached in the warm-up and record steps either way); one
graph per compiled graph and shape (the trees' generations, re-recording when a static input
moves, and the per-call mutation checks are not modelled).
"""
from __future__ import annotations

import logging
from typing import Any

import torch

from phantora_prof import hostcost
from phantora_prof.runtime.compile.runner import PlanRunner
from phantora_prof.runtime.host import pyhost

log = logging.getLogger(__name__)
_trees_started = False  # a graph was recorded in this process (its tree manager exists)


class GraphedCall:
    """One compiled graph under CUDA graph trees: warm-up, record, then replays."""

    def __init__(self, runner: PlanRunner) -> None:
        self.runner = runner
        plan = runner.plan
        self.static = frozenset(plan.static_inputs)
        self.calls = 0
        self.graph: Any = None  # the simulated CUDAGraph, from the record on
        self.copied: tuple[int, ...] = ()  # input positions copied into the graph's buffers each call
        self.buffers: list[torch.Tensor] = []  # those buffers (alive as long as the graph)
        self.nodes = plan.triton_kernels + plan.extern_kernels

    def __call__(self, args: list) -> list:
        self.calls += 1
        if self.calls == 1:
            return self.runner(args)
        with pyhost.simulator_work(self.runner.mode.st.pyhost):  # this module's Python is not the program's
            if self.graph is None:
                return self._record(args)
            return self._replay(args)

    def _non_static(self, args: list) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(args) if i not in self.static and isinstance(a, torch.Tensor))

    def _copy_inputs(self, args: list) -> None:
        """The non-static inputs into the graph's own buffers: one `_foreach_copy_` (a real op
        of the rank's program, captured like any other), then the graph reads the buffers."""
        if not self.copied:
            return
        torch._foreach_copy_(self.buffers, [args[i] for i in self.copied])
        for j, i in enumerate(self.copied):
            args[i] = self.buffers[j]

    def _record(self, args: list) -> list:
        from phantora_prof.runtime.device.cuda_graphs import SimCUDAGraph

        mode = self.runner.mode
        self.copied = self._non_static(args)
        global _trees_started
        ns = hostcost.graph_record_ns(self.nodes, len(args))
        if not _trees_started:  # the process's first record also builds CUDA graph trees' manager
            ns += hostcost.CUDA_GRAPHS["tree_init_ns"]
            _trees_started = True
        mode.st.clock.advance(ns)
        self.buffers = [torch.empty_strided(args[i].shape, args[i].stride(), dtype=args[i].dtype,
                                            device=args[i].device) for i in self.copied]
        self._copy_inputs(args)
        graph = SimCUDAGraph()
        graph.capture_begin()
        try:
            outputs = self.runner(args)
        finally:
            graph.capture_end()
        graph.replay()
        self.graph = graph
        log.info("recorded a CUDA graph of %d nodes for compiled graph %s", self.nodes, self.runner.plan.graph_id)
        return outputs

    def _replay(self, args: list) -> list:
        from phantora_prof.runtime.dispatch import annotations

        mode = self.runner.mode
        plan = self.runner.plan
        ns = hostcost.graph_replay_ns(plan.is_backward, plan.is_inference, len(plan.outputs), len(self.copied),
                                      first=self.calls == 3)
        mode.st.clock.advance(ns)
        handle = annotations.range_start(self.runner.range_name)  # the wrapper's range is there in a replay too
        try:
            self._copy_inputs(args)
            self.graph.replay()
            return self.runner.outputs_only(args)
        finally:
            annotations.range_end(handle)


class SkippedGraph:
    """A graph compiled for CUDA graphs that Inductor would not put in one: it runs as in the
    default mode; its first call logs the reason and bumps Inductor's skip counter, as the
    compiled graph's loading does in real torch (during compilation Dynamo would drop the count)."""

    def __init__(self, runner: PlanRunner, reason: str) -> None:
        self.runner = runner
        self.reason: str | None = reason

    def __call__(self, args: list) -> list:
        if self.reason is not None:
            with pyhost.simulator_work(self.runner.mode.st.pyhost):
                from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

                log_cudagraph_skip_and_bump_counter(self.reason)
                self.reason = None
        return self.runner(args)

