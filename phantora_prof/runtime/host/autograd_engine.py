"""The autograd engine's own host time around a backward call (issue #15).

`loss.backward()` (and `torch.autograd.grad`) hands the graph to the C++ engine: it builds a
graph task, walks every node reachable from the outputs to count dependencies, wakes the device's
autograd thread and sleeps until that thread has run the last node, then is woken again and
returns. None of it is an aten op or Python the host model counts, and the simulation charged
nothing for it, while real profiles show it as gaps on both sides of the backward: the script
thread's last forward op to the first backward node 119-555 us, the last node to the script
thread's next op 84-335 us (eleven profiled steps of nine workloads, 11 to 654 nodes:
tools/holdout/real_h200/session39/README.md). Charged here, on the calling thread, as
`start_ns + start_per_node_ns * nodes` before the engine runs and `end_ns + end_per_node_ns *
nodes` after it returns (host_model.json "autograd_engine"), `nodes` being the graph the engine
walks (counted from the outputs' grad_fn; the simulator's walk is its own Python, not charged).
"""
from __future__ import annotations

import functools
from typing import Any

_INSTALLED: dict[str, Any] = {}


def graph_nodes(outputs: Any) -> int:
    """Nodes reachable from `outputs` (tensors or GradientEdges) through next_functions: the
    dependency walk Engine::execute does before the first node runs."""
    import torch

    if isinstance(outputs, (torch.Tensor, torch.autograd.graph.GradientEdge)):
        outputs = (outputs,)
    stack = []
    for o in outputs:
        node = o.node if isinstance(o, torch.autograd.graph.GradientEdge) else getattr(o, "grad_fn", None)
        if node is not None:
            stack.append(node)
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(nxt for nxt, _ in node.next_functions if nxt is not None and id(nxt) not in seen)
    return len(seen)


def install(clock: Any) -> None:
    """Wrap torch.autograd's entry into the C++ engine (both names torch binds it under)."""
    import torch.autograd
    import torch.autograd.graph

    from phantora_prof import hostcost

    if _INSTALLED or not hasattr(torch.autograd.graph, "_engine_run_backward"):
        return
    costs = hostcost.AUTOGRAD_ENGINE
    original = torch.autograd.graph._engine_run_backward

    @functools.wraps(original)
    def engine_run_backward(t_outputs, *args, **kwargs):
        nodes = graph_nodes(t_outputs)
        clock.advance(int(costs["start_ns"] + costs["start_per_node_ns"] * nodes))
        try:
            return original(t_outputs, *args, **kwargs)
        finally:
            clock.advance(int(costs["end_ns"] + costs["end_per_node_ns"] * nodes))

    _INSTALLED["original"] = original
    torch.autograd.graph._engine_run_backward = engine_run_backward
    if getattr(torch.autograd, "_engine_run_backward", None) is original:
        torch.autograd._engine_run_backward = engine_run_backward
