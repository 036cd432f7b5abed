"""Replays cases of the SDPA battery (phantora_prof/measure/sdpa_battery.py) under the simulator, end to end.

    phantora-prof --no-trace python tests/scripts/sdpa_cases.py CASES.json OUT.json 0 7 14 ...

Each case runs as on the GPU (F.scaled_dot_product_attention, then backward when it needs
grad) inside torch.profiler; the forward and backward aten ops it ran are read from the
simulated profile, as the battery read them from the real one. Also checks that
`aten::_fused_sdp_choice` answers the same through its Meta kernel, as a FakeTensorMode runs it.
"""
import json
import sys
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

from phantora_prof.measure import sdpa_battery as battery

cases_path, out_path, *indices = sys.argv[1:]
cases = json.loads(Path(cases_path).read_text())["cases"]
results = {}
for i in map(int, indices):
    c = dict(cases[i], seq=tuple(cases[i]["seq"]), heads=tuple(cases[i]["heads"]))
    results[i] = battery.run_case(c)

# The choice through the op's Meta kernel (what a FakeTensorMode runs), not the capture mode.
q = torch.randn(2, 16, 256, 64, device="cuda", dtype=torch.bfloat16)
assert isinstance(q, FakeTensor)
eager = torch._fused_sdp_choice(q, q, q, is_causal=True)
with in_kernel_invocation_manager(q.fake_mode):
    meta = torch.ops.aten._fused_sdp_choice.default(q, q, q, is_causal=True)
results["meta_choice"] = [int(eager), int(meta)]

# Autocast casts inside the composite (scaled_dot_product_attention is on autocast's lower-precision
# list): fp32 inputs under bf16 autocast take cuDNN, plain fp32 the memory-efficient kernel.
for label, autocast in (("bf16_autocast", True), ("fp32", False)):
    x = torch.randn(2, 16, 1024, 64, device="cuda", requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            out = torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)
        out.float().sum().backward()
    results[label] = sorted({e.name for e in prof.events() if e.name.startswith("aten::_scaled_dot_product")})
Path(out_path).write_text(json.dumps(results))
print(f"{len(indices)} cases")
