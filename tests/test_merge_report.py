"""tracing.merge (+ the `merge` command) and phantora_prof.report."""
from __future__ import annotations

import gzip
import json
from collections import Counter

import click
import orjson
import pytest
from click.testing import CliRunner

from phantora_prof.merge_cli import merge_cmd
from phantora_prof.report import ReportError, print_report_table, write_report
from synthetic_traces import synthetic_run
from tracing.kineto import load_trace, write_kineto
from tracing.merge import MergeError, merge_kineto


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "traces"
    traces = synthetic_run(3, steps=3)
    for tr in traces:
        write_kineto(tr, d / f"rank{tr.rank}.pt.trace.json.gz")
    return d, traces


def test_merge_ranks_become_processes(run_dir, tmp_path):
    d, traces = run_dir
    out = merge_kineto(d, tmp_path / "merged.json")
    doc = load_trace(out)
    ev = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"
             and isinstance(e["pid"], int)}
    assert names == {1000: "rank 0 CPU", 1001: "rank 0 GPU 0", 2000: "rank 1 CPU", 2001: "rank 1 GPU 0",
                     3000: "rank 2 CPU", 3001: "rank 2 GPU 0"}
    assert {m["rank"] for m in doc["mergedRanks"]} == {0, 1, 2} and "distributedInfo" not in doc
    # every rank's events are there, on its own pids, at the same times
    for tr in traces:
        src = load_trace(d / f"rank{tr.rank}.pt.trace.json.gz")["traceEvents"]
        top = (tr.rank + 1) * 1000
        want = Counter((e["cat"], e["name"], e["ts"], e["dur"]) for e in src
                       if e.get("ph") == "X" and isinstance(e.get("pid"), int))
        got = Counter((e["cat"], e["name"], e["ts"], e["dur"]) for e in ev
                      if e.get("ph") == "X" and isinstance(e.get("pid"), int) and top <= e["pid"] < top + 1000)
        assert got == want
    # flow ids unique per rank: each (cat, id) has exactly one start and one end
    flows = Counter((e["cat"], e["id"], e["ph"]) for e in ev if e.get("ph") in ("s", "f"))
    assert flows and set(flows.values()) == {1}
    assert len(flows) == 2 * sum(len(t.flows) for t in traces)
    assert not [e for e in ev if e.get("ph") == "M" and e.get("pid") in range(16)]  # kineto's unused GPU pids


def test_merge_gz_deterministic_and_shift(tmp_path, run_dir):
    d, traces = run_dir
    a = merge_kineto(sorted(d.iterdir()), tmp_path / "a" / "m.json.gz")
    b = merge_kineto(d, tmp_path / "b" / "m.json.gz")
    assert a.read_bytes() == b.read_bytes() and a.read_bytes()[:2] == b"\x1f\x8b"
    # a rank whose base time is 1 ms later is shifted by 1000 us
    tr = traces[1]
    tr.base_time_ns += 1_000_000
    e = tmp_path / "shifted"
    write_kineto(traces[0], e / "r0.json")
    write_kineto(tr, e / "r1.json")
    ev = load_trace(merge_kineto(e, tmp_path / "s.json"))["traceEvents"]
    first0 = min(x["ts"] for x in ev if x.get("ph") == "X" and x.get("pid") == 1000)
    first1 = min(x["ts"] for x in ev if x.get("ph") == "X" and x.get("pid") == 2000)
    assert first1 - first0 == pytest.approx(1000.037)


def test_merge_errors(tmp_path, run_dir):
    d, _ = run_dir
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MergeError, match="holds no"):
        merge_kineto(empty, tmp_path / "x.json")
    with pytest.raises(MergeError, match="rank 0 appears twice"):
        merge_kineto([d / "rank0.pt.trace.json.gz", d / "rank0.pt.trace.json.gz"], tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists() and not list(tmp_path.glob(".*tmp"))

    runner = CliRunner()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rank0.json").write_text("{not json")
    for args, msg in (([str(bad), "-o", str(tmp_path / "m.json")], "not valid JSON"),
                      ([str(tmp_path / "nope"), "-o", str(tmp_path / "m.json")], "no such file or directory"),
                      ([str(empty), "-o", str(tmp_path / "m.json")], "holds no .json")):
        res = runner.invoke(merge_cmd, args)
        assert res.exit_code == 1, res.output
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error: ") and msg in lines[0]
    res = runner.invoke(merge_cmd, [str(d), "-o", str(tmp_path / "ok.json")])
    assert res.exit_code == 0 and (tmp_path / "ok.json").exists()
    res = runner.invoke(merge_cmd, [str(d), "-o", str(tmp_path / "ok.pftrace")])
    assert res.exit_code == 0 and (tmp_path / "ok.pftrace").read_bytes()[:1] == b"\x0a"
    res = runner.invoke(merge_cmd, [str(d / "rank1.pt.trace.json.gz"), str(d / "rank1.pt.trace.json.gz"),
                                    "-o", str(tmp_path / "dup.pftrace")])
    assert res.exit_code == 1 and "rank 1 appears twice" in res.output and not (tmp_path / "dup.pftrace").exists()
    assert isinstance(merge_cmd, click.Command) and merge_cmd.name == "merge"


def test_report_from_rank_traces_and_paths(tmp_path, run_dir):
    d, traces = run_dir
    pytest.importorskip("matplotlib")
    links = {"node0-nic0 up": [(0, 0.0), (2_500_000, 0.8), (2_650_000, 0.0)]}
    s = write_report(None, {t.rank: t for t in traces}, tmp_path / "rep", link_utilization=links, gpu="h200")
    doc = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert doc == json.loads(json.dumps(s))
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2]
    r0 = doc["ranks"][0]
    assert r0["step_source"] == "ProfilerStep" and r0["steps_found"] == 3
    assert r0["compute_ms"] > 0 and r0["comm_exposed_ms"] > 0 and r0["idle_ms"] >= 0
    total = r0["compute_ms"] + r0["comm_exposed_ms"] + r0["other_gpu_ms"] + r0["idle_ms"]
    assert total == pytest.approx(r0["step_time_ms"], abs=1e-3)
    assert r0["peak_allocated_bytes"] == max(i.args["Total Allocated"] for i in traces[0].instants)
    assert r0["mfu"] is None
    assert sorted(doc["plots"]) == ["link_utilization.png", "memory.png", "step_breakdown.png"]
    for p in doc["plots"]:
        assert (tmp_path / "rep" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the same from the files on disk, without plots; no link data -> no link plot
    s2 = write_report(None, d, tmp_path / "rep2", plots=False)
    assert [r["step_time_ms"] for r in s2["ranks"]] == [r["step_time_ms"] for r in s["ranks"]]
    assert s2["plots"] == []
    with pytest.raises(ReportError, match="no traces"):
        write_report(None, None, tmp_path / "rep3")
    from rich.console import Console

    console = Console(record=True, width=200)
    print_report_table(s, console)
    text = console.export_text()
    assert "exposed comm." in text and f"{r0['step_time_ms']:,.2f} ms" in text


def test_report_uses_run_result(tmp_path, run_dir):
    from phantora_prof.launcher import RankSummary, RunResult

    d, traces = run_dir
    ranks = [RankSummary(r, 0, 10_000_000, 5_000_000, 100, 20, 0, 0, d / f"rank{r}.pt.trace.json.gz",
                         peak_allocated=123, peak_reserved=456) for r in range(3)]
    s = write_report(RunResult(0, ranks, 1.5), None, tmp_path / "rep", plots=False)
    assert [r["peak_allocated_bytes"] for r in s["ranks"]] == [123] * 3
    assert s["ranks"][2]["run"]["kernels"] == 20 and s["run"]["exit_code"] == 0


def test_merged_file_is_valid_json(tmp_path, run_dir):
    d, _ = run_dir
    out = merge_kineto(d, tmp_path / "m.json.gz")
    doc = orjson.loads(gzip.decompress(out.read_bytes()))
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] == "ms"


def test_report_of_a_short_run_finds_its_training_steps_and_draws_memory(cli):
    """The README's DDP example, 3 steps, no ProfilerStep annotations: the report's steps are
    the training steps (as long as the script's own step times), memory.png is drawn from the
    simulator's samples, and run.pftrace has the memory counters of the whole run."""
    import re
    import sys

    from conftest import REPO
    from test_perfetto import Decoded

    r = cli("--nproc-per-node", "2", "--out", "t", "--report", "rep", sys.executable,
            str(REPO / "examples" / "ddp" / "train.py"), "--steps", "3", "--layers", "2", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    printed = [float(t) for t in re.findall(r"\[rank0\]: rank 0 step \d+ .* time_ms ([0-9.]+)", r.stdout)]
    assert len(printed) == 3
    summary = json.loads((cli.cwd / "rep" / "summary.json").read_text())
    for fig in summary["ranks"]:
        assert fig["step_source"] == "detected" and fig["steps_found"] == 2 and fig["steps_reliable"]
        # a detected step runs from the end of one optimizer step to the next (the script times
        # from one synchronize to the next): the same length within a few percent
        assert 0.9 * printed[-1] < fig["step_time_ms"] < 1.1 * printed[-1], (fig["step_time_ms"], printed)
        assert not fig["notes"]
        assert fig["peak_allocated_bytes"] > 1 << 30
    assert sorted(summary["plots"]) == ["memory.png", "step_breakdown.png"]
    assert (cli.cwd / "rep" / "memory.png").stat().st_size > 10_000
    d = Decoded((cli.cwd / "t" / "run.pftrace").read_bytes())
    counters = {t.name: u for u, t in d.tracks.items() if t.name.startswith("GPU 0 memory")}
    assert set(counters) == {"GPU 0 memory allocated", "GPU 0 memory reserved"}  # per rank (2 tracks each)
    values = [v for u, vals in d.counters.items() for _, v in vals]
    assert len(values) > 1000 and max(values) > 1 << 30
