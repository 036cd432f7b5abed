"""Small point-to-point messages (send/recv, send/recv_object_list) carry their real values
between the simulated ranks, as small collectives do (runtime/dispatch/values.py `p2p`): torch's
pipeline schedules decide static/dynamic shape inference from a vote passed with send/recv
and exchange activation metadata as pickled objects before the first step."""
from __future__ import annotations

import sys
from pathlib import Path

PY = sys.executable
PROBE = Path(__file__).resolve().parent / "scripts" / "p2p_values_probe.py"


def test_small_p2p_values_two_ranks(cli):
    r = cli("--nproc-per-node", "2", "--no-trace", PY, str(PROBE), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[rank0]: cat [3, 4]" in r.stdout  # cat of a list of small tensors keeps values
    assert "[rank1]: vote got 5" in r.stdout
    assert "[rank0]: vote back 30" in r.stdout  # 5 * 6, computed on rank 1 and sent back
    assert "[rank1]: object {'shape': (8, 2048, 256), 'dtype': 'bf16'}" in r.stdout
    assert "returned placeholders" not in r.stderr
