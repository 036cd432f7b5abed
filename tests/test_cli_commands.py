"""The CLI's helper subcommands: collective, validate, plot, calibrate (its errors), --help."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REPO, reference_trace
from phantora_prof.cli import cli


def test_collective_prints_an_nccl_tests_table():
    r = CliRunner().invoke(cli, ["collective", "all_reduce", "--nnodes", "1", "--nproc-per-node", "8",
                                 "-b", "1M", "-e", "1G", "-f", "32"])
    assert r.exit_code == 0, r.output
    rows = [line.split() for line in r.output.splitlines() if re.match(r"\s+\d", line)]
    assert [int(row[0]) for row in rows] == [1 << 20, 32 << 20, 1 << 30]
    busbw = [float(row[7]) for row in rows]
    assert busbw == sorted(busbw)  # bandwidth grows with size
    assert 300 < busbw[-1] < 500  # one DGX H100 node: ~360-480 GB/s bus bandwidth at 1 GiB
    assert "Avg bus bandwidth" in r.output


def test_collective_bad_cluster_is_a_clear_error():
    r = CliRunner().invoke(cli, ["collective", "all_reduce", "--cluster", "nope"])
    assert r.exit_code == 2
    assert "unknown cluster 'nope'" in r.output


def test_validate_reference_and_help():
    runner = CliRunner()
    r = runner.invoke(cli, ["validate", str(reference_trace("streams"))])
    assert r.exit_code == 0 and r.output.strip().endswith(": ok")
    r = runner.invoke(cli, ["--help"])
    assert r.exit_code == 0
    assert "phantora-prof python examples/gpt/train.py" in r.output
    for sub in ("diff", "validate", "collective"):
        assert sub in r.output


def test_torchrun_help_and_top_level_help_name_torchrun():
    r = CliRunner().invoke(cli, ["torchrun", "--help"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("Usage: phantora-prof [OPTIONS] torchrun [TORCHRUN OPTIONS] SCRIPT")
    r = CliRunner().invoke(cli, ["torchrun", "--nproc-per-node", "8", "-h"])
    assert r.exit_code == 0 and "--nproc-per-node" in r.output
    r = CliRunner().invoke(cli, ["--help"])
    assert r.exit_code == 0 and "torchrun [TORCHRUN OPTIONS] SCRIPT" in r.output
    assert "phantora-prof torchrun --standalone --nproc-per-node=8" in r.output


def test_plot_draws_a_timeline_of_rank_traces(tmp_path):
    import shutil

    pytest.importorskip("matplotlib")
    real = Path(__file__).parent / "data" / "real" / "h200x2" / "traces"
    for r in (0, 1):
        shutil.copy(real / f"pp_rank{r}.pt.trace.json.gz", tmp_path / f"rank{r}.pt.trace.json.gz")
    out = tmp_path / "t.png"
    r = CliRunner().invoke(cli, ["plot", str(tmp_path), str(out), "--window-ms", "0", "50"])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = CliRunner().invoke(cli, ["plot", str(tmp_path / "t.png"), str(out)])
    assert r.exit_code == 2  # not a folder


def test_calibrate_commands_need_the_reference_data(tmp_path, monkeypatch):
    monkeypatch.setenv("PHANTORA_REFERENCE", str(tmp_path / "nowhere"))
    for cmd in ("kernels", "op-children", "host-costs", "cost-report"):
        r = CliRunner().invoke(cli, ["calibrate", cmd, "--check"] if cmd != "cost-report" else ["calibrate", cmd])
        assert r.exit_code == 2, (cmd, r.output)
        assert "--reference" in r.output and "PHANTORA_REFERENCE" in r.output and "nowhere" in r.output


def test_calibrate_families_add_keeps_the_points_already_there(tmp_path):
    """`calibrate families --add` adds a new sweep's points to those of sweeps whose traces are
    not kept, and refuses a trace already in the file."""
    import gzip
    import json

    from phantora_prof.calibrate import families

    kernel = ("kernel", "k", [1, 1, 1], [32, 1, 1], 16, 0, 0, "cudaLaunchKernel", 5000)
    old = tmp_path / "fam.json.gz"
    families.write(families.build([{"op": "relu", "key": "float32|c", "w": 1000.0, "t": 5000, "shape": [4],
                                    "kernels": [kernel]}], ["old.pt.trace.json.gz"]), old)
    trace = tmp_path / "new.pt.trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "sweep:{}", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]}).encode()))
    r = CliRunner().invoke(cli, ["calibrate", "families", "--add", "--out", str(old), str(trace)])
    assert r.exit_code == 0, r.output
    doc = families.read(old)
    assert doc["sources"] == ["old.pt.trace.json.gz", "new.pt.trace.json.gz"]
    assert [p["t"] for p in families.load_points(doc)] == [5000]
    r = CliRunner().invoke(cli, ["calibrate", "families", "--add", "--out", str(old), str(trace)])
    assert r.exit_code == 2 and "new.pt.trace.json.gz already in" in r.output


def test_calibrate_families_refuses_traces_of_another_gpu(tmp_path):
    """A sweep's trace names the GPU it ran on (deviceProperties): filing an H100 sweep in the
    H200's table (the default --gpu) is refused, naming the trace and its GPU."""
    import gzip
    import json

    trace = tmp_path / "sw.pt.trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps({"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
                                                "traceEvents": []}).encode()))
    r = CliRunner().invoke(cli, ["calibrate", "families", "--out", str(tmp_path / "f.json.gz"), str(trace)])
    assert r.exit_code == 2 and "sw.pt.trace.json.gz (h100)" in r.output and "--gpu h200" in r.output


def test_busy_fraction_counts_overlapping_streams_once():
    """cuDNN's per-group kernels on its own streams overlap: a point keeps the time they span."""
    from phantora_prof.calibrate.families import busy_fraction
    from phantora_prof.calibrate.trace_ops import GpuAct

    def act(stream, start, dur):
        return GpuAct("kernel", "k", "cudaLaunchKernel", dur, stream=stream, start_ns=start)
    assert busy_fraction([act(7, 0, 100), act(7, 100, 100)]) == 1.0
    assert busy_fraction([act(13, 0, 100), act(14, 20, 100), act(15, 300, 50)]) == pytest.approx(170 / 250)


def test_no_spinner_in_front_of_the_scripts_lines_in_a_terminal(tmp_path):
    """In a terminal the ranks write the script's lines straight to it, past rich's live status
    line, which was then left in front of them ('⠦ simulating...iter 1000'). With the script's
    output on a terminal there is no status line; the summary still comes."""
    import pty

    script = tmp_path / "loop.py"
    script.write_text("import time, torch\nx = torch.ones(8, device='cuda')\n"
                      "for i in range(3):\n    x = x + 1\n    print('iter', i, flush=True)\n    time.sleep(0.3)\n")
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdout and stderr on the pty, as in a terminal
        os.chdir(tmp_path)
        os.environ["PYTHONPATH"] = str(REPO)
        os.execv(sys.executable, [sys.executable, "-m", "phantora_prof", "--no-trace", "python", str(script)])
    chunks = []
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the pty
            break
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode(errors="replace")
    assert os.WEXITSTATUS(status) == 0, text[-2000:]
    assert "iter 2" in text and "simulated H200 run" in text
    assert "simulating..." not in text


def test_calibrate_families_add_replaces_re_measured_points():
    """A sweep run again replaces the points of the same op, class and shape (the old rnn
    points summed cuDNN's overlapping streams); other points stay."""
    from phantora_prof.calibrate import families

    def pt(op, shape, t):
        return {"op": op, "key": "float32|c|lstm|float32", "w": 1000.0, "t": t, "shape": shape, "kernels": []}
    old = [pt("_cudnn_rnn_backward", [64, 256, 1024], 17370), pt("_cudnn_rnn_backward", [32, 64, 256], 800),
           pt("_cudnn_rnn", [64, 256, 1024], 8400)]
    new = [pt("_cudnn_rnn_backward", [64, 256, 1024], 11700)]
    kept, replaced = families.superseded(old, new)
    assert replaced == 1 and [p["t"] for p in kept] == [800, 8400]
