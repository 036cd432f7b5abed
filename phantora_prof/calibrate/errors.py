"""How far off is each kernel-time source? Errors measured against real traces (issue #14: error bands).

    phantora-prof calibrate errors TRACE [TRACE ...] [--out FILE]

Every dispatch-level op of each real (CUDA-build, torch.profiler) trace is re-costed by the
cost model with the exact-shape table off (the shapes of a real trace would otherwise be
looked up, not predicted), and the predicted GPU time is attributed to the source that
answered (`table` is then never used; its own error is that of re-measuring a shape, taken
from the reference workloads' reruns). Per source and trace, the relative error of the summed
time of the ops it answered is one sample. A source's `sigma` is the root mean square of its
samples, weighting each by the GPU time it covered; cost/errorband.py combines them into a
band around a run's GPU time.

Traces used for the shipped file (cost/data/source_errors.json) are listed in it; they are
the development models (the reference GPT traces, the CNN, the dev models of the held-out zoo),
never the blind ones.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from phantora_prof.calibrate.trace_ops import count_steps, dispatch_ops, load_events
from phantora_prof.calibrate.families import to_opcall


def per_source(path: Path, gpu: str = "h200") -> dict[str, tuple[float, float]]:
    """{source: (real ns per step, predicted ns per step)} for one real trace, which must have run
    on `gpu` (its deviceProperties; a trace that names no GPU is taken as `gpu`'s): another GPU's
    kernels priced here would count as the model's error."""
    from phantora_prof import cost
    from phantora_prof.calibrate.split_k_observed import trace_gpu
    from phantora_prof.errors import ConfigError

    ran = trace_gpu(Path(path))
    if ran is not None and ran != cost.get_gpu(gpu).key:
        raise ConfigError(f"{path} ran on {ran}: the error band is measured on {gpu}'s own traces")
    events = load_events(path)
    steps = count_steps(events)
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for d in dispatch_ops(events):
        if not d.acts or any("nccl" in a.name.lower() for a in d.acts):
            continue
        if all(a.kind == "memcpy" and ("HtoD" in a.name or "DtoH" in a.name) for a in d.acts):
            continue  # host<->device copies: the copy model, judged on the streams reference
        op = to_opcall(d, _list_dtype(d))
        if op is None:
            continue
        try:
            ks = cost.estimate(op, gpu, use_table=False, use_measured=True)
        except Exception:  # noqa: BLE001 - a call the model cannot read: not a sample
            continue
        if not ks:
            continue
        pred = sum(k.duration_ns for k in ks)
        real = sum(a.dur_ns for a in d.acts)
        # an op's time goes to the source of most of its predicted time
        by_src: dict[str, int] = defaultdict(int)
        for k in ks:
            by_src[k.source] += k.duration_ns
        src = max(by_src, key=by_src.get)
        acc[src][0] += real / steps
        acc[src][1] += pred / steps
    return {s: (r, p) for s, (r, p) in acc.items()}


def _list_dtype(d) -> str:
    """A trace does not record the dtype of tensor-list arguments; the kernels' names do."""
    names = " ".join(a.name for a in d.acts)
    if "BFloat16" in names or "bf16" in names or "OpaqueType<2u>" in names:  # cat's kernel names only the size
        return "bfloat16"
    if "Half" in names or "fp16" in names:
        return "float16"
    return "float32"


def sigma(samples: list[tuple[float, float]]) -> float:
    """GPU-time-weighted RMS of relative errors over (real, predicted) samples."""
    wsum = sum(r for r, _ in samples)
    if wsum <= 0:
        return float("nan")
    return math.sqrt(sum(r * ((p - r) / r) ** 2 for r, p in samples if r > 0) / wsum)


def build(paths: list[Path]) -> dict:
    samples: dict[str, list] = defaultdict(list)
    per_trace = {}
    for p in paths:
        res = per_source(p)
        per_trace[p.name if p.name != "trace.pt.trace.json.gz" else p.parent.name] = {
            s: {"real_us": round(r / 1e3, 1), "pred_us": round(q / 1e3, 1)} for s, (r, q) in sorted(res.items())}
        for s, (r, q) in res.items():
            if r > 50_000:  # sources answering < 50 us per step in a trace say little about themselves
                samples[s].append((r, q))
    return {"comment": "relative error of GPU time per kernel-time source, measured on real H200 traces with the "
                       "exact-shape table off (phantora_prof/calibrate/errors.py); sigma: GPU-time-weighted RMS",
            "traces": sorted(per_trace),
            "sigma": {s: round(sigma(v), 4) for s, v in sorted(samples.items())},
            "samples": {s: len(v) for s, v in sorted(samples.items())},
            "per_trace": per_trace}


def write(doc: dict, out: Path) -> None:
    out.write_text(json.dumps(doc, indent=1) + "\n")
