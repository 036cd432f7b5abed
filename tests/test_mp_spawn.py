"""Scripts that start their own ranks with torch.multiprocessing.spawn (runtime/patches/mp_spawn.py):
run as one rank, the CLI simulates as many ranks as the script asks for; its output reads as one
parent and N children, and errors and exit codes pass through."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

SCRIPT = str(Path(__file__).parent / "scripts" / "mp_spawn.py")
PY = sys.executable


def test_mp_spawn_script_runs_as_that_many_simulated_ranks(cli):
    r = cli("--out", "out", PY, SCRIPT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    # the parent's lines once, the children's once each, the parent's last line after theirs
    assert lines[0] == "parent starts" and lines[-1] == "parent done", r.stdout
    assert sorted(lines[1:-1]) == [f"worker {i} of 3 on {i}: sum 6" for i in range(3)], r.stdout
    traces = sorted((cli.cwd / "out").glob("rank*.pt.trace.json.gz"))
    assert [t.name for t in traces] == [f"rank{i}.pt.trace.json.gz" for i in range(3)]
    info = json.loads(gzip.decompress(traces[1].read_bytes()))["distributedInfo"]
    assert info["rank"] == 1 and info["world_size"] == 3
    assert "mp_spawn" not in json.dumps(info)  # the simulator's join group is not the program's


def test_mp_spawn_child_error_fails_the_run_with_its_traceback(cli):
    r = cli("--no-trace", PY, SCRIPT, "fail", timeout=300)
    assert r.returncode == 1
    assert "ValueError: worker 1 failed on purpose" in r.stderr
    assert r.stdout.count("parent starts") == 1 and "parent done" not in r.stdout


def test_mp_spawn_under_nproc_per_node_runs_fn_in_each_rank(cli):
    r = cli("--no-trace", "--nproc-per-node", "3", PY, SCRIPT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    for i in range(3):
        assert f"[rank{i}]: worker {i} of 3 on {i}: sum 6" in r.stdout, r.stdout
    assert r.stdout.count("parent done") == 1  # only rank 0 goes on as the parent
