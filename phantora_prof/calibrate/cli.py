"""`phantora-prof calibrate ...`: rebuild the measured model data from real-GPU measurements.

Shipped model data (phantora_prof/cost/data), each with `--check` where its inputs are at hand:

    phantora-prof calibrate kernels [--check]                                  # h200_kernels.json
    phantora-prof calibrate op-children [--check]                              # op_children.json
    phantora-prof calibrate host-costs [--check]                               # host_costs.json
    phantora-prof calibrate families SWEEP.pt.trace.json.gz ... [--gpu h100] [--out FILE]   # <gpu>_families.json.gz
    phantora-prof calibrate errors TRACE ... [--out FILE]                      # source_errors.json
    phantora-prof calibrate split-k-observed TRACE ... [--gpu G] [--out FILE]  # split_k_observed.json
    phantora-prof calibrate triton REAL.jsonl SIM.jsonl ... [--out FILE]       # triton_h200.json
    phantora-prof calibrate compiled-host SIM.log REAL.log ... [--write]       # host_model.json compiled_calls
    phantora-prof calibrate pad-mm REAL.txt SIM.log [--write]                   # profiles/h200.json pad_mm_ratio
    phantora-prof calibrate cuda-graphs SIM.log REAL.log [--write]             # host_model.json cuda_graphs
    phantora-prof calibrate schema-args [--check]                              # aten_arg_positions.json
    phantora-prof calibrate host --measured DIR [--out FILE]                   # a host profile (hosts/*.json)

Reports (model vs measured; nothing written unless asked):

    phantora-prof calibrate cost-report [gpt_small gpt_b32 ...] [--ops]        # GPU time per op class
    phantora-prof calibrate contention measure|replay TRACE ...                # NCCL vs compute kernels
    phantora-prof calibrate nccl-ramp COLLECTIVES.json                         # netsim/ramp.py's constants
    phantora-prof calibrate compare-real collectives|steps ...                 # tests/data/real numbers

Commands that read the reference H200 traces or workloads take `--reference DIR` (the folder
with h200/ and workloads/; default $PHANTORA_REFERENCE, else ../shared/reference beside the
repository). Each writes deterministic output from its inputs; each module's docstring says
what is measured where and how it is fitted. The measurements themselves run on a GPU machine
with plain torch: phantora_prof/measure/ (`python -m phantora_prof.measure.<script>`).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from phantora_prof.calibrate.reference import require_reference

DATA = Path(__file__).resolve().parents[1] / "cost" / "data"


def _reference(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path:
    try:
        return require_reference(value)
    except FileNotFoundError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


def reference_option(f):
    """--reference DIR: the reference data folder (h200/ traces, workloads/), resolved or a usage error."""
    return click.option("--reference", type=click.Path(file_okay=False, path_type=Path), callback=_reference,
                        help="The reference data folder (h200/<run>/trace.pt.trace.json.gz, workloads/gpt.py); "
                             "default $PHANTORA_REFERENCE, else ../shared/reference beside the repository.")(f)


def _check_or_write(out: Path, fresh: bytes, check: bool, regenerate: str) -> None:
    """--check: exit 1 when `out` differs from `fresh`; else write it."""
    if check:
        if not out.exists() or out.read_bytes() != fresh:
            click.echo(f"{out} is stale: run {regenerate}", err=True)
            sys.exit(1)
        click.echo(f"{out} is fresh")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(fresh)
    tmp.replace(out)
    click.echo(f"wrote {out} ({len(fresh)} bytes)")


@click.group("calibrate")
def calibrate() -> None:
    """Rebuild model data from measurements made on a real GPU (see each command's help)."""


@calibrate.command("families")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--gpu", default="h200", show_default=True,
              help="GPU the sweep ran on (h200: the reference table; another GPU's table answers for that GPU "
                   "first, and for classes the H200 never measured)")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="output file  [default: cost/data/<gpu>_families.json.gz]")
@click.option("--add", "add", is_flag=True,
              help="keep the points already in --out (sweeps whose traces are not kept) and add these traces'; "
                   "a new point of an op, class and shape the file already has replaces the old one (a re-measurement)")
@click.option("--ops", default="",
              help="comma-separated aten op names: keep only their points (a sweep of one family also times the "
                   "small ops around it, too few points to answer for those ops' other shapes)")
def families_cmd(traces: tuple[Path, ...], gpu: str, out: Path | None, add: bool, ops: str) -> None:
    """Family curves from traces of `python -m phantora_prof.measure.sweep_families` (profiled on the GPU)."""
    from phantora_prof.calibrate import families
    from phantora_prof.cost import families as fam_model
    from phantora_prof.cost import get_gpu

    from phantora_prof.calibrate.split_k_observed import trace_gpu

    gpu_key = get_gpu(gpu).key
    # a trace names the GPU it ran on (deviceProperties): points of one GPU filed in another's
    # table would be carried between the GPUs as if measured on the wrong one
    wrong = [f"{t.name} ({ran})" for t in traces if (ran := trace_gpu(t)) is not None and ran != gpu_key]
    if wrong:
        raise click.UsageError(f"--gpu {gpu_key}, but these traces ran on another GPU: {', '.join(wrong)}; "
                               f"pass --gpu for the GPU they name, one table per GPU")
    out = out or fam_model.data_path(gpu_key)
    points, skipped = families.collect(list(traces), gpu_key)
    keep = {o.strip() for o in ops.split(",") if o.strip()}
    if keep:
        points = [p for p in points if p["op"] in keep]
        missing = sorted(keep - {p["op"] for p in points})
        if missing:
            raise click.UsageError(f"--ops: no points of {', '.join(missing)} in these traces")
    sources = [t.name for t in traces]
    if add:
        if not out.exists():
            raise click.UsageError(f"--add: {out} does not exist (nothing to add to)")
        old = families.read(out)
        if keep and set(old.get("ops_kept", ())) != keep:
            raise click.UsageError(f"--add: {out} kept ops {old.get('ops_kept')}, --ops says {sorted(keep)}")
        if old.get("gpu", "h200") != gpu_key:
            raise click.UsageError(f"--add: {out} holds {old.get('gpu')} points, these traces are {gpu_key}'s")
        again = sorted(set(old["sources"]) & set(sources))
        if again:
            raise click.UsageError(f"--add: {', '.join(again)} already in {out}")
        kept, replaced = families.superseded(families.load_points(old), points)
        if replaced:
            click.echo(f"{replaced} points of {out} re-measured by these traces: replaced")
        points = kept + points
        sources = old["sources"] + sources
    families.write(families.build(points, sources, gpu_key, sorted(keep) or None), out)
    click.echo(f"{len(points)} points ({sum(skipped.values())} calls skipped: {skipped or 'none'}) -> {out}")


@calibrate.command("split-k-observed")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--gpu", default=None, help="rebuild only this GPU's table (default: every GPU the traces ran on); "
              "each trace's GPU is read from its deviceProperties")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=DATA / "split_k_observed.json",
              show_default=True, help="output file (other GPUs' tables in it are kept)")
def split_k_observed_cmd(traces: tuple[Path, ...], gpu: str | None, out: Path) -> None:
    """cuBLAS's split-K choice per 16-bit GEMM shape, from real training profiles (one table per GPU)."""
    from phantora_prof.calibrate import split_k_observed
    from phantora_prof.cost import get_gpu
    from phantora_prof.errors import PhantoraError

    try:
        groups = split_k_observed.by_gpu(list(traces))
    except PhantoraError as e:
        raise click.UsageError(str(e)) from e
    if gpu is not None:
        key = get_gpu(gpu).key
        if key not in groups:
            raise click.UsageError(f"--gpu {gpu}: none of these traces ran on it (they ran on {', '.join(groups)})")
        groups = {key: groups[key]}
    for key, paths in groups.items():
        table = split_k_observed.build(paths, key)
        out.write_text(split_k_observed.dumps(split_k_observed.merge(out, table)))
        splits = sum(e["split"] for e in table["entries"])
        click.echo(f"{key}: {len(table['entries'])} GEMM shapes ({splits} split) from {len(paths)} traces -> {out}")


@calibrate.command("triton")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=DATA / "triton_h200.json",
              show_default=True)
@click.option("--gpu", default="h200", show_default=True, help="GPU the real files were measured on")
def triton_cmd(files: tuple[Path, ...], out: Path, gpu: str) -> None:
    """Triton kernel curve (torch.compile) from tools/holdout/triton_sweep.py: FILES are pairs REAL
    SIM (REAL measured on the GPU, SIM the same sweep under phantora-prof: its kernels' bytes), one
    pair per sweep; where two sweeps cover the same sizes, the later pair's kernels make the curve."""
    from phantora_prof.calibrate import triton
    from phantora_prof.cost.gpus import get_gpu

    if len(files) % 2:
        raise click.UsageError("give the files in pairs: REAL.jsonl SIM.jsonl [REAL.jsonl SIM.jsonl ...]")
    pairs = triton.pair_sweeps(list(zip(files[::2], files[1::2])))
    doc = triton.fit(pairs, gpu, get_gpu(gpu).hbm_bandwidth)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for cat, r in triton.residuals(pairs, doc).items():
        click.echo(f"{cat}: {r['n']} kernels, |error| median {100 * r['median_abs']:.1f}%, "
                   f"max {100 * r['max_abs']:.1f}%")
    click.echo(f"{len(pairs)} kernels paired -> {out}")


@calibrate.command("pad-mm")
@click.argument("real", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("sim", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--write", is_flag=True, help="store the fit in the h200 profile (default: print it)")
def pad_mm_cmd(real: Path, sim: Path, write: bool) -> None:
    """The cost-model ratio at which Inductor's GEMM padding pads (profile entry `pad_mm_ratio`), from
    tools/holdout/pad_probe.py: REAL its output on the GPU, SIM under phantora-prof --log-level debug."""
    from phantora_prof.calibrate import pad_mm

    ratio, agree, n = pad_mm.fit(pad_mm.read_real(real), pad_mm.read_sim(sim))
    click.echo(f"pad_mm_ratio {ratio}: {agree} of {n} decisions as on the GPU")
    if write:
        path = DATA / "profiles" / "h200.json"
        doc = json.loads(path.read_text())
        doc["kernel"]["pad_mm_ratio"] = {
            "value": ratio,
            "source": f"fitted (phantora-prof calibrate pad-mm): the cost model's unpadded / padded GEMM time above which "
                      f"Inductor's shape_padding pads; {agree} of {n} decisions of tools/holdout/pad_probe.py as the "
                      f"H200 made them (tools/holdout/real_h200/session17/pad_probe_h200.txt)"}
        path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        click.echo(f"-> {path}")


@calibrate.command("compiled-host")
@click.argument("sim", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("real", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--write", is_flag=True, help="store the fit in host_model.json (default: print it)")
def compiled_host_cmd(sim: Path, real: tuple[Path, ...], write: bool) -> None:
    """Host time of compiled graph calls from tools/holdout/compiled_host.py: SIM run under
    phantora-prof (with PLAN lines), REAL runs on the GPU host (host_model.json "compiled_calls")."""
    from phantora_prof.calibrate import compiled_host as ch

    path = DATA / "host_model.json"
    model = json.loads(path.read_text())
    current = model["compiled_calls"]
    consts, rows = ch.refit(sim, list(real), current)
    errs = [abs(f - r) / r for _, r, f in rows]
    for name, r, f in rows:
        click.echo(f"{name:10s} real {r:8.1f} us  fitted {f:8.1f} us  {100 * (f - r) / r:+6.1f}%")
    click.echo(f"mean |error| {100 * sum(errs) / len(errs):.1f}% over {len(rows)} cases")
    click.echo(json.dumps(consts))
    if write:
        model["compiled_calls"] = {"comment": current["comment"], **consts}
        path.write_text(json.dumps(model, indent=1, ensure_ascii=False) + "\n")
        click.echo(f"-> {path}")


@calibrate.command("cuda-graphs")
@click.argument("sim", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("real", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--write", is_flag=True, help="store the fit in host_model.json (default: print it)")
def cuda_graphs_cmd(sim: Path, real: Path, write: bool) -> None:
    """Host time of CUDA graph replays of compiled graphs from tools/holdout/cudagraph_host.py:
    SIM run under phantora-prof (with PLAN lines), REAL run on the GPU host (host_model.json
    "cuda_graphs"; its launch_ns, the launch's fixed part, is kept: the fit cannot separate it)."""
    from phantora_prof.calibrate import cuda_graphs as cg

    path = DATA / "host_model.json"
    model = json.loads(path.read_text())
    current = model["cuda_graphs"]
    try:
        consts, rows = cg.refit(sim, real, current)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    for group, name, r, f in rows:
        click.echo(f"{group:12s} {name:10s} real {r:9.1f} us  fitted {f:9.1f} us  {f - r:+8.1f} us")
    for group in dict.fromkeys(g for g, *_ in rows):
        errs = [abs(f - r) / max(abs(r), 1.0) for g, _, r, f in rows if g == group]
        click.echo(f"{group}: mean |error| {100 * sum(errs) / len(errs):.1f}% over {len(errs)} cases")
    click.echo(json.dumps(consts))
    if write:
        model["cuda_graphs"] = {"comment": current["comment"], "launch_ns": current["launch_ns"], **consts}
        path.write_text(json.dumps(model, indent=1, ensure_ascii=False) + "\n")
        click.echo(f"-> {path}")


@calibrate.command("errors")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=DATA / "source_errors.json",
              show_default=True)
def errors_cmd(traces: tuple[Path, ...], out: Path) -> None:
    """Per-source error of kernel times against real torch.profiler traces (for the error band)."""
    from phantora_prof.calibrate import errors
    from phantora_prof.errors import ConfigError

    try:
        doc = errors.build(list(traces))
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    errors.write(doc, out)
    click.echo(json.dumps(doc["sigma"]) + f" -> {out}")


@calibrate.command("host")
@click.option("--measured", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Logs of the host-bound workloads run on the real host (RESULT lines), one per case.")
@reference_option
@click.option("--speed", default=1.0, show_default=True, type=float,
              help="The measured host's speed against the tables (all host costs x SPEED) while fitting.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the fitted profile here.")
def host_cmd(measured: Path, reference: Path, speed: float, out: Path | None) -> None:
    """Fit a host profile to step times measured on a real host (simulates every case 3 times)."""
    from phantora_prof.calibrate import host

    if not (reference / "gpt.py").exists():  # the reference data folder, or (as before) its workloads/
        reference = reference / "workloads"
    real = {c: host.measured(c, measured) for c in host.CASES}
    cases = [c for c, v in real.items() if v is not None]
    sens = host.sensitivities(cases, reference, speed=speed)
    theta = host.fit(sens, real, tuple(c for c in host.FIT if c in cases))
    pred = host.predict(sens, theta)
    for c in cases:
        click.echo(f"{c:10s} real {real[c]:8.2f} ms  simulated {pred[c]:8.2f} ms  {pred[c] / real[c] - 1:+.1%}"
                   f"{'  (fitted)' if c in host.FIT else ''}")
    prof = host.profile(forward=theta["forward"], speed=speed, name=out.stem if out else "fit")
    prof["python"] = {"opcode_ns": theta["opcode_ns"]}
    if out:
        out.write_text(json.dumps(prof, indent=1) + "\n")
        click.echo(f"-> {out} (use with --host {out})")
    else:
        click.echo(json.dumps(prof))


@calibrate.command("schema-args")
@click.option("--check", is_flag=True, help="Exit 1 if the shipped table differs from the installed torch's.")
def schema_args_cmd(check: bool) -> None:
    """Positions of the aten arguments the cost model reads by name, from torch's schemas."""
    from phantora_prof.calibrate import schema_args

    doc = schema_args.build()
    if check:
        shipped = json.loads(schema_args.TABLE.read_text()) if schema_args.TABLE.exists() else {}
        diffs = schema_args.stale(doc, shipped)
        for d in diffs[:20]:
            click.echo(d, err=True)
        if diffs:
            raise SystemExit(1)
        click.echo(f"{schema_args.TABLE} is fresh")
        return
    schema_args.TABLE.write_text(schema_args.render(doc))
    click.echo(f"{sum(len(v) for v in doc['positions'].values())} positions -> {schema_args.TABLE}")


@calibrate.command("kernels")
@reference_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=DATA / "h200_kernels.json",
              show_default=True)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if --out differs from what the traces give.")
def kernels_cmd(reference: Path, out: Path, check: bool) -> None:
    """The exact-shape kernel table from the reference H200 traces (calibrate/kernel_table.py)."""
    from phantora_prof.calibrate import kernel_table

    for p in kernel_table.missing_traces(reference):
        click.echo(f"note: {p} not found: the table is built without it", err=True)
    table = kernel_table.build_table(reference=reference)
    click.echo(kernel_table.summary(table))
    _check_or_write(out, kernel_table.render(table), check, "phantora-prof calibrate kernels")


@calibrate.command("op-children")
@reference_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=DATA / "op_children.json",
              show_default=True)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if --out differs from a fresh table.")
def op_children_cmd(reference: Path, out: Path, check: bool) -> None:
    """What a CUDA build's kernels dispatch inside each captured op, from real traces (calibrate/op_children.py)."""
    from phantora_prof.calibrate import op_children

    paths = op_children.default_sources(reference)
    missing = [str(x) for x in paths if not x.exists()]
    if missing:
        click.echo("missing traces: " + ", ".join(missing), err=True)
        sys.exit(2)
    text = op_children.render(op_children.generate(paths, reference))
    t = json.loads(text)
    click.echo(f"{len(t['ops'])} ops, {len(t['trees'])} subtrees")
    _check_or_write(out, text.encode(), check, "phantora-prof calibrate op-children")


@calibrate.command("host-costs")
@reference_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=DATA / "host_costs.json",
              show_default=True)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if --out differs from what the traces give.")
@click.option("--api-ratio", type=float, default=None,
              help="Unprofiled / profiled duration of a CUDA API call (default: host_costs.API_RATIO).")
@click.option("--real-step-ms", type=float, default=None,
              help="The measured unprofiled gpt_small step (default: host_costs.REAL_STEP_NS).")
def host_costs_cmd(reference: Path, out: Path, check: bool, api_ratio: float | None,
                   real_step_ms: float | None) -> None:
    """Per-op host costs from the profiled gpt_small trace, rescaled to unprofiled time (calibrate/host_costs.py)."""
    from phantora_prof.calibrate import host_costs as H

    data = H.analyse(reference=reference)
    table = H.fit(data, int(real_step_ms * 1e6) if real_step_ms is not None else H.REAL_STEP_NS,
                  api_ratio if api_ratio is not None else H.API_RATIO)
    f = table["fit"]
    click.echo(f"factors: main thread {f['factor_main_thread']}, autograd thread {f['factor_autograd_thread']}; "
               f"node overhead {table['autograd_node_ns']} ns; defaults {table['default']}")
    click.echo(f"profiled per step (ns): {f['profiled_non_api_ns']}  host: {f['host_ns']}  "
               f"replayed step: {f['replayed_step_ns']}")
    click.echo(f"re-costed step (ns): {H.step_host_ns(data, table)}")
    _check_or_write(out, (json.dumps(table, indent=1, sort_keys=False) + "\n").encode(), check,
                    "phantora-prof calibrate host-costs")


@calibrate.command("cost-report")
@click.argument("workloads", nargs=-1)
@reference_option
@click.option("--gpu", default=None, help="the GPU the traces ran on (default: each trace's own, from its "
              "deviceProperties; a trace of another GPU is refused)")
@click.option("--ops", is_flag=True, help="Also list every op shape.")
def cost_report_cmd(workloads: tuple[str, ...], reference: Path, gpu: str | None, ops: bool) -> None:
    """Per op class, the model's GPU time per step against the reference traces (calibrate/cost_report.py).

    WORKLOADS: reference runs (default gpt_small gpt_b32) or trace files."""
    from phantora_prof.calibrate import cost_report
    from phantora_prof.errors import ConfigError

    for w in workloads or ("gpt_small", "gpt_b32"):
        try:
            click.echo(cost_report.report(w, gpu, ops, reference))
        except ConfigError as e:
            raise click.UsageError(str(e)) from None
        click.echo()


@calibrate.group("contention")
def contention_group() -> None:
    """How much NCCL kernels slow compute kernels, from real traces (calibrate/contention.py)."""


@contention_group.command("measure")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--sms", type=int, default=132, show_default=True)
@click.option("--gpu", default="h200", show_default=True, help="The GPU profile whose contention model is shown.")
def contention_measure_cmd(traces: tuple[str, ...], sms: int, gpu: str) -> None:
    """Per kernel category: kernels overlapped by NCCL vs alone, and the engine's k."""
    from phantora_prof.calibrate import contention

    contention.measure(list(traces), sms, gpu)


@contention_group.command("replay")
@click.argument("real", type=click.Path(exists=True, dir_okay=False))
@click.argument("sim", type=click.Path(exists=True, dir_okay=False))
@click.option("--sms", type=int, default=132, show_default=True)
@click.option("--gpu", default="h200", show_default=True, help="The GPU profile whose contention model is used.")
def contention_replay_cmd(real: str, sim: str, sms: int, gpu: str) -> None:
    """The real trace's compute kernels timed with the simulator's model under the real NCCL overlap."""
    from phantora_prof.calibrate import contention

    contention.replay(real, sim, sms, gpu)


@calibrate.command("nccl-ramp")
@click.argument("real_json", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--cluster", default="dgx-h200", show_default=True)
@click.option("--tolerance", type=float, default=0.15, show_default=True)
@click.option("--min-size", type=int, default=64 << 10, show_default=True)
def nccl_ramp_cmd(real_json: Path, cluster: str, tolerance: float, min_size: int) -> None:
    """Fit netsim's NCCL size ramp (netsim/ramp.py) to a measured collective sweep (calibrate/nccl_ramp.py)."""
    from phantora_prof.calibrate import nccl_ramp

    click.echo(nccl_ramp.fit(json.loads(real_json.read_text()), cluster, tolerance, min_size))


@calibrate.group("compare-real")
def compare_real_group() -> None:
    """Real reference data (measure/capture_real.py) against the simulation (calibrate/compare_real.py)."""


@compare_real_group.command("collectives")
@click.argument("real_json", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--cluster", default="dgx-h200", show_default=True)
@click.option("--band-json", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the measured error band per op here (tests/data/real/h200x2/netsim_error_band.json).")
def compare_collectives_cmd(real_json: Path, cluster: str, band_json: Path | None) -> None:
    """netsim's nccl-tests sweep against the real table, size by size."""
    from phantora_prof.calibrate import compare_real

    cmp = compare_real.compare_collectives(json.loads(real_json.read_text()), cluster)
    click.echo(compare_real.collectives_report(cmp))
    if band_json:
        band_json.write_text(compare_real.band_json(cmp, cluster))


@compare_real_group.command("steps")
@click.argument("real_log", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("sim_log", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--first", type=int, default=4, show_default=True)
def compare_steps_cmd(real_log: Path, sim_log: Path, first: int) -> None:
    """Median step time of two runs' `rank 0 step N ... time_ms T` lines (steps >= --first)."""
    from phantora_prof.calibrate import compare_real

    click.echo(compare_real.steps_report(real_log, sim_log, first))
