"""cuDNN RNNs hand back their output as a CUDA build does (runtime/device/cuda_fakes.py).

cuDNN writes a batch-first LSTM's output time-major and ATen returns it transposed, so it is
not contiguous, and the Linear that follows runs as a reshape copy, `mm` and an add of the
bias instead of one `addmm` (the real H200 trace of tools/holdout/zoo.py --model lstm, torch
2.11: `mm` then `add_`)."""
from __future__ import annotations

import gzip
import json

SCRIPT = '''
import torch
lstm = torch.nn.LSTM(64, 64, 2, batch_first=True).cuda()
head = torch.nn.Linear(64, 100).cuda()
x = torch.randn(8, 16, 64, device="cuda")
out, _ = lstm(x)
print("stride", tuple(out.stride()))
print("contiguous", out.is_contiguous())
head(out).sum().backward()
'''


def test_batch_first_lstm_output_is_time_major(cli):
    (cli.cwd / "rnn.py").write_text(SCRIPT)
    r = cli("--out", "traces", "--format", "kineto", "python", "rnn.py")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "stride (64, 512, 1)" in r.stdout and "contiguous False" in r.stdout
    doc = json.loads(gzip.open(cli.cwd / "traces" / "rank0.pt.trace.json.gz").read())
    names = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"}
    assert {"aten::clone", "aten::mm"} <= names and "aten::addmm" not in names
