"""SDPA's backend choice on the simulated GPU (phantora_prof/runtime/dispatch/sdpa.py) against a real H200.

tests/data/device/h200_sdpa_cases.json: 500 calls of F.scaled_dot_product_attention on an H200
(torch 2.11 cu130, cuDNN 9.19, sm90), recorded by phantora_prof/measure/sdpa_battery.py: dtype, head dim,
sequence lengths, heads (GQA by repeat_interleave or enable_gqa), masks, dropout,
requires_grad, layout, sdpa_kernel contexts; the forward and backward aten ops the GPU ran,
or torch's error.

- The port with torch 2.11's rules must agree with every measured case.
- With the installed torch's rules it may differ only where torch changed a rule since 2.11,
  each difference named with the change that causes it.
- A sample runs end to end under the simulator: the same forward and backward ops.
"""
from __future__ import annotations

import collections
import gzip
import json
import math
import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import sdpa_kernel

from conftest import REPO, SCRIPTS
from phantora_prof.measure import sdpa_battery as battery
from phantora_prof.runtime.dispatch import sdpa

DATA = REPO / "tests" / "data" / "device" / "h200_sdpa_cases.json"

MEASURED = json.loads(DATA.read_text())
CASES = MEASURED["cases"]
FWD = {sdpa.CUDNN: "_scaled_dot_product_cudnn_attention", sdpa.FLASH: "_scaled_dot_product_flash_attention",
       sdpa.EFFICIENT: "_scaled_dot_product_efficient_attention", sdpa.MATH: "math"}
H200_2_11 = sdpa.Device(9, 0, 91900, (2, 11))
H200_INSTALLED = sdpa.Device(9, 0, 91900)


@pytest.fixture(autouse=True)
def _torch_sdp_state():
    """The choice changes torch's process-wide SDPA state (the priority order's first-use switch,
    as the C++ does); put it back for the other tests of this process."""
    order = torch._C._get_sdp_priority_order()
    initialised = sdpa._priority_initialised
    yield
    torch._C._set_sdp_priority_order(order)
    sdpa._priority_initialised = initialised


def measured(c: dict) -> str:
    return "error: " + c["error"].split(": ", 1)[1] if c.get("error") else c["fwd"]


def _tensors(c: dict):
    """The case's tensors as fake CUDA tensors, built as the battery built them on the GPU (built
    without autograd, which a CPU build cannot run on CUDA tensors outside the simulator; only
    requires_grad matters to the choice)."""
    with torch.no_grad():
        q, k, v, kw = battery.build(dict(c, seq=tuple(c["seq"]), heads=tuple(c["heads"])))
    q, k, v = (t.detach().requires_grad_(c["grad"]) for t in (q, k, v))
    return q, k, v, kw


def choose(c: dict, device: sdpa.Device, disable_cudnn: bool = False) -> str:
    with FakeTensorMode(allow_non_fake_inputs=True):
        q, k, v, kw = _tensors(c)
        ctx = battery.CONTEXTS[c["context"]]
        backends = ctx if ctx is not None else battery.CONTEXTS["no_cudnn"] + [battery.SDPBackend.CUDNN_ATTENTION]
        if disable_cudnn:
            backends = [b for b in backends if b != battery.SDPBackend.CUDNN_ATTENTION]
        try:
            with sdpa_kernel(backends), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return FWD[sdpa.fused_sdp_choice(q, k, v, kw.get("attn_mask"), kw.get("dropout_p", 0.0),
                                                 kw.get("is_causal", False), enable_gqa=kw.get("enable_gqa", False),
                                                 device=device)]
        except RuntimeError as exc:
            return f"error: {exc}"


def changed_since_2_11(c: dict) -> str | None:
    """Why torch >= 2.12 legitimately chooses otherwise than the measured torch 2.11, or None."""
    if sdpa.TORCH_VERSION >= (2, 12) and measured(c) == FWD[sdpa.CUDNN] \
            and c["dropout"] * 16 != math.floor(c["dropout"] * 16):
        return ("pytorch#174245 (merged 2026-02-26, torch >= 2.12): cuDNN attention is not chosen for a dropout "
                "probability that is not a multiple of 1/16")
    return None


def test_battery_is_the_simulated_h200():
    from phantora_prof import cost
    from phantora_prof.runtime.device import cuda_api

    env = MEASURED["env"]
    assert tuple(env["capability"]) == cost.get_gpu("h200").compute_capability == (9, 0)
    assert env["cudnn"] == cuda_api.CUDNN_VERSION == 91900
    assert len(CASES) == 500


def test_torch_2_11_rules_choose_as_the_h200_did():
    """Every measured case: the forward backend, or the same "No available kernel" error."""
    wrong = [(i, measured(c), got, {k: c[k] for k in ("dtype", "head_dim", "seq", "heads", "gqa_mode", "mask",
                                                       "dropout", "grad", "layout", "context")})
             for i, c in enumerate(CASES) if (got := choose(c, H200_2_11)) != measured(c)]
    assert not wrong, f"{len(wrong)}/{len(CASES)} cases differ from the H200:\n" + "\n".join(map(str, wrong[:20]))


def test_installed_torch_rules_differ_only_where_torch_changed():
    agree, explained, wrong = 0, {}, []
    for i, c in enumerate(CASES):
        got = choose(c, H200_INSTALLED)
        reason = changed_since_2_11(c)
        if reason is None:
            if got == measured(c):
                agree += 1
            else:
                wrong.append((i, measured(c), got))
        else:
            # the measured choice without the one backend the change rules out
            expected = choose(c, H200_2_11, disable_cudnn=True)
            if got != expected:
                wrong.append((i, expected, got, reason))
            explained.setdefault(reason, []).append(i)
    print(f"\nSDPA choice vs the H200 (torch 2.11): {agree}/{len(CASES)} agree with torch "
          f"{'.'.join(map(str, sdpa.TORCH_VERSION))}'s rules; differing by a torch change: "
          + "; ".join(f"{len(v)} cases, {k}" for k, v in explained.items()))
    assert not wrong, wrong[:20]
    assert agree + sum(map(len, explained.values())) == len(CASES)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_nested_tensors_are_refused_clearly():
    from phantora_prof.errors import UnsupportedOpError

    q = torch.nested.nested_tensor([torch.randn(4, 8, 16), torch.randn(4, 6, 16)])
    with pytest.raises(UnsupportedOpError, match="nested tensors"):
        sdpa.fused_sdp_choice(q, q, q, device=H200_INSTALLED)


def test_priority_order_first_use_and_sdpa_kernel_priority():
    """cuDNN first from the first choice on (as priority_order() does once), and a
    set_priority=True context's order wins inside it."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        q = torch.randn(2, 8, 256, 64, device="cuda", dtype=torch.bfloat16)
    sdpa._priority_initialised = False
    torch._C._set_sdp_priority_order([sdpa.FLASH, sdpa.EFFICIENT, sdpa.MATH, sdpa.CUDNN])
    assert sdpa.fused_sdp_choice(q, q, q, device=H200_INSTALLED) == sdpa.CUDNN
    assert torch._C._get_sdp_priority_order()[0] == sdpa.CUDNN
    S = battery.SDPBackend
    with sdpa_kernel([S.FLASH_ATTENTION, S.CUDNN_ATTENTION], set_priority=True):
        assert sdpa.fused_sdp_choice(q, q, q, device=H200_INSTALLED) == sdpa.FLASH
    assert sdpa.fused_sdp_choice(q, q, q, device=H200_INSTALLED) == sdpa.CUDNN
    # A100: flash first (no cuDNN preference on sm80); deterministic algorithms rule cuDNN out
    sdpa._priority_initialised = False
    torch._C._set_sdp_priority_order([sdpa.FLASH, sdpa.EFFICIENT, sdpa.MATH, sdpa.CUDNN])
    assert sdpa.fused_sdp_choice(q, q, q, device=sdpa.Device(8, 0, 91900)) == sdpa.FLASH
    with sdpa_kernel([S.CUDNN_ATTENTION, S.MATH]):
        torch.use_deterministic_algorithms(True)
        try:
            assert sdpa.fused_sdp_choice(q, q, q, device=H200_INSTALLED) == sdpa.MATH
        finally:
            torch.use_deterministic_algorithms(False)
    with sdpa_kernel([]), pytest.raises(RuntimeError, match="No viable backend"):
        sdpa.fused_sdp_choice(q, q, q, device=H200_INSTALLED)


def _sample() -> list[int]:
    """Every 7th case (all backends, masks, layouts, GQA forms, contexts and errors appear), and
    every case the H200 ran with flash attention (rare: cuDNN comes first)."""
    return sorted(set(range(0, len(CASES), 7)) | {i for i, c in enumerate(CASES) if c.get("fwd") == FWD[sdpa.FLASH]})


def test_sample_end_to_end_runs_the_measured_ops(cli):
    """The sample through the simulator (torch's composite, autograd, the capture mode): the
    forward op and, where the case needs grad, the backward op the H200 ran; autocast's cast."""
    idx = _sample()
    out = cli.cwd / "sdpa_sim.json"
    r = cli("python", str(SCRIPTS / "sdpa_cases.py"), str(DATA), str(out), *map(str, idx), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    with gzip.open(cli.cwd / "phantora_traces" / "rank0.pt.trace.json.gz", "rt") as f:
        names = collections.Counter(e["name"] for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op")
    # the choice launches nothing and a real profile has no op for it: only the script's own two
    # explicit calls (eager and through the Meta kernel) are there, as they would be on a GPU
    assert names["aten::_fused_sdp_choice"] == 2 and names["aten::_scaled_dot_product_cudnn_attention"] > 0
    sim = json.loads(out.read_text())
    eager, meta = sim.pop("meta_choice")
    assert eager == meta == sdpa.CUDNN
    assert sim.pop("bf16_autocast") == ["aten::_scaled_dot_product_cudnn_attention",
                                        "aten::_scaled_dot_product_cudnn_attention_backward"]
    assert sim.pop("fp32") == ["aten::_scaled_dot_product_efficient_attention",
                               "aten::_scaled_dot_product_efficient_attention_backward"]
    wrong = []
    for i in idx:
        c, s = CASES[i], sim[str(i)]
        if changed_since_2_11(c):
            fwd = choose(c, H200_2_11, disable_cudnn=True)
            want = (fwd, fwd + "_backward" if c["grad"] and fwd != "math" else None)
        elif c.get("error"):
            want = (measured(c), None)
        else:
            want = (c["fwd"], c["bwd"])
        got = ("error: " + s["error"].split(": ", 1)[1] if s.get("error")
               else ("math" if s["fwd"] == "other" and s["math_ops"] else s["fwd"]), s.get("bwd"))
        if got != want:
            wrong.append((i, want, got))
    assert not wrong, wrong
