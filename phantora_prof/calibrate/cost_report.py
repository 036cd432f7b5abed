"""Compare the kernel-time model with the GPU time measured in the H200 reference traces.

For every dispatch-level op of a reference trace (see calibrate/kernel_table.py for
how trace ops map to what the runtime captures) this rebuilds the OpCall the runtime
would send (tensor shapes/dtypes/strides from the trace's Input Dims/type/Strides,
scalars from Concrete Inputs, outputs from running the op on meta tensors), asks
phantora_prof.cost.estimate for its kernels twice (roofline only, and with the measured
table), and sums measured and estimated GPU time per op class per profiled step.

Tensor lists the profiler did not record (the 148 parameters of _fused_adamw_ and
_foreach_add_ in gpt.py) are rebuilt from the GPT model's parameter shapes.

Run:  phantora-prof calibrate cost-report [gpt_small gpt_b32 ...] [--ops] [--gpu h200] [--reference DIR]
(a trace is priced on the GPU its deviceProperties name; --gpu only checks it)
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from phantora_prof.calibrate import trace_ops as X
from phantora_prof.calibrate.kernel_table import load_events
from phantora_prof.calibrate.split_k_observed import trace_gpu
from phantora_prof.cost import estimate, get_gpu, op_class
from phantora_prof.cost.ops import default_tf32
from phantora_prof.cost.roofline import CLASSES, MEMSET
from phantora_prof.errors import ConfigError
from phantora_prof.protocol import CPU_DEVICE, OpCall, OpKind, TensorArg
from tracing.diff.intervals import measure, merge


UNPRICED = "unpriced"
NO_GPU_WORK = "no_gpu_work"


def gpt_param_shapes(vocab=50304, seq=1024, d=768, layers=12):
    """model.parameters() of shared/reference/workloads/gpt.py (head tied to wte)."""
    shapes = [(vocab, d), (seq, d)]
    for _ in range(layers):
        shapes += [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,)]
    shapes += [(d,), (d,)]
    return shapes


def _contig(shape):
    return X._contig(shape)


def _ta(shape, dtype, stride=None, device=0):
    shape = tuple(shape)
    return TensorArg(shape, tuple(stride) if stride is not None else _contig(shape), dtype, device)


_INDEX_PUTS = ("aten::_index_put_impl_", "aten::index_put_", "aten::index_put")


def _index_list(x, values):
    """An index_put's index list, which the profiler records as an empty list: rebuilt from the
    shapes as one int64 index tensor over one dim of `x` (the backward of `x[idx]` or
    `x[:, idx]`, as relative position biases index their tables), found where the values' shape is
    `x`'s with that dim replaced by the index's shape. Where several dims fit (LeViT's [4, 196]
    table and [4, 196, 196] values: `x[:, idx[196, 196]]` or `x[idx[4, 196]]`), the last is taken,
    `x[:, idx]`: a heuristic of the report, which the simulator (given the real list) does not need.
    None when nothing fits."""
    if not isinstance(x, TensorArg) or not isinstance(values, TensorArg):
        return None
    xs, vs = tuple(x.shape), tuple(values.shape)
    r, v = len(xs), len(vs)
    for k in range(r - 1, -1, -1):
        tail = r - k - 1
        idx_ndim = v - k - tail
        if idx_ndim >= 1 and vs[:k] == xs[:k] and vs[v - tail:] == xs[k + 1:]:
            return (None,) * k + (_ta(vs[k:k + idx_ndim], "int64"),)
    return None


class UnrecordedList(ValueError):
    """An op's tensor list the profiler did not record, in a trace that is not a reference GPT run."""


def to_opcall(dop: X.DispatchOp, rank: int = 0, param_shapes=None, gpt_lists: bool = True) -> OpCall:
    """The OpCall the runtime would send for `dop`. A tensor list the profiler did not record is
    rebuilt from `param_shapes` (default: the reference GPT's parameters) when `gpt_lists`, else
    UnrecordedList is raised: another model's optimizer lists have other shapes."""
    args = []
    list_dtypes = {}
    for i, a in enumerate(X.input_tensors(dop)):
        if a[0] == "t":
            _, shape, dt, st = a
            # a 0-dim double / int64 operand is a Python number torch wrapped (`x * 0.5` calls
            # mul.Tensor with it): a CPU scalar, as the simulator captures it, not a CUDA tensor
            wrapped = len(shape) == 0 and dt in ("float64", "int64")
            args.append(_ta(shape, dt, st, device=CPU_DEVICE if wrapped else 0))
        elif a[0] == "l":
            if a[1] is None:
                if param_shapes is None and not gpt_lists:
                    raise UnrecordedList(dop.name)
                shapes = param_shapes or gpt_param_shapes()
                if dop.name == "aten::_foreach_add_" or (dop.name == "aten::_fused_adamw_" and i == 5):
                    args.append(tuple(_ta((), "float32") for _ in shapes))
                elif dop.name == "aten::_fused_adamw_" and i == 4:
                    args.append(())
                else:
                    args.append(tuple(_ta(s, "float32") for s in shapes))
            else:
                dt = "bfloat16" if dop.name == "aten::cat" else "float32"
                list_dtypes[i] = dt
                args.append(tuple(_ta(s, dt, st) for _, s, _, st in a[1]))
        elif a[0] == "n":
            args.append(None)
        else:
            args.append(X.parse_scalar(a[1]))
    if dop.name in _INDEX_PUTS and len(args) > 2 and args[1] is None:
        args[1] = _index_list(args[0], args[2])
    outs = ()
    if not any(isinstance(x, tuple) and x and isinstance(x[0], TensorArg) for x in args):
        mo = X.meta_outputs(dop)
        if mo:
            outs = tuple(_ta(s, d, st) for s, d, st in mo)
    elif dop.name == "aten::cat":
        mo = X.meta_outputs(dop, list_dtypes)
        if mo:
            outs = tuple(_ta(s, d, st) for s, d, st in mo)
    return OpCall(rank=rank, external_id=dop.ext, name=dop.name, args=tuple(args), kwargs={}, outputs=outs,
                  tid=0, start_ns=0, end_ns=0, stream=7, device=0, kind=OpKind.COMPUTE)


def trace_gpu_for(workload: str, gpu: str | None) -> str:
    """The GPU to price `workload`'s ops on: the one its trace ran on (its `deviceProperties`),
    or `gpu` when given. A trace of another GPU than `gpu` is refused: priced on the wrong GPU,
    the 11 H100 profiles of tools/holdout/real_h200 came out 5-19 points fast on the H200's
    bandwidth (timm_bit's total -13.2% on h200 against +5.9% on h100), and nothing said so."""
    path = Path(workload)
    ran = trace_gpu(path) if path.exists() else "h200"  # the reference runs are the H200's
    if gpu is None:
        if ran is None:
            raise ConfigError(f"{workload}: its deviceProperties name no GPU the simulator knows; "
                              "pass --gpu for the GPU it ran on")
        return ran
    key = get_gpu(gpu).key
    if ran is not None and ran != key:
        raise ConfigError(f"{workload} ran on {ran}, not {key}: price it with --gpu {ran} (or leave --gpu out, "
                          "which takes the trace's own GPU)")
    return key


def calibrate(workload: str, gpu: str | None = None, detail: bool = False, reference: Path | None = None):
    """Per class: (measured, roofline-only, with-table) GPU time in us per step. `workload`: a
    reference run's name (in REFERENCE/h200, the default reference folder when None) or a trace
    file; `gpu`: None prices it on the GPU its trace ran on (trace_gpu_for)."""
    g = get_gpu(trace_gpu_for(workload, gpu))
    events = load_events(workload, reference)
    steps = X.count_steps(events)
    meas = defaultdict(float)
    roof = defaultdict(float)
    tab = defaultdict(float)
    rows = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    # the reference runs are gpt.py's: their unrecorded optimizer lists are its parameters
    gpt_lists = not Path(workload).exists()
    for dop in X.dispatch_ops(events):
        try:
            op = to_opcall(dop, gpt_lists=gpt_lists)
        except UnrecordedList:
            meas[UNPRICED] += sum(a.dur_ns for a in dop.acts) / 1000.0
            continue
        cls = op_class(op)
        # the profile does not record the run's TF32 switches: torch's defaults
        tf32 = default_tf32(op.name)
        r_k = estimate(op, g, use_table=False, allow_tf32=tf32)
        t_k = estimate(op, g, use_table=True, allow_tf32=tf32)
        if not dop.acts:
            # nothing ran on the GPU for it: a CPU op (torch.optim's `.item()` of its CPU step
            # counters) the trace does not tell apart, or a model error; shown apart, not compared
            tab[NO_GPU_WORK] += sum(k.duration_ns for k in t_k) / 1000.0
            continue
        m = 0.0
        span = _span_share(dop.acts)
        for a in dop.acts:
            c = MEMSET if a.kind == "memset" else cls
            meas[c] += a.dur_ns * span / 1000.0
            m += a.dur_ns * span / 1000.0
        r = 0.0
        for k in r_k:
            c = MEMSET if k.kind == "memset" else cls
            roof[c] += k.duration_ns / 1000.0
            r += k.duration_ns / 1000.0
        t = 0.0
        for k in t_k:
            c = MEMSET if k.kind == "memset" else cls
            tab[c] += k.duration_ns / 1000.0
            t += k.duration_ns / 1000.0
        if detail and (dop.acts or r_k):
            key = (cls, dop.name, str(dop.dims)[:90])
            row = rows[key]
            row[0] += 1
            row[1] += m
            row[2] += r
            row[3] += t
    per = {c: (meas[c] / steps, roof[c] / steps, tab[c] / steps) for c in CLASSES if meas[c] or roof[c] or tab[c]}
    if meas[UNPRICED]:
        per[UNPRICED] = (meas[UNPRICED] / steps, 0.0, 0.0)
    if tab[NO_GPU_WORK]:
        per[NO_GPU_WORK] = (0.0, 0.0, tab[NO_GPU_WORK] / steps)
    if detail:
        return per, {k: (v[0] // steps, v[1] / steps, v[2] / steps, v[3] / steps) for k, v in rows.items()}
    return per


def _span_share(acts) -> float:
    """1, or for an op whose kernels ran on several streams at once (cuDNN's grouped wide-kernel
    1-D convolutions put their per-group kernels on up to 16 streams of its own: wav2vec2's
    positional convolution spans 12.3 ms of GPU time with 30.9 ms of kernels) the share of their
    summed time that is wall time: the union of their intervals over their sum. The simulator
    times such an op by that span (family points keep the span), so the report does too."""
    if len({a.stream for a in acts}) < 2:
        return 1.0
    total = sum(a.dur_ns for a in acts)
    union = measure(merge([(a.start_ns, a.start_ns + a.dur_ns) for a in acts]))
    return union / total if total else 1.0


def report(workload: str, gpu: str | None = None, detail: bool = False, reference: Path | None = None) -> str:
    gpu = trace_gpu_for(workload, gpu)
    res = calibrate(workload, gpu, detail, reference)
    per, rows = (res if detail else (res, None))
    lines = [f"{workload} on {gpu}: GPU time per step (us)",
             f"{'class':<12}{'measured':>11}{'roofline':>11}{'err':>8}{'w/table':>11}{'err':>8}"]
    tm = tr = tt = 0.0
    for c, (m, r, t) in per.items():
        if c in (UNPRICED, NO_GPU_WORK):
            continue
        tm += m
        tr += r
        tt += t
        lines.append(f"{c:<12}{m:>11.1f}{r:>11.1f}{_pct(r, m):>8}{t:>11.1f}{_pct(t, m):>8}")
    lines.append(f"{'total':<12}{tm:>11.1f}{tr:>11.1f}{_pct(tr, tm):>8}{tt:>11.1f}{_pct(tt, tm):>8}")
    if UNPRICED in per:
        lines.append(f"not priced: {per[UNPRICED][0]:.1f} us per step of ops whose tensor lists the profiler "
                     "did not record (a foreach optimizer's), left out of the total")
    if NO_GPU_WORK in per:
        lines.append(f"not compared: {per[NO_GPU_WORK][2]:.1f} us per step the model gives ops that ran nothing on "
                     "the GPU in the trace (CPU tensors, which the trace does not tell apart)")
    if rows:
        lines.append("")
        lines.append(f"{'class':<11} {'op':<45}{'n':>4}{'meas':>9}{'roof':>9}{'err':>7}{'model':>9}{'err':>7}  dims")
        for (c, name, dims), (n, m, r, t) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
            lines.append(f"{c:<11} {name[6:]:<45}{n:>4}{m:>9.1f}{r:>9.1f}{_pct(r, m):>7}{t:>9.1f}{_pct(t, m):>7}  {dims}")
    return "\n".join(lines)


def _pct(x, ref):
    if ref <= 0:
        return "-" if x <= 0 else "+inf"
    return f"{(x - ref) / ref * 100:+.1f}%"
