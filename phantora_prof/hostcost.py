"""Deterministic model of host (CPU) time spent by eager PyTorch.

The simulated host clock advances only by these costs: Python time between operators is
not measured (that would make runs irreproducible); instead each captured operator is
charged a dispatch cost that stands for the framework and Python overhead around it, and
each CUDA API call its own cost.

Calibration (see README "Accuracy"): on the reference H200 machine, eager PyTorch spends
about 17.5 us of host time per profiler-visible aten op; the reference GPT step (12 layers,
batch 1, seq 64, nearly no GPU work) takes 26.4 ms unprofiled. The runtime captures ops at
the __torch_dispatch__ level, where that step shows fewer (and coarser) ops than the
profiler's nested op tree, so the per-captured-op cost is larger than 17.5 us; the numbers
below are fitted so that the captured GPT step costs ~26 ms of host time.
"""
from __future__ import annotations

# Host time charged per captured operator, by what the operator does.
DISPATCH_NS_COMPUTE = 24_000  # an op that launches GPU work (incl. its Python/autograd share)
DISPATCH_NS_VIEW = 6_000  # a metadata-only op on GPU tensors (view, transpose, as_strided...)
DISPATCH_NS_CPU = 3_000  # an op on CPU tensors only (runs for real; we charge a token cost)

# Host-side duration of each CUDA API call (unprofiled, typical for an H100/H200 host).
API_NS = {
    "cudaLaunchKernel": 2_500,
    "cudaLaunchKernelExC": 2_500,
    "cuLaunchKernelEx": 2_500,
    "cuLaunchKernel": 2_500,
    "cudaMemcpyAsync": 3_500,
    "cudaMemsetAsync": 2_500,
    "cudaEventRecord": 1_500,
    "cudaEventRecordWithFlags": 1_500,
    "cudaStreamWaitEvent": 1_500,
    "cudaEventQuery": 1_000,
    "cudaDeviceSynchronize": 3_000,
    "cudaStreamSynchronize": 3_000,
    "cudaEventSynchronize": 3_000,
    "cudaEventElapsedTime": 1_000,
}

# CUPTI callback ids the reference traces carry in args.cbid.
CBID = {
    "cudaLaunchKernel": 211,
    "cudaLaunchKernelExC": 430,
    "cuLaunchKernelEx": 652,
    "cuLaunchKernel": 307,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaEventRecord": 135,
    "cudaEventRecordWithFlags": 370,
    "cudaStreamWaitEvent": 147,
    "cudaEventQuery": 138,
    "cudaDeviceSynchronize": 165,
    "cudaStreamSynchronize": 131,
    "cudaEventSynchronize": 133,
    "cudaEventElapsedTime": 134,
}

DRIVER_APIS = frozenset({"cuLaunchKernelEx", "cuLaunchKernel"})


def api_ns(name: str) -> int:
    return API_NS.get(name, 2_000)
