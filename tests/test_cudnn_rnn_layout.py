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


AUTOCAST_SCRIPT = '''
import torch
lstm = torch.nn.LSTM(192, 48, batch_first=True, bidirectional=True).cuda()
x = torch.randn(32, 64, 192, device="cuda")
with torch.autocast("cuda", dtype=torch.bfloat16):
    out, (h, c) = lstm(x)
print("dtypes", out.dtype, h.dtype)
out.float().sum().backward()
print("grad", lstm.weight_ih_l0.grad.dtype)
with torch.autocast("cuda", dtype=torch.bfloat16, enabled=False):
    print("plain", lstm(x)[0].dtype)
'''


def test_a_cudnn_rnn_under_autocast_runs_in_fp16_with_its_weights_reflattened(cli):
    """A CUDA build's Autocast kernel of `_cudnn_rnn` (ATen's _cudnn_rnn_cast_reflatten) runs a
    cuDNN RNN in fp16 under any CUDA autocast, bf16 included: a new flat fp16 weight buffer, a view
    and a cast copy per weight (CopyBackwards nodes in the backward), input / hx / cx cast, then
    the RNN on Half tensors (real Sequencer2D profile, torch 2.11). The CPU build has no such
    kernel: the simulation ran it in fp32 before (runtime/dispatch/autocast_rnn.py). cuDNN's own
    host work is charged per call (host_model.json "cudnn_rnn")."""
    from phantora_prof import hostcost

    (cli.cwd / "rnn.py").write_text(AUTOCAST_SCRIPT)
    r = cli("--out", "traces", "--format", "kineto", "python", "rnn.py")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "dtypes torch.float16 torch.float16" in r.stdout and "grad torch.float32" in r.stdout
    assert "plain torch.float32" in r.stdout
    doc = json.loads(gzip.open(cli.cwd / "traces" / "rank0.pt.trace.json.gz").read())
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    rnn = [e for e in ops if e["name"] == "aten::_cudnn_rnn"]
    def within(e, o):
        return e is not o and o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"]

    outer = next(o for o in rnn if any(within(e, o) for e in rnn))  # the autocast wrapper's call
    inside = [e for e in ops if within(e, outer)]
    names = [e["name"] for e in inside]
    assert names.count("aten::copy_") >= 8 and names.count("aten::set_") >= 8 and "aten::zeros" in names
    inner = [e for e in rnn if e is not outer and e in inside]
    assert inner and inner[0]["args"]["Input type"][0] == "c10::Half"
    nodes = [e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("autograd::engine::evaluate_function")]
    assert sum("CopyBackwards" in n for n in nodes) == 8
    bwd = [e for e in ops if e["name"] == "aten::_cudnn_rnn_backward"]
    assert bwd and bwd[0]["dur"] * 1000 >= hostcost.library_ns("aten::_cudnn_rnn_backward") > 0
