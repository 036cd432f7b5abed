"""Deterministic model of host (CPU) time spent by eager PyTorch.

The simulated host clock advances only by these costs: Python time between operators is
not measured (that would make runs irreproducible); instead each captured operator is
charged a dispatch cost that stands for the framework and Python overhead around it, and
each CUDA API call its own cost.

The costs come from cost/data/host_costs.json, built by `phantora-prof calibrate host-costs`
from the profiled gpt_small reference trace (H200 host, torch 2.11) and rescaled to unprofiled
time (calibrate/host_costs.py's docstring says how it is fitted):
- per op name, on the script's thread ("forward": includes the Python and composite-op
  time that leads to the op) and on autograd's thread ("backward": the op alone);
- defaults for ops the reference never ran: ops that launch GPU work, and metadata ops;
- a per-autograd-node engine overhead, charged when a backward node starts;
- per CUDA API call (launches, memsets, copies, events, syncs).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources

from phantora_prof.protocol import TensorArg

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
    "cudaGraphLaunch": 311,
}

DRIVER_APIS = frozenset({"cuLaunchKernelEx", "cuLaunchKernel"})


ENV_PROFILE = "PHANTORA_HOST_PROFILE"  # a host profile's name or file (the CLI's --host)
DEFAULT_PROFILE = "h200"
HOSTS_DIR = "cost/data/hosts"


def _load() -> dict:
    """The per-op table (host_costs.json, calibrate/host_costs.py) and the rest of the host model
    (host_model.json: Python, CPU-tensor ops, pinning, subclass dispatch; issue #15)."""
    data = resources.files("phantora_prof").joinpath("cost/data")
    table = json.loads(data.joinpath("host_costs.json").read_text())
    table.update({k: v for k, v in json.loads(data.joinpath("host_model.json").read_text()).items()
                  if k != "comment"})
    return table


def profile_names() -> list[str]:
    d = resources.files("phantora_prof").joinpath(HOSTS_DIR)
    return sorted(p.name[:-5] for p in d.iterdir() if p.name.endswith(".json"))


def load_profile(spec: str | None) -> dict:
    """A host profile by built-in name (cost/data/hosts/NAME.json) or file path.

    A profile says how fast a host is relative to the measured tables: `scale` multiplies the
    per-op costs of the script's thread (forward), autograd's thread (backward, with the
    per-node engine cost), CUDA API calls (api) and CPU-tensor ops (cpu_ops); `python` gives
    the cost per counted call. See README, "Host time"."""
    import os

    from phantora_prof.errors import ConfigError

    spec = spec or DEFAULT_PROFILE
    if os.sep in spec or spec.endswith(".json"):
        path = os.path.expanduser(spec)
        try:
            with open(path) as f:
                prof = json.load(f)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--host {spec}: cannot read the host profile ({e})") from e
    else:
        f = resources.files("phantora_prof").joinpath(f"{HOSTS_DIR}/{spec}.json")
        if not f.is_file():
            raise ConfigError(f"--host {spec}: no such host profile; built-in: {', '.join(profile_names())}, "
                              "or give a profile file (phantora-prof calibrate host --out FILE)")
        prof = json.loads(f.read_text())
    for key in ("name", "scale"):
        if key not in prof:
            raise ConfigError(f"--host {spec}: the host profile has no {key!r}")
    return prof


def _apply(table: dict, prof: dict) -> dict:
    sc = prof["scale"]
    speed = float(sc.get("all", 1.0))  # the whole host: slower (> 1) or faster than the reference
    fwd, bwd, api, cpu, py = (speed * float(sc.get(k, 1.0)) for k in ("forward", "backward", "api", "cpu_ops",
                                                                       "python"))
    t = json.loads(json.dumps(table))
    t["ops"]["forward"] = {k: int(v * fwd) for k, v in t["ops"]["forward"].items()}
    t["ops"]["backward"] = {k: int(v * bwd) for k, v in t["ops"]["backward"].items()}
    t["default"]["forward"] = {k: int(v * fwd) for k, v in t["default"]["forward"].items()}
    t["default"]["backward"] = {k: int(v * bwd) for k, v in t["default"]["backward"].items()}
    t["autograd_node_ns"] = int(t["autograd_node_ns"] * bwd)
    t["api_ns"] = {k: int(v * api) for k, v in t["api_ns"].items()}
    t["api_default_ns"] = int(t["api_default_ns"] * api)
    t["cpu_ops"]["base_ns"] *= cpu
    t["cpu_ops"]["bytes_per_ns"] /= cpu
    t["python"] = dict(t["python"], **prof.get("python", {}))
    t["python"]["py_call_ns"] *= py
    t["python"]["opcode_ns"] *= py
    t["subclass_dispatch"]["ns"] *= py
    # measured per parameter in absolute time (calibrate/host_costs.py), so only the host's speed applies
    t["optimizer_python_ns"] = {k: int(v * speed) for k, v in t["optimizer_python_ns"].items()}
    t["optimizer_steps"] = {impl: {cls: int(v * speed) for cls, v in per.items()}
                            for impl, per in t["optimizer_steps"].items() if impl != "comment"}
    t["pin_memory"]["base_ns"] *= cpu
    t["pin_memory"]["bytes_per_ns"] /= cpu
    t["dataloader_ipc"] = {k: float(v) * cpu for k, v in t["dataloader_ipc"].items() if k != "comment"}
    t["autograd_engine"] = {k: float(v) * speed for k, v in t["autograd_engine"].items() if k != "comment"}
    # measured as whole cuDNN calls' exclusive time, scaled to the reference host: the speed applies
    t["cudnn_rnn"] = {k: float(v) * speed for k, v in t.get("cudnn_rnn", {}).items() if k != "comment"}
    t["cpu_ops"]["per_op_ns"] = {k: v * cpu for k, v in t["cpu_ops"].get("per_op_ns", {}).items() if k != "comment"}
    t["cpu_ops"]["per_listed_tensor_ns"] = t["cpu_ops"].get("per_listed_tensor_ns", 0) * cpu
    # measured against a plain op of the reference host (measure/host_lists.py): the host's speed applies
    t["tensor_lists"] = {k: float(v) * speed for k, v in t["tensor_lists"].items() if k != "comment"}
    # measured as whole compiled-graph calls, scaled to the reference host (compiled_host.py): the speed applies
    t["compiled_calls"] = {k: int(v * speed) for k, v in t["compiled_calls"].items() if k != "comment"}
    # the launch call's fixed part is a CUDA API call like the others (its per-node part: graph_launch_ns)
    t["api_ns"]["cudaGraphLaunch"] = int(t["cuda_graphs"]["launch_ns"] * api)
    # measured like compiled_calls (tools/holdout/cudagraph_host.py): the speed applies
    t["cuda_graphs"] = {k: int(v * speed) for k, v in t["cuda_graphs"].items() if k != "comment"}
    # measured as whole torch.save / torch.load calls, scaled to the reference host: the speed applies
    t["serialization"] = {k: float(v) * (speed if k.endswith("_ns") or k.endswith("_ns_per_byte") else 1.0)
                          for k, v in t.get("serialization", {}).items() if k != "comment"}
    return t


PROFILE_SPEC: str | None = os.environ.get(ENV_PROFILE)  # as given (a forked rank checks it: fork_server.py)
PROFILE = load_profile(PROFILE_SPEC)
TABLE = _apply(_load(), PROFILE)

_FWD: dict[str, int] = TABLE["ops"]["forward"]
_BWD: dict[str, int] = TABLE["ops"]["backward"]
_DEF_FWD = (TABLE["default"]["forward"]["view"], TABLE["default"]["forward"]["compute"])
_DEF_BWD = (TABLE["default"]["backward"]["view"], TABLE["default"]["backward"]["compute"])

# Host time charged per captured operator, by what the operator does (defaults, script thread).
DISPATCH_NS_COMPUTE: int = _DEF_FWD[1]  # an op that launches GPU work (incl. its Python/autograd share)
DISPATCH_NS_VIEW: int = _DEF_FWD[0]  # a metadata-only op on GPU tensors (view, transpose, as_strided...)
DISPATCH_NS_CPU: int = TABLE["cpu_op_ns"]  # an op on CPU tensors only (runs for real; a token cost)
AUTOGRAD_NODE_NS: int = TABLE["autograd_node_ns"]  # autograd engine overhead per backward node

# Python work of torch.optim per parameter that no captured op stands for (host_costs.json
# "optimizer_python_ns"): Optimizer.step's per-parameter bookkeeping for a fused step, and
# zero_grad(set_to_none=True)'s loop. Measured with --host-probe (calibrate/host_costs.py).
OPTIMIZER_PYTHON_NS: dict[str, int] = TABLE["optimizer_python_ns"]
# The rest of a step's per-parameter work, by implementation (foreach / fused / forloop) and
# optimizer class (host_model.json "optimizer_steps", measure/host_lists.py).
OPTIMIZER_STEP_NS: dict[str, dict[str, int]] = TABLE["optimizer_steps"]


def optimizer_step_ns(implementation: str, class_names: list[str]) -> int:
    """Per-parameter host cost of one optimizer step beyond its ops and counted Python, for the
    first of `class_names` (the optimizer's class, then its bases) the table lists."""
    per = OPTIMIZER_STEP_NS.get(implementation, {})
    for name in class_names:
        if name in per:
            return per[name]
    return per.get("default", 0)

# Host time of torch.compile'd graphs at run time (host_model.json "compiled_calls",
# tools/holdout/compiled_host.py): per call, per saved tensor, per Triton launch.
COMPILED_CALLS: dict[str, int] = TABLE["compiled_calls"]
TRITON_LAUNCH_NS: int = COMPILED_CALLS["triton_launch_ns"]
COMPILED_EXTERN_ADJUST_NS: int = COMPILED_CALLS["extern_adjust_ns"]


# CUDA graph replays (host_model.json "cuda_graphs", tools/holdout/cudagraph_host.py).
CUDA_GRAPHS: dict[str, int] = TABLE["cuda_graphs"]


def graph_launch_ns(triton_nodes: int, other_nodes: int) -> int:
    """Host time of one cudaGraphLaunch: a fixed part and a part per kernel node (a Triton
    kernel's node is cheaper than a cuBLAS or aten kernel's)."""
    c = CUDA_GRAPHS
    return (api_ns("cudaGraphLaunch") + c["launch_per_triton_node_ns"] * triton_nodes
            + c["launch_per_extern_node_ns"] * other_nodes)


def graph_replay_ns(is_backward: bool, is_inference: bool, n_outputs: int, n_copied: int, first: bool = False) -> int:
    """Host time of one replayed call of a compiled graph under CUDA graph trees besides its
    input copy and its cudaGraphLaunch: the call's wrappers (guards, AOTAutograd, the autograd
    Function of a training graph, as in `compiled_call_ns` but with no per-saved-tensor cost),
    the trees' checks, per copied input and per rebuilt output; the first replay also caches its
    outputs' metadata."""
    c = CUDA_GRAPHS
    # the call's fixed costs as in the default mode (a training graph's autograd Function too), but
    # per saved tensor only the rebuild below: the default mode's per-tensor cost is mostly the
    # generated wrapper allocating it, which a replay does not run (approximate: calibrate/cuda_graphs.py)
    ns = compiled_call_ns(is_backward, is_inference) + c["replay_adjust_ns"]
    ns += c["per_copied_input_ns"] * n_copied + c["per_output_ns"] * n_outputs
    if first:
        ns += c["first_replay_ns"] + c["first_replay_per_output_ns"] * n_outputs
    return max(0, ns)


def graph_record_ns(nodes: int, inputs: int) -> int:
    """Host time a CUDA graph tree's recording adds to running the graph's code once (stream
    capture, instantiation, the tree's bookkeeping of inputs and outputs)."""
    c = CUDA_GRAPHS
    return max(0, c["record_ns"] + c["record_per_node_ns"] * nodes + c["record_per_input_ns"] * inputs)


def compiled_call_ns(is_backward: bool, is_inference: bool) -> int:
    """Fixed host time of one compiled graph call besides its launches: guards and AOTAutograd's
    wrappers for every call; the autograd Function of a training graph. The per-tensor part is
    `compiled_tensor_costs`."""
    c = COMPILED_CALLS
    ns = c["call_ns"]
    if is_backward:
        ns += c["backward_ns"]
    elif not is_inference:
        ns += c["training_forward_ns"]
    return ns


@dataclass(frozen=True)
class CompiledTensorCosts:
    """Host time per tensor of one compiled graph call, each charged where the real call spends
    it (runtime/compile/runner.py; placement from profiled calls of tools/holdout/compiled_host.py,
    tools/holdout/real_h200/session18/compiled_host_traces): per input before the first launch
    (a training forward's: Dynamo's tensor guards, the autograd Function taking each input, the
    generated wrapper's size and stride asserts; ~80% of it precedes the first launch), per
    output where its buffer is allocated (a training forward's saved tensors, a backward's
    gradients; most of it falls between the launches), per input of a backward (a saved tensor
    unpacked) where it is freed. An inference graph's per-tensor costs are in its fixed and
    per-extern costs, as compiled_host.py's chains measured them."""

    per_input_ns: int
    per_output_ns: int
    per_freed_input_ns: int


def compiled_tensor_costs(is_backward: bool, is_inference: bool) -> CompiledTensorCosts:
    """The per-tensor costs of a graph of this kind (host_model.json "compiled_calls")."""
    c = COMPILED_CALLS
    if is_backward:
        return CompiledTensorCosts(0, c.get("per_backward_output_ns", 0), c["per_backward_input_ns"])
    if is_inference:
        return CompiledTensorCosts(0, 0, 0)
    return CompiledTensorCosts(c.get("per_forward_input_ns", 0), c["per_forward_output_ns"], 0)


# Python interpreter work between ops (runtime/host/pyhost.py): per Python-level function call and
# per bytecode instruction executed.
PY_CALL_NS: float = TABLE["python"]["py_call_ns"]
OPCODE_NS: float = TABLE["python"]["opcode_ns"]
SUBCLASS_DISPATCH_NS: int = int(TABLE["subclass_dispatch"]["ns"])  # per tensor-subclass (DTensor) dispatch
# Per-file weights on OPCODE_NS (host_model.json "python_files"): a framework's Python costs more per
# instruction than a user's loop (its C calls, the objects it touches). Relative, so no profile scale.
PYTHON_FILE_WEIGHTS: dict[str, float] = dict(TABLE.get("python_files", {}).get("weights", {}))

SERIALIZATION: dict[str, float] = TABLE["serialization"]


def save_ns(nbytes: int) -> int:
    """Host time of torch.save writing a file of `nbytes` bytes, beyond the D2H copies of
    simulated CUDA tensors (host_model.json "serialization")."""
    s = SERIALIZATION
    return int(s["save_base_ns"] + s["save_ns_per_byte"] * nbytes) if nbytes > 0 else 0


def storage_read_ns(nbytes: int) -> int:
    """Host time of torch.load reading one storage of `nbytes` into new host memory: per byte, and
    per byte more from the size where new memory is fresh pages (host_model.json "serialization")."""
    s = SERIALIZATION
    return int(s["load_ns_per_byte"] * nbytes) + fresh_pages_ns(nbytes)


def fresh_pages_ns(nbytes: int) -> int:
    """Host time of first touching `nbytes` of new host memory, when an allocation that size is
    fresh pages from the OS (32 MiB and up: glibc's largest mmap threshold): the page faults.
    Measured on torch.load's storages (host_model.json "serialization", save_time.py); held out
    on `.cpu()` of 64 MiB tensors (save_model.py, session 42: 8 x 64 MiB into new memory 450 ms
    reference-scaled, into host tensors made once 47 ms)."""
    s = SERIALIZATION
    return int(s["load_fresh_ns_per_byte"] * nbytes) if nbytes >= s["fresh_min_bytes"] else 0


# Aten ops on CPU tensors (they run for real; this is their time on the reference host).
CPU_OP_BASE_NS: float = TABLE["cpu_ops"]["base_ns"]
CPU_OP_BYTES_PER_NS: float = TABLE["cpu_ops"]["bytes_per_ns"]



_CPU_OP_NS: dict[str, float] = TABLE["cpu_ops"]["per_op_ns"]


CPU_OP_PER_LISTED_NS: float = TABLE["cpu_ops"]["per_listed_tensor_ns"]


def cpu_op_ns(nbytes: int, op_name: str = "", listed: int = 0) -> int:
    """Host time of an aten op on CPU tensors that reads and writes `nbytes` in all (ops far
    below the base, like reading a scalar, have their own measured cost; a foreach op over
    `listed` CPU tensors runs one op per tensor)."""
    own = _CPU_OP_NS.get(op_name)
    if own is not None:
        return int(own)
    return int(CPU_OP_BASE_NS + nbytes / CPU_OP_BYTES_PER_NS + CPU_OP_PER_LISTED_NS * listed)


# Ops over tensor lists (foreach, fused optimizers, cat / stack): per listed tensor.
LIST_PER_INPUT_NS: float = TABLE["tensor_lists"]["per_input_ns"]
LIST_PER_OUTPUT_NS: float = TABLE["tensor_lists"]["per_output_ns"]


def tensor_list_counts(args: tuple, kwargs: dict, kind: type = TensorArg) -> int:
    """How many tensors the op's list arguments hold (each list counted; 0: no list argument).
    `kind` is what a tensor is in them: TensorArg in the runtime's records (a list of tensors
    is a tuple of them), torch.Tensor in an op's own arguments (ops on CPU tensors)."""
    n = 0
    for a in (*args, *kwargs.values()):
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], kind):
            n += sum(1 for t in a if isinstance(t, kind))
    return n


def tensor_list_ns(op_name: str, args: tuple, kwargs: dict, n_outputs: int) -> int | None:
    """Host time of an op over tensor lists, whose cost grows with the lists' length
    (measure/host_lists.py): the default per-op cost plus a cost per listed input tensor and,
    out of place, per tensor it creates. None when the op takes no tensor list."""
    n_in = tensor_list_counts(args, kwargs)
    if n_in == 0:
        return None
    base = DISPATCH_NS_COMPUTE
    out = 0 if op_name.endswith("_") else n_outputs
    return int(base + LIST_PER_INPUT_NS * n_in + LIST_PER_OUTPUT_NS * out)


# DataLoader's pinning thread (runtime/host/dataloader.py).
PIN_BASE_NS: float = TABLE["pin_memory"]["base_ns"]
PIN_BYTES_PER_NS: float = TABLE["pin_memory"]["bytes_per_ns"]
# Moving a batch between a DataLoader worker and the training process (host_model.json
# "dataloader_ipc", runtime/host/dataloader.py): shared memory in the worker, unpickling on the receiver.
DATALOADER_IPC: dict[str, float] = TABLE["dataloader_ipc"]
# The autograd engine's hand-offs around a backward call (host_model.json "autograd_engine",
# runtime/host/autograd_engine.py).
AUTOGRAD_ENGINE: dict[str, float] = TABLE["autograd_engine"]

# Host-side duration of each CUDA API call (unprofiled).
API_NS: dict[str, int] = TABLE["api_ns"]
_API_DEFAULT: int = TABLE["api_default_ns"]


def dispatch_ns(op_name: str, has_kernels: bool, backward: bool = False) -> int:
    """Host time charged for one captured op, before its launches (ns).

    `backward`: the op runs on autograd's thread (inside a backward node)."""
    if backward:
        c = _BWD.get(op_name)
        return c if c is not None else _DEF_BWD[has_kernels]
    c = _FWD.get(op_name)
    return c if c is not None else _DEF_FWD[has_kernels]


_CUDNN_RNN = TABLE["cudnn_rnn"]
_LIBRARY_WORK = {"aten::_cudnn_rnn": int(_CUDNN_RNN.get("forward_ns", 0)),
                 "aten::_cudnn_rnn_backward": int(_CUDNN_RNN.get("backward_ns", 0))}


def library_ns(op_name: str) -> int:
    """Host work a library does inside the op's kernel function beyond its dispatch and launch
    calls (cuDNN's RNN descriptors and plans: host_model.json "cudnn_rnn"); 0 for other ops."""
    return _LIBRARY_WORK.get(op_name, 0)


def api_ns(name: str) -> int:
    return API_NS.get(name, _API_DEFAULT)
