"""`phantora-prof calibrate ...`: rebuild the measured model data from real-GPU measurements.

    phantora-prof calibrate families SWEEP.pt.trace.json.gz ... [--out FILE]   # cost/data/h200_families.json.gz
    phantora-prof calibrate errors TRACE ... [--out FILE]                      # cost/data/source_errors.json
    phantora-prof calibrate host --measured DIR --reference DIR [--out FILE]   # a host profile
    phantora-prof calibrate schema-args [--check]                              # cost/data/aten_arg_positions.json

Each writes deterministic output from its inputs; the module docstrings of families.py,
errors.py and host.py say what is measured where and how it is fitted.
"""
from __future__ import annotations

import json
from pathlib import Path

import click

DATA = Path(__file__).resolve().parents[1] / "cost" / "data"


@click.group("calibrate")
def calibrate() -> None:
    """Rebuild model data from measurements made on a real GPU (see each command's help)."""


@calibrate.command("families")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=DATA / "h200_families.json.gz",
              show_default=True)
def families_cmd(traces: tuple[Path, ...], out: Path) -> None:
    """Family curves from traces of tools/sweep_families.py (profiled on the GPU)."""
    from phantora_prof.calibrate import families

    points, skipped = families.collect(list(traces))
    families.write(families.build(points, [t.name for t in traces]), out)
    click.echo(f"{len(points)} points ({sum(skipped.values())} calls skipped: {skipped or 'none'}) -> {out}")


@calibrate.command("errors")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=DATA / "source_errors.json",
              show_default=True)
def errors_cmd(traces: tuple[Path, ...], out: Path) -> None:
    """Per-source error of kernel times against real torch.profiler traces (for the error band)."""
    from phantora_prof.calibrate import errors

    doc = errors.build(list(traces))
    errors.write(doc, out)
    click.echo(json.dumps(doc["sigma"]) + f" -> {out}")


@calibrate.command("host")
@click.option("--measured", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Logs of the host-bound workloads run on the real host (RESULT lines), one per case.")
@click.option("--reference", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="The reference workloads folder (gpt.py, common.py).")
@click.option("--speed", default=1.0, show_default=True, type=float,
              help="The measured host's speed against the tables (all host costs x SPEED) while fitting.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the fitted profile here.")
def host_cmd(measured: Path, reference: Path, speed: float, out: Path | None) -> None:
    """Fit a host profile to step times measured on a real host (simulates every case 3 times)."""
    from phantora_prof.calibrate import host

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
