"""Memory snapshots of the simulated GPU (runtime/device/memory_history.py): the pickle that
torch.cuda.memory._dump_snapshot writes, in torch's format, readable by torch's own tools."""
from __future__ import annotations

import gzip
import pickle
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent / "scripts" / "memory_history.py"
# the same script's snapshot on a real H200 (torch 2.11; tools/holdout/real_h200/session20/)
REAL = Path(__file__).resolve().parents[1] / "tools" / "holdout" / "real_h200" / "session20" / "memhist_real.pickle.gz"
PY = sys.executable


def test_memory_snapshot_of_a_simulated_step(cli):
    snap = cli.cwd / "snap.pickle"
    r = cli("--no-trace", PY, str(SCRIPT), str(snap), timeout=200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "oom caught" in r.stdout and "stopped True" in r.stdout
    allocated = int(r.stdout.split("allocated ")[1].split()[0])
    s = pickle.loads(snap.read_bytes())
    assert set(s) >= {"segments", "device_traces", "allocator_settings"}
    trace = s["device_traces"][0]
    actions = [e["action"] for e in trace]
    assert actions[0] == "segment_alloc" and {"alloc", "free_requested", "free_completed", "oom"} <= set(actions)
    # every alloc is balanced by its free at the same address and size, in order
    live: dict[int, int] = {}
    for e in trace:
        if e["action"] == "alloc":
            assert e["addr"] not in live
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            assert live.pop(e["addr"]) == e["size"]
    times = [e["time_us"] for e in trace]
    assert times == sorted(times)
    oom = next(e for e in trace if e["action"] == "oom")
    assert oom["size"] >= 1 << 50 and "device_free" in oom
    # the blocks still allocated are what memory_allocated() reports, each with the stack that made it
    blocks = [b for seg in s["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
    assert sum(b["size"] for b in blocks) == allocated
    line = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "LINE_OF_STEP" in text)
    step_allocs = [e for e in trace if e["action"] == "alloc" and e.get("frames")
                   and e["frames"][-1]["line"] == line]
    assert step_allocs, "no allocation attributed to the forward/backward line"
    # innermost first: torch.nn's Linear.forward above the script's line; none of the simulator's frames
    names = [f["filename"] for e in step_allocs for f in e["frames"]]
    assert any(n.endswith(str(Path("torch", "nn", "modules", "linear.py"))) for n in names)
    assert not any("phantora_prof" in n for n in names)
    # torch's own offline readers of snapshots take it (the plots need the network for their script)
    for command in ("stats", "trace"):
        out = subprocess.run([PY, "-m", "torch.cuda._memory_viz", command, str(snap)], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]


def test_allocator_actions_equal_a_real_h200_run_of_the_same_script(cli):
    """Every allocator action of the script (46: segments, allocations, frees, the release of
    cached segments before the out-of-memory error, the OOM), in order and size, as the real
    allocator did them on an H200, including the contiguous clones cuBLAS needs of the
    expanded gradient `.sum().backward()` gives the first backward GEMMs."""
    snap = cli.cwd / "snap.pickle"
    r = cli("--no-trace", PY, str(SCRIPT), str(snap), timeout=200)
    assert r.returncode == 0, r.stderr[-3000:]
    real = pickle.loads(gzip.decompress(REAL.read_bytes()))["device_traces"][0]
    sim = pickle.loads(snap.read_bytes())["device_traces"][0]
    assert [(e["action"], e["size"]) for e in sim] == [(e["action"], e["size"]) for e in real]
    assert set(sim[0]) == set(real[0])  # the same fields per entry
