"""Host time of several host-bound workloads measured in one process, steps interleaved (issue #15).

A lease's host changes speed between runs and within one (session 34: two runs of one model on one
lease 0.5-1.3x apart, steps alternating 7.5 / 12.5 ms), so comparing host-bound models measured in
separate processes mixes the model's host cost with the host's mood. Here every case is built in
one process and each round runs one step of each case in turn: a slow spell hits all cases of a
round alike, and each case's time is read against the anchor's in the same round (the reference
gpt.py at batch 1 / seq 64: the workload the host model's per-op table was fitted on, whose step
the simulation matches on a host of the reference's speed; its forward / backward split it does
not: real_h200/session34/README.md).

    python tools/holdout/host_interleaved.py --gpt-dir DIR [--rounds 15] [--only CASES] [--out FILE]
    phantora-prof --gpu h100 python tools/holdout/host_interleaved.py --gpt-dir DIR --rounds 1 --out SIM.json
    python tools/holdout/host_interleaved.py --report SIM.json REAL.json [REAL.json ...]
    python tools/holdout/host_interleaved.py --gpt-dir DIR --profile-dir TRACES   # + one profiled step each
    python tools/holdout/host_interleaved.py --op-costs TRACES   # per-op host time against the host table

`--report` reads a simulated run (deterministic: one round) against real runs: per case and phase,
(simulated / anchor) / (real / anchor), the real ratio taken per round (median over rounds, mean
over the runs given), and the mean and largest |error| per phase.

Prints (and writes) `INTERLEAVED {case: {"forward": [ms per round], "backward": [...],
"optimizer": [...], "step": [...]}}` after `--warmup` untimed rounds. Cases: compare.py's
HOST_BOUND (zoo.py at host-bound sizes) and `gpt_b1` (DIR/gpt.py's model, --batch 1 --seq 64).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))


def gpt_b1_parts(gpt_dir: str) -> tuple[Callable[[], object], object]:
    """(forward returning the loss, optimizer) of the reference gpt.py at batch 1 / seq 64: its
    own model and fused AdamW (also optimizer_context.py's)."""
    import torch

    sys.path.insert(0, gpt_dir)
    import gpt  # noqa: E402  (the reference workload, not a package)

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    vocab, seq = 50304, 64
    model = gpt.GPT(vocab, seq, 768, 12, 12).to("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    x = torch.randint(0, vocab, (1, seq), device="cuda")
    y = torch.randint(0, vocab, (1, seq), device="cuda")
    return (lambda: model(x, y)), opt


def _gpt_b1(gpt_dir: str) -> Callable[[int], None]:
    """The reference gpt.py's step at batch 1 / seq 64 (its own model and optimizer)."""
    import zoo

    forward, opt = gpt_b1_parts(gpt_dir)
    return zoo._train_step(forward, opt)  # gpt.py's step: autocast forward, backward, step, zero_grad


def _zoo_step(argv: list[str]) -> Callable[[int], None]:
    import zoo

    a = zoo.parser().parse_args(argv)
    return zoo.build(a)[1]


PHASES = ("forward", "backward", "optimizer", "step")
ANCHOR = "gpt_b1"


def relative_errors(sim: dict, reals: list[dict]) -> dict[str, dict[str, float]]:
    """Per case (anchor left out) and phase: simulated over real, each relative to the anchor of its
    own run (real: per round, median over the rounds, mean over the runs)."""
    import statistics

    out = {}
    for case in sim:
        if case == ANCHOR:
            continue
        out[case] = {}
        for ph in PHASES:
            real = statistics.mean(statistics.median(a / b for a, b in zip(r[case][ph], r[ANCHOR][ph]))
                                   for r in reals)
            out[case][ph] = sim[case][ph][0] / sim[ANCHOR][ph][0] / real
    return out


def report(sim_path: str, real_paths: list[str]) -> None:
    import statistics

    with open(sim_path) as f:
        sim = json.load(f)
    reals = []
    for path in real_paths:
        with open(path) as f:
            reals.append(json.load(f))
    err = relative_errors(sim, reals)
    print(f"{'case':26s} " + " ".join(f"{ph:>9s}" for ph in PHASES) + "   (simulated / real, both relative to "
          f"{ANCHOR})")
    for case, by in err.items():
        print(f"{case:26s} " + " ".join(f"{by[ph]:9.3f}" for ph in PHASES))
    for ph in PHASES:
        e = [abs(by[ph] - 1) for by in err.values()]
        print(f"{ph:9s} mean |error| {100 * statistics.mean(e):5.1f}%  max {100 * max(e):5.1f}%")


def _profile_each(steps: dict, folder: str, first_step: int) -> None:
    """One profiled step of each case (after an unrecorded warm-up step), one trace per case."""
    import glob
    import shutil
    import tempfile

    import torch

    os.makedirs(folder, exist_ok=True)
    for name, step in steps.items():
        tmp = tempfile.mkdtemp()
        with torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                schedule=torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1), record_shapes=True,
                on_trace_ready=torch.profiler.tensorboard_trace_handler(tmp, worker_name=name, use_gzip=True)) as prof:
            for i in range(2):
                torch.cuda.synchronize()
                step(first_step + i)
                torch.cuda.synchronize()
                prof.step()
        found = glob.glob(os.path.join(tmp, "*.pt.trace.json.gz"))
        if found:
            shutil.move(found[0], os.path.join(folder, f"{name}.pt.trace.json.gz"))
        shutil.rmtree(tmp, ignore_errors=True)


def op_costs(folder: str, top: int = 25) -> dict:
    """Per-op host time of the profiled cases (--profile-dir) in the host model's units: each op's
    mean profiled time (calibrate/host_costs.py's `analyse`: a main-thread op with the Python gap
    before it, launches taken out) times the anchor's factor for its thread, the ratio of what the
    host table charges the reference's own ops to what they took in its profile of the same run
    (same process, same host: no speed to correct for). Printed beside the table's charge: which
    ops the table under- or over-charges in host-bound runs (issue #15). On simulated traces the
    anchor's factors are not 1 (forward ~0.9: the counted Python sits in the gaps; backward ~0.5:
    the per-node engine cost sits inside the nodes), so compare real cases with real anchors."""
    from collections import defaultdict

    from phantora_prof import hostcost
    from phantora_prof.calibrate.host_costs import analyse

    def means(path: str) -> dict:
        d = analyse(path)
        acc: dict = defaultdict(list)
        for s in d["steps"]:
            for i in s["insts"]:
                acc[(i.thread, i.name, bool(i.launches))].append(i.nonapi)
        n = len(d["steps"])
        return {k: (len(v) / n, sum(v) / len(v)) for k, v in acc.items()}

    def charge(key) -> float:
        thread, name, launches = key
        return hostcost.dispatch_ns(name, launches, backward=thread == "backward") / 1e3

    anchor = means(os.path.join(folder, f"{ANCHOR}.pt.trace.json.gz"))
    factor = {}
    for thread in ("forward", "backward"):
        ks = [k for k in anchor if k[0] == thread]
        factor[thread] = sum(anchor[k][0] * charge(k) for k in ks) / sum(anchor[k][0] * anchor[k][1] for k in ks)
    print(f"anchor factor (table / profiled): {factor}")
    out = {}
    for path in sorted(os.listdir(folder)):
        case = path.split(".pt.trace")[0]
        if case == ANCHOR or not path.endswith(".pt.trace.json.gz"):
            continue
        # ops over tensor lists are charged per listed tensor (hostcost.tensor_list_ns), not by the
        # per-op table this compares with: left out
        m = {k: v for k, v in means(os.path.join(folder, path)).items()
             if not k[1].startswith(("aten::_foreach", "aten::_fused"))}
        rows = [(n * (us * factor[k[0]] - charge(k)), k, n, us * factor[k[0]], charge(k)) for k, (n, us) in m.items()]
        measured = sum(n * c for _, _, n, c, _ in rows)
        table = sum(n * c for _, _, n, _, c in rows)
        out[case] = {"measured_us": measured, "table_us": table}
        print(f"{case}: measured {measured / 1e3:.2f} ms, table {table / 1e3:.2f} ms per step")
        for d, k, n, c, t in sorted(rows, key=lambda r: -abs(r[0]))[:top]:
            print(f"   {k[0]:8s} {k[1][:44]:44s} x{n:6.1f}  measured {c:7.1f} us  table {t:7.1f}  diff {d / 1e3:+.3f} ms")
    return out


def main() -> int:
    if sys.argv[1:2] == ["--report"]:
        report(sys.argv[2], sys.argv[3:])
        return 0
    if sys.argv[1:2] == ["--op-costs"]:
        op_costs(sys.argv[2])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpt-dir", required=True, help="folder of the reference gpt.py (and its common.py)")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--only", default=None, help="comma-separated cases (default: gpt_b1 and HOST_BOUND)")
    p.add_argument("--out", default=None)
    p.add_argument("--profile-dir", default=None,
                   help="after the timed rounds, profile one step of each case (after one warm-up step) as the "
                        "reference traces were (record_shapes), into DIR/<case>.pt.trace.json.gz: per-op host "
                        "times of host-bound runs on the same host as the reference's")
    a = p.parse_args()
    sys.path.insert(0, HERE)
    import torch

    import compare
    import phases

    names = a.only.split(",") if a.only else ["gpt_b1", *compare.HOST_BOUND]
    steps = {}
    for name in names:
        steps[name] = _gpt_b1(a.gpt_dir) if name == "gpt_b1" else _zoo_step(compare.CASES[name][1])
    marks: dict[str, float] = {}

    def mark(kind: str) -> None:  # a step's first optimizer step and backward, and their last ends
        t = time.perf_counter()
        if kind in ("opt0", "bwd0"):
            marks.setdefault(kind, t)
        else:
            marks[kind] = t

    phases.mark_phases(mark)
    out = {n: {"forward": [], "backward": [], "optimizer": [], "step": []} for n in names}
    for r in range(a.warmup + a.rounds):
        for name in names:
            torch.cuda.synchronize()
            marks.clear()
            t0 = time.perf_counter()
            steps[name](r)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            if r < a.warmup:
                continue
            rec = out[name]
            rec["forward"].append(round((marks["bwd0"] - t0) * 1e3, 4))
            rec["backward"].append(round((marks["bwd1"] - marks["bwd0"]) * 1e3, 4))
            rec["optimizer"].append(round((marks["opt1"] - marks["opt0"]) * 1e3, 4))
            rec["step"].append(round((t1 - t0) * 1e3, 4))
    if a.profile_dir:
        _profile_each(steps, a.profile_dir, a.warmup + a.rounds)
    text = json.dumps(out)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print("INTERLEAVED " + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
