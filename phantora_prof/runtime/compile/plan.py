"""What a compiled graph does on the GPU, as Inductor scheduled it: a plan the runner replays.

A plan is pure data (no Inductor IR is kept): the buffers the generated code allocates, the
kernels it launches in order (Triton kernels with their bytes, extern kernels as the aten op
they call), which buffers each step reads and when each buffer dies, and what the graph
returns. Replaying it launches what Inductor's generated wrapper would launch and allocates
what it would allocate, without running Inductor's code generation (which needs Triton and a
GPU).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from phantora_prof.cost.triton import TritonKernelShape
from phantora_prof.errors import PhantoraError


class Unplannable(PhantoraError):
    """A graph whose Inductor schedule cannot be read into a plan (the graph then runs eagerly)."""


@dataclass(frozen=True, slots=True)
class BufferLayout:
    """A strided view of a buffer's storage (sizes, strides and offset in elements)."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str  # torch dtype name without "torch."
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Ref:
    """A tensor a step or an output uses: `name` is a graph input or a buffer; `view` is the
    layout read through (None: the buffer as allocated)."""

    name: str
    view: BufferLayout | None = None


@dataclass(slots=True)
class TritonStep:
    """One generated Triton kernel launch."""

    kernel: str  # triton_poi_fused_add_0
    shape: TritonKernelShape
    allocs: tuple[str, ...]  # buffers this kernel writes first (allocated just before it)
    frees: tuple[str, ...] = ()  # buffers and inputs dead after this step
    reuses: dict[str, str] = field(default_factory=dict)  # output -> input whose storage it takes (in place)


@dataclass(slots=True)
class ExternStep:
    """A call of an aten op from the generated wrapper (GEMMs, convolutions, attention, any
    op Inductor does not lower): recorded and costed as that op, its outputs allocated as
    Inductor's layouts say."""

    op: str  # "aten::addmm"
    args: tuple  # positional arguments: Ref for tensors, plain values otherwise
    kwargs: dict[str, Any]
    outputs: tuple[str, ...]  # buffers holding its outputs, in the op's output order
    allocs: tuple[str, ...]
    frees: tuple[str, ...] = ()


@dataclass(slots=True)
class AllocStep:
    """A buffer other kernels write into in parts (a concatenation's destination)."""

    allocs: tuple[str, ...]
    frees: tuple[str, ...] = ()


@dataclass(slots=True)
class CompiledGraphPlan:
    """Everything the runner needs to replay one compiled (forward, backward or inference) graph."""

    graph_id: int | None
    is_backward: bool
    inputs: tuple[str, ...]  # graph input names, in call order
    buffers: dict[str, BufferLayout]  # allocated buffers
    steps: list = field(default_factory=list)  # TritonStep | ExternStep | AllocStep
    outputs: tuple = ()  # Ref | int | None per graph output
    input_frees: tuple[str, ...] = ()  # inputs no step reads (dropped at once)
    aliases: dict[str, Ref] = field(default_factory=dict)  # buffer name -> the view of another it is
    is_inference: bool = False  # a forward with no backward (no grad): no autograd Function around it
    static_inputs: tuple[int, ...] = ()  # inputs at a fixed address every call (parameters, buffers, saved tensors)
    cudagraph_skip: str | None = None  # compiled for CUDA graphs: why Inductor would not use them (None: it would)

    @property
    def triton_kernels(self) -> int:
        return sum(1 for s in self.steps if isinstance(s, TritonStep))

    @property
    def extern_kernels(self) -> int:
        return sum(1 for s in self.steps if isinstance(s, ExternStep))
