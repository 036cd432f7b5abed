#!/usr/bin/env python3
"""Capture real multi-GPU reference data to hold phantora-prof's simulation against (issue #9).

Why: the simulator's step times, per-category GPU times and network model are only as good as
the real runs they are checked against. This tool produces those runs on a real multi-GPU host,
with nothing but PyTorch (it imports no other phantora_prof module, so it runs on a bare GPU machine
from a checkout).

Three parts, all under ``--out DIR``:

(a) ``DIR/<example>.log`` and ``DIR/traces/<example>/rank<R>.pt.trace.json.gz``: each distributed
    example (examples/ddp, fsdp, tp, fsdp_tp, pp) runs unmodified under
    ``torchrun --nproc-per-node N``. The example has no profiling option, so this tool is the
    script torchrun starts: it wraps the example (run with ``runpy``) in ``torch.profiler.profile``
    with ``schedule(wait=1, warmup=1, active=2, repeat=1)``. The schedule is stepped by a global
    optimizer step post-hook (``torch.optim.optimizer.register_optimizer_step_post_hook``), so a
    ProfilerStep#N spans one optimizer step to the next without touching the example. Steps
    after the profiled window run without the profiler; their printed ``time_ms`` is the clean
    step time.
(b) ``DIR/collectives.txt`` (+ ``.json``): torch.distributed collectives (all_reduce,
    all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, send/recv) over sizes
    8 B .. 8 GiB in x4 steps, timed with CUDA events (out-of-place, float32, averaged over the
    iterations, max over ranks), printed as nccl-tests tables with its size/count conventions and
    bus-bandwidth factors (doc/PERFORMANCE.md of nccl-tests).
(c) ``DIR/env.txt``: torch, CUDA and NCCL versions, ``nvidia-smi`` and ``nvidia-smi topo -m``,
    and the NCCL_* environment.

Usage (on the GPU host)::

    python3 -m phantora_prof.measure.capture_real all --nproc 2 --out /tmp/real   # everything: ~105 s on 2 x H200
    torchrun --nproc-per-node 2 -m phantora_prof.measure.capture_real profile --trace-dir T \
        -- examples/ddp/train.py --steps 8
    torchrun --nproc-per-node 2 -m phantora_prof.measure.capture_real collectives --out T/collectives.txt

(from the repository's root: the examples' paths are relative to it).

``all`` packs everything into ``DIR.tar.gz`` too, to carry it off the machine in one file.
"""
from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import runpy
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]

# Small models so each example runs in seconds and traces stay small; the same arguments are
# used for the simulated runs (tests/data/real/README.md). --heads 16 --dim 1024 keeps the
# head count divisible for TP; pp needs --microbatches >= stages.
COMMON_ARGS = ["--layers", "4", "--dim", "1024", "--heads", "16", "--seq", "1024", "--batch", "8",
               "--steps", "8"]
EXAMPLES: dict[str, list[str]] = {
    "ddp": ["examples/ddp/train.py", *COMMON_ARGS],
    "fsdp": ["examples/fsdp/train.py", *COMMON_ARGS],
    "tp": ["examples/tp/train.py", *COMMON_ARGS],
    "fsdp_tp": ["examples/fsdp_tp/train.py", *COMMON_ARGS],
    "pp": ["examples/pp/train.py", *COMMON_ARGS, "--microbatches", "4"],
}

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"]


# --------------------------------------------------------------------------- (a) profile
def profile_main(trace_dir: str, script: str, script_args: list[str], wait: int, warmup: int,
                 active: int) -> None:
    """Run ``script`` as ``__main__`` (this process is one torchrun rank) under torch.profiler."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.profiler import ProfilerActivity, profile, schedule

    rank = int(os.environ.get("RANK", "0"))
    out = Path(trace_dir)
    out.mkdir(parents=True, exist_ok=True)

    def on_ready(prof: "profile") -> None:
        raw = out / f"rank{rank}.pt.trace.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(str(raw) + ".gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()

    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                   schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
                   on_trace_ready=on_ready, record_shapes=True)
    # One optimizer.step() per training step in every example: step the profiler after it.
    # (An example with several optimizers would step it several times per training step.)
    handle = register_optimizer_step_post_hook(lambda *_: prof.step())
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))  # as `python SCRIPT` has it (run_path does not)
    with prof:
        runpy.run_path(script, run_name="__main__")
    handle.remove()
    del torch


# --------------------------------------------------------------------------- (b) collectives
def _sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def _iters(nbytes: int) -> tuple[int, int]:
    """(warmup, timed) iterations: many for latency-bound sizes, few for the GiB ones."""
    if nbytes <= 64 << 20:
        return 5, 20
    if nbytes <= 1 << 30:
        return 2, 5
    return 1, 3


def collectives_main(out_path: str, min_bytes: int, max_bytes: int, factor: int, ops: list[str]) -> None:
    """Time each op at each size on all ranks; rank 0 writes the nccl-tests style tables."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    esize = 4  # float32
    results: dict[str, list[dict]] = {}
    for op in ops:
        rows = []
        for size in _sizes(min_bytes, max_bytes, factor):
            # nccl-tests' conventions: size is the total buffer (all_reduce, sendrecv: per rank
            # buffer; all_gather: the gathered output; reduce_scatter: the input; alltoall: the
            # send buffer); count is per rank for all_gather/reduce_scatter/alltoall.
            if op in ("all_gather", "reduce_scatter", "alltoall"):
                count = size // esize // n
                total = count * n
            else:
                count = size // esize
                total = count
            if count == 0:
                continue
            nbytes = total * esize
            big = torch.empty(total, dtype=torch.float32, device=dev).fill_(1.0)
            if op == "all_reduce":
                # torch has no out-of-place all_reduce; in-place moves the same bytes.
                def fn() -> None:
                    dist.all_reduce(big)
            elif op == "all_gather":
                small = torch.ones(count, dtype=torch.float32, device=dev)

                def fn() -> None:
                    dist.all_gather_into_tensor(big, small)
            elif op == "reduce_scatter":
                small = torch.empty(count, dtype=torch.float32, device=dev)

                def fn() -> None:
                    dist.reduce_scatter_tensor(small, big)
            elif op == "alltoall":
                out = torch.empty_like(big)

                def fn() -> None:
                    dist.all_to_all_single(out, big)
            elif op == "sendrecv":
                out = torch.empty_like(big)
                nxt, prv = (rank + 1) % n, (rank - 1) % n

                def fn() -> None:
                    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, big, nxt),
                                                   dist.P2POp(dist.irecv, out, prv)])
                    for r in reqs:
                        r.wait()
            else:
                raise SystemExit(f"unknown collective {op}")
            warm, iters = _iters(nbytes)
            for _ in range(warm):
                fn()
            torch.cuda.synchronize()
            dist.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            torch.cuda.synchronize()
            t_us = torch.tensor([start.elapsed_time(end) * 1e3 / iters], device=dev)
            dist.all_reduce(t_us, op=dist.ReduceOp.MAX)
            t = float(t_us.item())
            algbw = nbytes / t / 1e3  # GB/s (1e9 B/s), nccl-tests' unit
            factor_bus = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n,
                          "reduce_scatter": (n - 1) / n, "alltoall": (n - 1) / n}.get(op, 1.0)
            rows.append({"size": nbytes, "count": count, "type": "float", "time_us": t, "algbw": algbw,
                         "busbw": algbw * factor_bus, "iters": iters})
            fn = big = None  # free this size's buffers before the next one
            torch.cuda.empty_cache()
        results[op] = rows
        if rank == 0:
            print(f"# {op}: {len(rows)} sizes done", flush=True)
    if rank == 0:
        lines = []
        for op, rows in results.items():
            lines.append(f"# real torch.distributed {op} on {n} x {torch.cuda.get_device_name()} "
                         f"(NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, float32, out-of-place "
                         f"except all_reduce in-place, time = mean of iters, max over ranks)")
            lines.append("#       size         count      type     time   algbw   busbw")
            lines.append("#        (B)    (elements)              (us)  (GB/s)  (GB/s)")
            for r in rows:
                lines.append(f"{r['size']:12d}  {r['count']:12d}  {r['type']:>8s}  {r['time_us']:7.1f}  "
                             f"{r['algbw']:6.2f}  {r['busbw']:6.2f}")
            lines.append(f"# Avg bus bandwidth    : {sum(r['busbw'] for r in rows) / max(len(rows), 1):.3f}")
            lines.append("")
        text = "\n".join(lines)
        print(text, flush=True)
        Path(out_path).write_text(text)
        Path(out_path).with_suffix(".json").write_text(json.dumps({"nranks": n, "dtype": "float32",
                                                                   "ops": results}, indent=1))
    dist.destroy_process_group()


# --------------------------------------------------------------------------- (c) env
def _cmd(args: list[str]) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({' '.join(args)} failed: {exc})\n"


def env_main(path: Path) -> None:
    import torch
    parts = [f"torch {torch.__version__}", f"cuda {torch.version.cuda}",
             f"nccl {'.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else '-'}",
             f"gpus {torch.cuda.device_count()} x {torch.cuda.get_device_name() if torch.cuda.is_available() else '-'}",
             f"python {sys.version.split()[0]}", "",
             "## env", *[f"{k}={v}" for k, v in sorted(os.environ.items())
                         if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM_", "CUDA_"))],
             "", "## nvidia-smi", _cmd(["nvidia-smi"]), "## nvidia-smi topo -m", _cmd(["nvidia-smi", "topo", "-m"]),
             "## nvidia-smi nvlink -s", _cmd(["nvidia-smi", "nvlink", "-s"])]
    path.write_text("\n".join(parts))


# --------------------------------------------------------------------------- all
def all_main(out: Path, nproc: int, examples: list[str], maxbytes: int, timeout: int) -> int:
    """Run (c), (a) for each example, then (b); pack DIR.tar.gz. Returns the number of failures."""
    out.mkdir(parents=True, exist_ok=True)
    env_main(out / "env.txt")
    me = ["-m", __spec__.name if __spec__ else "phantora_prof.measure.capture_real"]  # run from REPO
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    failures = 0
    summary = []
    for name in examples:
        script, *args = EXAMPLES[name]
        cmd = [*torchrun, *me, "profile", "--trace-dir", str(out / "traces" / name), "--", script, *args]
        t0 = time.time()
        with open(out / f"{name}.log", "w") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            try:
                rc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        dt = time.time() - t0
        failures += rc != 0
        summary.append(f"{name}: rc {rc} in {dt:.1f} s")
        print(summary[-1], flush=True)
    cmd = [*torchrun, *me, "collectives", "--out", str(out / "collectives.txt"), "--maxbytes", str(maxbytes)]
    t0 = time.time()
    with open(out / "collectives.log", "w") as f:
        try:
            rc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, timeout=timeout * 3).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    failures += rc != 0
    summary.append(f"collectives: rc {rc} in {time.time() - t0:.1f} s")
    print(summary[-1], flush=True)
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    with tarfile.open(str(out) + ".tar.gz", "w:gz") as tar:
        tar.add(out, arcname=out.name)
    return failures


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("all", help="env, every example under torchrun with a profiler, collectives")
    a.add_argument("--out", required=True, type=Path)
    a.add_argument("--nproc", type=int, default=2)
    a.add_argument("--examples", default=",".join(EXAMPLES))
    a.add_argument("--maxbytes", type=int, default=8 << 30)
    a.add_argument("--timeout", type=int, default=120, help="seconds per example")
    pr = sub.add_parser("profile", help="(one torchrun rank) run SCRIPT under torch.profiler")
    pr.add_argument("--trace-dir", required=True)
    pr.add_argument("--wait", type=int, default=1)
    pr.add_argument("--warmup", type=int, default=1)
    pr.add_argument("--active", type=int, default=2)
    pr.add_argument("script")
    pr.add_argument("args", nargs=argparse.REMAINDER)
    c = sub.add_parser("collectives", help="(one torchrun rank) nccl-tests style sweep")
    c.add_argument("--out", required=True)
    c.add_argument("--minbytes", type=int, default=8)
    c.add_argument("--maxbytes", type=int, default=8 << 30)
    c.add_argument("--factor", type=int, default=4)
    c.add_argument("--ops", default=",".join(COLLECTIVES))
    e = sub.add_parser("env", help="write env.txt")
    e.add_argument("--out", required=True, type=Path)
    ns = p.parse_args()
    if ns.cmd == "all":
        sys.exit(1 if all_main(ns.out, ns.nproc, ns.examples.split(","), ns.maxbytes, ns.timeout) else 0)
    if ns.cmd == "profile":
        args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
        profile_main(ns.trace_dir, ns.script, args, ns.wait, ns.warmup, ns.active)
    elif ns.cmd == "collectives":
        collectives_main(ns.out, ns.minbytes, ns.maxbytes, ns.factor, ns.ops.split(","))
    else:
        env_main(ns.out)


if __name__ == "__main__":
    main()
