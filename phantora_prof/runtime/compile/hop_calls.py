"""Higher-order operators inside compiled graphs: flex_attention and its backward.

Inductor lowers a flex_attention HOP to a Triton template (`triton_tem_fused_flex_attention_0`)
whose code it generates and loads while it lowers, which needs Triton and the CUDA driver.
Here each such HOP node of the FX graph is replaced, before lowering, by a call of the opaque
custom op `phantora::hop_call`: Inductor keeps it as one extern call with the HOP's output
layouts (so its buffers are allocated and freed as the rest of the plan's), and the runner
launches the template's kernel for it, timed as the eager HOP is (runtime/dispatch/hops.py)
from the tensors the call gets. What the template itself would fuse (the score and mask
functions are part of it) is inside that one kernel on a GPU too.

The HOP's non-tensor arguments (its score / mask graphs, scale, kernel options, block sizes)
are kept in a registry under the integer key the op call carries; the graph holds only its
tensors. The op has a fake implementation only: it never runs outside a plan.
"""
from __future__ import annotations

import copy
import logging
import operator
from dataclasses import dataclass
from typing import Any

import torch

from phantora_prof.runtime.compile.plan import Unplannable

log = logging.getLogger(__name__)

HOP_CALL = "phantora::hop_call"
_HOPS = ("flex_attention", "flex_attention_backward")
_DTYPES: list[torch.dtype] = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32,
                              torch.int64, torch.bool, torch.int8, torch.uint8]
_registry: list[tuple[str, Any]] = []  # key -> (HOP name, its arguments with tensors as _Slot)
_defined = False


@dataclass(frozen=True)
class _Slot:
    """Where the i-th tensor of the call goes in the HOP's arguments."""

    index: int


def _define() -> None:
    global _defined
    if _defined:
        return

    @torch.library.custom_op(HOP_CALL, mutates_args=())
    def hop_call(key: int, inputs: list[torch.Tensor], sizes: list[int], strides: list[int], ranks: list[int],
                 dtypes: list[int]) -> list[torch.Tensor]:
        raise RuntimeError(f"{HOP_CALL} stands for a higher-order operator in a compiled graph's plan; "
                           "it does not run by itself")

    @hop_call.register_fake
    def _(key, inputs, sizes, strides, ranks, dtypes):
        device = inputs[0].device
        out, pos = [], 0
        for rank, dt in zip(ranks, dtypes):
            out.append(torch.empty_strided(sizes[pos:pos + rank], strides[pos:pos + rank], dtype=_DTYPES[dt],
                                           device=device))
            pos += rank
        return out

    _defined = True


def _hop_name(node: torch.fx.Node) -> str | None:
    if node.op != "call_function":
        return None
    name = getattr(node.target, "__name__", None) or str(node.target)
    return name if name in _HOPS else None


def has_hops(gm: torch.fx.GraphModule) -> bool:
    return any(_hop_name(n) for n in gm.graph.nodes)


def replace_hops(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of `gm` with each flex_attention (backward) node replaced by a `hop_call`."""
    _define()
    gm = copy.deepcopy(gm)
    graph = gm.graph
    for node in list(graph.nodes):
        name = _hop_name(node)
        if name is None:
            continue
        tensors: list[torch.fx.Node] = []

        def skeleton(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                if isinstance(a.meta.get("val"), torch.Tensor):
                    tensors.append(a)
                    return _Slot(len(tensors) - 1)
                if a.op == "get_attr":  # a score / mask graph: the kernel's cost evaluates the mask
                    return getattr(gm, str(a.target), None)
                return None
            if isinstance(a, (list, tuple)):
                return type(a)(skeleton(b) for b in a)
            return a

        skel = skeleton(tuple(node.args))
        vals = node.meta.get("val")
        if not isinstance(vals, (list, tuple)) or not tensors:
            raise Unplannable(f"{name} without example outputs")
        index, sizes, strides, ranks, dtypes = {}, [], [], [], []
        for i, v in enumerate(vals):
            if isinstance(v, torch.Tensor):
                if v.dtype not in _DTYPES:
                    raise Unplannable(f"{name} output of dtype {v.dtype}")
                index[i] = len(ranks)
                sizes += [int(s) for s in v.shape]
                strides += [int(s) for s in v.stride()]
                ranks.append(v.dim())
                dtypes.append(_DTYPES.index(v.dtype))
        key = len(_registry)
        _registry.append((name, skel))
        with graph.inserting_before(node):
            call = graph.call_function(torch.ops.phantora.hop_call.default,
                                       (key, tensors, sizes, strides, ranks, dtypes))
        for user in list(node.users):
            i = user.args[1] if user.target is operator.getitem else None
            if i in index:
                with graph.inserting_before(user):
                    new = graph.call_function(operator.getitem, (call, index[i]))
                new.meta = dict(user.meta)
                user.replace_all_uses_with(new)
                graph.erase_node(user)
            elif i is not None and not user.users:
                graph.erase_node(user)
            else:
                raise Unplannable(f"{name}: an output used as something other than a tensor")
        graph.erase_node(node)
    graph.eliminate_dead_code()
    gm.recompile()
    return gm


def launches(key: int, tensors: list[torch.Tensor], gpu: Any, allow_tf32: bool) -> list[tuple]:
    """The launches of the HOP call `key` with these tensors, each a tuple of kernels: for a
    backward, first the reduction Inductor runs before the template (delta = the row sums of
    out * grad_out, a persistent reduction over the head dim with fp32 out, seen as
    `triton_per_fused_flex_attention_backward_*`, ~8.5 us per call in HF LLaMA's real profile);
    then the template's kernel, timed as hops.py times the eager HOP."""
    from phantora_prof.cost.triton import TritonKernelShape, triton_kernel
    from phantora_prof.runtime.dispatch import hops

    name, skel = _registry[key]
    args = _fill(skel, tensors)
    out: list[tuple] = []
    if name == "flex_attention_backward":
        o, grad_o = args[3], args[5]
        if isinstance(o, torch.Tensor) and isinstance(grad_o, torch.Tensor) and o.dim() >= 1:
            rows = o.numel() // max(1, o.shape[-1])
            shape = TritonKernelShape("persistent_reduction", rows, max(1, o.shape[-1]),
                                      o.numel() * o.element_size() + grad_o.numel() * grad_o.element_size(),
                                      rows * 4)
            out.append((triton_kernel("triton_per_fused_flex_attention_backward_0", shape, gpu),))
    out.append(tuple(hops.kernels(name, args, gpu, allow_tf32)))
    return out


def _fill(a: Any, tensors: list[torch.Tensor]) -> Any:
    """The HOP's arguments with the call's tensors in their slots. (A module function, not a
    recursive closure: a closure that calls itself is a reference cycle that would keep the
    call's tensors, hence their simulated memory, alive until the next garbage collection.)"""
    if isinstance(a, _Slot):
        return tensors[a.index]
    if isinstance(a, (list, tuple)):
        return type(a)(_fill(b, tensors) for b in a)
    return a
