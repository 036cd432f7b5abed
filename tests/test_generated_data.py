"""Generated model data is what its generator makes from the inputs in the repository.

Each shipped file under phantora_prof/cost/data says how it was made (`phantora-prof calibrate
...`, phantora_prof/calibrate/). Where the inputs are in the repository (or in ../shared, the
reference H200 traces: skipped without them), rebuilding the file here must give the shipped
bytes: h200_kernels.json and source_errors.json (here), op_children.json
(tests/test_op_tree.py), host_costs.json (tests/test_hostcost.py), aten_arg_positions.json
(tests/test_architecture.py). Where the raw inputs are not kept here (the sweeps run on the
H200, ~40 MB of traces: h200_families.json.gz, h200_measured.json; the host-bound runs the
host profiles were fitted on), the tests check what the files themselves allow: that they say
what made them, are in their generator's form, and hold together.
"""
from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path

import pytest

from conftest import REFERENCE

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "phantora_prof" / "cost" / "data"
HOLDOUT = ROOT / "tools" / "holdout" / "real_h200"

# Every file under cost/data and where it is checked. A new generated file needs a line here
# (and a check): test_every_data_file_is_checked fails otherwise.
CHECKED = {
    "h200_kernels.json": "test_kernel_table_is_fresh",
    "source_errors.json": "test_source_errors_are_fresh",
    "op_children.json": "tests/test_op_tree.py::test_children_table_is_fresh",
    "host_costs.json": "tests/test_hostcost.py::test_calibration_reproduces_the_json_and_the_measured_step",
    "aten_arg_positions.json": "tests/test_architecture.py::test_schema_argument_table_is_fresh",
    "h200_families.json.gz": "test_family_points_are_the_generators_output",
    "h100_families.json.gz": "test_h100_family_table_is_its_sweep",
    "h200_measured.json": "test_measured_sweep_records_its_runs",
    "host_model.json": "test_host_model_and_profiles_say_where_they_come_from",  # + test_compiled_call_host_costs_are_the_fit
    "hosts/h200.json": "test_host_model_and_profiles_say_where_they_come_from",
    "hosts/h200-2026-12-01.json": "test_host_model_and_profiles_say_where_they_come_from",
    "triton_h200.json": "test_triton_curve_is_the_fit_of_its_sweep",
    "skinny_gemm_h100.json": "test_skinny_gemm_table_is_its_sweep",
    "grouped_mm_h200.json": "test_grouped_mm_kernels_are_the_traces",
    "h200_split_k.json.gz": "test_split_k_sweep_is_its_generators_grid",
    "split_k_observed.json": "test_observed_split_k_is_the_kept_profiles",  # + the slow H200 rebuild
}
# hand-written model constants, each entry with its source (tests/test_profiles.py), not generated
NOT_GENERATED = ("profiles/",)


def test_every_data_file_is_checked():
    files = sorted(p.relative_to(DATA).as_posix() for p in DATA.rglob("*") if p.is_file()
                   and p.suffix in (".json", ".gz") and not p.relative_to(DATA).as_posix().startswith(NOT_GENERATED))
    assert [f for f in files if f not in CHECKED] == [], "a data file without a staleness check: add one"
    assert [f for f in CHECKED if not (DATA / f).exists()] == []


def test_grouped_mm_kernels_are_the_traces():
    """cost/data/grouped_mm_h200.json is what `python -m phantora_prof.calibrate.grouped_mm`
    reads from the H200 MoE profile (tools/holdout/real_h200/session20/moe/)."""
    from phantora_prof.calibrate import grouped_mm

    fresh = grouped_mm.table_from_trace(HOLDOUT / "session20" / "moe" / "moe_e8k2.pt.trace.json.gz")
    assert json.loads((DATA / "grouped_mm_h200.json").read_text()) == fresh, \
        "stale: rerun `python -m phantora_prof.calibrate.grouped_mm` (tools/holdout/real_h200/session20/README.md)"


def test_skinny_gemm_table_is_its_sweep():
    """cost/data/skinny_gemm_h100.json is what `python -m phantora_prof.calibrate.skinny_gemm` makes of
    the session-56 H100 sweep (tools/holdout/skinny_gemm_sweep.py)."""
    from phantora_prof.calibrate import skinny_gemm

    fresh = skinny_gemm.table_from_sweep(json.loads((HOLDOUT / "session56" / "skinny_gemm_h100.json").read_text()))
    assert json.loads((DATA / "skinny_gemm_h100.json").read_text()) == fresh, \
        "stale: rerun `python -m phantora_prof.calibrate.skinny_gemm tools/holdout/real_h200/session56/skinny_gemm_h100.json`"


def test_triton_curve_is_the_fit_of_its_sweep():
    """cost/data/triton_h200.json is what `phantora-prof calibrate triton` fits from the session-12
    and session-17 sweeps (measured on the H200, and the simulator's features of the same kernels)."""
    from phantora_prof.calibrate import triton
    from phantora_prof.cost.gpus import get_gpu

    files = [(HOLDOUT / "session12" / "triton_sweep_h200.jsonl", HOLDOUT / "session12" / "triton_sweep_sim.jsonl"),
             (HOLDOUT / "session17" / "triton_inmodel_h200.jsonl", HOLDOUT / "session17" / "triton_inmodel_sim.jsonl")]
    pairs = triton.pair_sweeps(files)
    fresh = triton.fit(pairs, "h200", get_gpu("h200").hbm_bandwidth)
    assert json.loads((DATA / "triton_h200.json").read_text()) == json.loads(json.dumps(fresh)), \
        "stale: rerun `phantora-prof calibrate triton` (tools/holdout/real_h200/session17/README.md)"


def test_source_errors_are_fresh():
    """cost/data/source_errors.json (the error band's per-source sigmas) is what
    `phantora-prof calibrate errors` measures with today's cost model on its listed traces."""
    from phantora_prof.calibrate import errors

    shipped_path = DATA / "source_errors.json"
    shipped = json.loads(shipped_path.read_text())
    paths = []
    for name in shipped["traces"]:
        for p in (REFERENCE / name / "trace.pt.trace.json.gz", HOLDOUT / "traces" / name,
                  HOLDOUT / "zoo" / "traces" / name):
            if p.exists():
                paths.append(p)
                break
        else:
            pytest.skip(f"trace {name} not available")
    fresh = errors.build(paths)
    assert fresh["sigma"] == shipped["sigma"], "stale: rerun `phantora-prof calibrate errors` on the listed traces"
    assert fresh["per_trace"] == shipped["per_trace"]


def test_kernel_table_is_fresh():
    """cost/data/h200_kernels.json is what `phantora-prof calibrate kernels` builds from the
    reference H200 traces, byte for byte."""
    from phantora_prof.calibrate import kernel_table

    reference = REFERENCE.parent
    if not REFERENCE.is_dir():
        pytest.skip(f"reference traces not available ({REFERENCE})")
    missing = kernel_table.missing_traces(reference)
    if missing:
        pytest.skip(f"reference trace {missing[0]} not available")
    table = kernel_table.build_table(reference=reference)
    assert table["sources"] == list(kernel_table.WORKLOADS)
    assert kernel_table.render(table) == (DATA / "h200_kernels.json").read_bytes(), \
        "stale: run `phantora-prof calibrate kernels`"


def test_family_points_are_the_generators_output():
    """h200_families.json.gz (`phantora-prof calibrate families` over sweeps of
    `python -m phantora_prof.measure.sweep_families`; the traces are not kept): it names its
    sweep traces, every point's measured time is the sum of its kernels' as the generator
    computes it, points are in the generator's order, and the interned names all resolve."""
    from phantora_prof.calibrate import families
    from phantora_prof.cost import families as F

    doc = families.read(DATA / "h200_families.json.gz")
    assert doc["schema"] == F.SCHEMA and doc["gpu"] == F.GPU_KEY
    assert doc["sources"] and all(s.endswith(".pt.trace.json.gz") for s in doc["sources"])
    assert len(set(doc["names"])) == len(doc["names"]) and len(set(doc["apis"])) == len(doc["apis"])
    fields = doc["kernel_fields"]
    name_i, api_i, dur_i = fields.index("name"), fields.index("api"), fields.index("dur_ns")
    assert list(doc["ops"]) == sorted(doc["ops"])
    n = 0
    for op, classes in doc["ops"].items():
        assert list(classes) == sorted(classes), op
        for key, pts in classes.items():
            assert pts == sorted(pts, key=lambda p: (p["w"], p["t"])), (op, key)
            for p in pts:
                n += 1
                assert p["w"] > 0 and p["k"], (op, key, p)
                assert p["t"] == sum(k[dur_i] for k in p["k"]), (op, key, p)
                assert all(0 <= k[name_i] < len(doc["names"]) and 0 <= k[api_i] < len(doc["apis"]) for k in p["k"])
    assert n > 1000
    points = families.load_points(doc)
    assert len(points) == n
    # the generator's build from these points gives the same ops (names re-interned)
    again = families.build(points, doc["sources"])

    def resolved(d):
        return {op: {key: [dict(p, k=[[d["names"][x] if j == name_i else d["apis"][x] if j == api_i else x
                                       for j, x in enumerate(k)] for k in p["k"]]) for p in pts]
                     for key, pts in classes.items()} for op, classes in d["ops"].items()}

    assert resolved(again) == resolved(doc)


@pytest.mark.slow
def test_h100_family_table_is_its_sweep():
    """(~27 s: it re-reads every kept H100 sweep, so it runs with `-m slow`, as the H200 split-K
    table's check.) h100_families.json.gz is `phantora-prof calibrate families --gpu h100 --ops ...` over the
    H100 sweeps kept in the repository (tools/holdout/real_h200/session32/sw11.pt.trace.json.gz:
    SyncBatchNorm's kernels and the fused RNN cells; session33/sweep/sw12-14: column sums, grouped
    1 x 1 and dilated convolutions; session47/sweep/sw25: dilated depthwise convolutions;
    session50/sweep/sw26-30: fp32 NCHW batch norm and convolutions; session51/sweep/sw31: cuDNN
    LSTM / GRU, with the busy time of their overlapping streams; session53/sweep/sw33: depthwise
    convolutions with a channel multiplier). The kept sweeps hold only what ran inside their
    `sweep:` ranges (tools/holdout/slim_trace.py --sweep-ranges-only: the same points)."""
    from phantora_prof.calibrate import families

    doc = families.read(DATA / "h100_families.json.gz")
    assert doc["gpu"] == "h100" and doc["ops_kept"]
    kept = [HOLDOUT / "session32", HOLDOUT / "session33" / "sweep", HOLDOUT / "session38" / "sweep",
            HOLDOUT / "session47" / "sweep", HOLDOUT / "session50" / "sweep", HOLDOUT / "session51" / "sweep",
            HOLDOUT / "session53" / "sweep"]
    paths = [next(d / s for d in kept if (d / s).exists()) for s in doc["sources"]]
    points, _ = families.collect(paths, "h100")
    points = [p for p in points if p["op"] in set(doc["ops_kept"])]
    fresh = families.build(points, doc["sources"], "h100", doc["ops_kept"])
    assert fresh == doc, "stale: rerun `phantora-prof calibrate families --gpu h100 ...` (real_h200/session33/README.md)"


def test_measured_sweep_records_its_runs():
    """h200_measured.json (`python -m phantora_prof.measure.measure_kernels`, a cold and a
    warm-L2 run merged; the raw runs are the file): it records the GPU, the software and both
    runs, every record has its warm time, and it is in the sweep's compact form."""
    from phantora_prof.cost import measured

    raw = (DATA / "h200_measured.json").read_bytes()
    doc = json.loads(raw)
    assert raw == json.dumps(doc, separators=(",", ":")).encode()  # as measure_kernels writes it
    assert doc["schema"] == measured.SCHEMA
    env = doc["env"]
    assert env["gpu"] == "NVIDIA H200" and env["torch"] and env["cuda"] and env["date"]
    assert env["l2"] == "cold" and "warm" in env["tw"] and env["repeats"] >= 5
    recs = doc["records"]
    assert len(recs) > 4000 and all("tw" in r for r in recs)
    assert {r["cls"] for r in recs} == {"gemm", "attention", "mem", "memcpy"}
    assert all(0 <= k[0] < len(doc["names"]) for r in recs for k in r["k"])
    assert all(r["t"] > 0 and r["tw"] > 0 and r["n"] >= 1 for r in recs)


def test_host_model_and_profiles_say_where_they_come_from():
    """host_model.json and hosts/*.json (fitted by `phantora-prof calibrate host` on host-bound
    runs, measured with `python -m phantora_prof.measure.host_probe`): every section says where
    its numbers come from, the profiles load, and the runs they were fitted on are here (the
    logs `calibrate host` reads; refitting simulates every case and is not repeated here)."""
    from phantora_prof import hostcost
    from phantora_prof.calibrate import host

    model = json.loads((DATA / "host_model.json").read_text())
    assert model["comment"]
    for name, section in model.items():
        if isinstance(section, dict):
            assert section.get("comment"), name
    names = hostcost.profile_names()
    assert set(names) == {p.stem for p in (DATA / "hosts").glob("*.json")}
    for name in names:
        prof = hostcost.load_profile(name)
        assert prof["name"] == name and prof["comment"], name
        assert set(prof["scale"]) <= {"all", "forward", "backward", "api", "cpu_ops", "python"}, name
        assert all(v > 0 for v in prof["scale"].values()), name
    # the reference host is the fitted one at another speed: the relative costs are shared
    fitted, reference = hostcost.load_profile("h200-2026-12-01"), hostcost.load_profile("h200")
    assert fitted["scale"]["forward"] == reference["scale"]["forward"]
    session = HOLDOUT / "session4"
    assert session.name in fitted["comment"] and session.name in model["python"]["comment"]
    fit_cases = {c: host.measured(c, session) for c in host.FIT}
    assert all(v is not None and v > 0 for v in fit_cases.values()), fit_cases
    assert (session / "host_probe.json").exists()


def test_compiled_call_host_costs_are_the_fit():
    """host_model.json "compiled_calls" is what `phantora-prof calibrate compiled-host` fits to
    the committed runs of tools/holdout/compiled_host.py (two on each of two H200 hosts, sessions
    13 and 18, one simulated)."""
    from phantora_prof.calibrate import compiled_host as ch

    shipped = json.loads((DATA / "host_model.json").read_text())["compiled_calls"]
    reals = [HOLDOUT / s / f"compiled_host_run{i}.log" for s in ("session18", "session13") for i in (1, 2)]
    assert "session18" in shipped["comment"] and "session13" in shipped["comment"]
    consts, rows = ch.refit(HOLDOUT / "session18" / "compiled_host_sim.log", reals, shipped)
    for k, v in consts.items():
        assert v == pytest.approx(shipped[k], rel=0.01, abs=50), k
    assert sum(abs(f - r) / r for _, r, f in rows) / len(rows) < 0.16


def test_cuda_graph_host_costs_are_the_fit():
    """host_model.json "cuda_graphs" is what `phantora-prof calibrate cuda-graphs` fits to the
    committed runs of tools/holdout/cudagraph_host.py (one on the H200 host, one simulated); the
    replays of inference graphs (the fit's cases) come within 10% on average."""
    from phantora_prof.calibrate import cuda_graphs as cg

    d = HOLDOUT / "session16"
    shipped = json.loads((DATA / "host_model.json").read_text())["cuda_graphs"]
    assert d.name in shipped["comment"]
    consts, rows = cg.refit(d / "cudagraph_host_sim.log", d / "cudagraph_host.log", shipped)
    for k, v in consts.items():
        assert v == pytest.approx(shipped[k], rel=0.01, abs=50), k
    steady = [abs(f - r) / r for group, case, r, f in rows if group == "steady" and "(held)" not in case]
    assert len(steady) == 10 and sum(steady) / len(steady) < 0.10


def test_nccl_ramp_constants_are_the_fit():
    """netsim/ramp.py's constants are what `phantora-prof calibrate nccl-ramp` fits to the real
    2 x H200 collective sweep (they are copied in by hand: this says when they drift)."""
    from netsim import ramp
    from phantora_prof.calibrate import nccl_ramp

    real = json.loads((ROOT / "tests" / "data" / "real" / "h200x2" / "collectives.json").read_text())
    report = nccl_ramp.fit(real)
    lines = dict(line.split(" = ", 1) for line in report.splitlines()[:3])
    assert lines["RAMP_BYTES"] == f"{ramp.RAMP_BYTES >> 10} << 10"
    assert float(lines["RAMP_EXPONENT"]) == ramp.RAMP_EXPONENT
    fitted = ast.literal_eval(lines["OWN_DATA_COST"])
    assert fitted == {op: ramp.OWN_DATA_COST[op] for op in fitted}


def test_pad_mm_ratio_is_the_fit_of_its_probe():
    """The h200 profile's `pad_mm_ratio` is what `phantora-prof calibrate pad-mm` fits from
    tools/holdout/pad_probe.py's decisions on the H200 and the cost model's times for them."""
    from phantora_prof.calibrate import pad_mm
    from phantora_prof.cost.profiles import load_profile

    probe = HOLDOUT / "session17"
    ratio, agree, n = pad_mm.fit(pad_mm.read_real(probe / "pad_probe_h200.txt"),
                                 pad_mm.read_sim(probe / "pad_probe_sim.txt"))
    assert load_profile("h200").pad_mm_ratio == ratio, \
        "stale: rerun `phantora-prof calibrate pad-mm ... --write` (tools/holdout/real_h200/session17/README.md)"
    assert agree >= 0.9 * n


def _kept_profiles(gpu: str) -> list[Path]:
    """The kept real profiles of one GPU, as each trace's deviceProperties name it (the H200
    reference traces only when they are here)."""
    from phantora_prof.calibrate import split_k_observed

    traces = sorted(HOLDOUT.rglob("*.pt.trace.json.gz")) + sorted(REFERENCE.glob("*/trace.pt.trace.json.gz"))
    return split_k_observed.by_gpu(traces).get(gpu, [])


def _observed_table(gpu: str) -> dict:
    from phantora_prof.calibrate import split_k_observed

    table = split_k_observed.build(_kept_profiles(gpu), gpu)
    return {"traces": table["traces"], "entries": table["entries"]}


@pytest.mark.slow
def test_observed_split_k_is_the_kept_profiles():
    """(~24 s, with `-m slow`.) cost/data/split_k_observed.json's H100 table is `phantora-prof calibrate split-k-observed
    --gpu h100` over the kept profiles whose deviceProperties name an H100."""
    shipped = json.loads((DATA / "split_k_observed.json").read_text())
    assert sorted(shipped) == ["h100", "h200"]
    assert shipped["h100"] == _observed_table("h100")


@pytest.mark.slow
def test_observed_split_k_h200_table_is_the_kept_profiles():
    """The H200 table: the other kept profiles and the reference traces (~20 s)."""
    if not REFERENCE.exists():
        pytest.skip("the reference H200 traces are not here")
    shipped = json.loads((DATA / "split_k_observed.json").read_text())
    assert shipped["h200"] == _observed_table("h200")


def test_split_k_sweep_is_its_generators_grid():
    """cost/data/h200_split_k.json.gz is `python -m phantora_prof.measure.split_k_sweep` on the H200
    (session 23): its calls are exactly the generator's grid, it says where it ran, and where it
    overlaps the GEMM sweep (data/h200_measured.json, another run) the two saw the same choice."""
    from phantora_prof.measure import split_k_sweep

    doc = json.loads(gzip.decompress((DATA / "h200_split_k.json.gz").read_bytes()))
    assert doc["schema"] == "phantora-split-k/1" and doc["gpu"] == "NVIDIA H200" and doc["torch"] and doc["cuda"]
    assert [(c["dtype"], c["layout"], c["m"], c["n"], c["k"]) for c in doc["calls"]] == \
        split_k_sweep.grid(["bf16", "fp16"])
    assert all(c["kernel"] and ("splitK" in c["kernel"]) == c["split"] for c in doc["calls"]
               if c["kernel"].startswith("nvjet"))  # nvjet names its split-K kernels
    choice = {(c["dtype"], c["layout"], c["m"], c["n"], c["k"]): c["split"] for c in doc["calls"]}
    measured = json.loads((DATA / "h200_measured.json").read_text())
    reduce_ids = {i for i, n in enumerate(measured["names"]) if "splitKreduce" in n}
    overlap = 0
    for r in measured["records"]:
        p = r["p"]
        key = (p.get("dtype"), p.get("layout"), p.get("m"), p.get("n"), p.get("k"))
        if r["cls"] == "gemm" and r["op"] == "mm" and p.get("b") == 1 and key in choice:
            overlap += 1
            assert any(k[0] in reduce_ids for k in r["k"]) == choice[key], key
    assert overlap > 100
