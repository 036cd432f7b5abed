"""Facts about a CUDA build of torch that the simulator reproduces on CPU-only builds (run on a GPU).

    python -m phantora_prof.measure.device_facts --out facts.json      # from a checkout

- dispatch: which aten ops have a CUDA kernel in this build (torch's own registry), next to
  what phantora_prof/runtime/dispatch/cuda_dispatch.py derives from this torch's native_functions.yaml
  (the two must agree: tests/test_cuda_dispatch.py checks the recorded answer);
- cudnn: the version and the flags C++ composites ask (torch.backends.cudnn);
- rnn_reserve: bytes of cuDNN's training reserve space per LSTM/GRU configuration, which the
  Meta kernel of `_cudnn_rnn` (runtime/device/cuda_fakes.py) must allocate for memory to be right.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def dispatch_facts() -> dict:
    # torch + stdlib only (tests/test_architecture.py holds it to that), like this script
    from phantora_prof.runtime.dispatch.cuda_dispatch import _table, cuda_build_has_kernel

    table = _table()
    mismatches = []
    cuda_ops = []
    for name in table:
        q = "aten::" + name
        try:
            real = torch._C._dispatch_has_kernel_for_dispatch_key(q, "CUDA")
        except RuntimeError:
            continue
        if real:
            cuda_ops.append(name)
        if real != cuda_build_has_kernel(name, table):
            mismatches.append({"op": name, "registry": real})
    cia_and_cuda = [n for n in cuda_ops if torch._C._dispatch_has_kernel_for_dispatch_key(
        "aten::" + n, "CompositeImplicitAutograd")]
    return {"ops_in_yaml": len(table), "cuda_ops": len(cuda_ops), "mismatches": mismatches,
            "cia_and_cuda": sorted(cia_and_cuda)}


def rnn_reserve() -> list[dict]:
    out = []
    modes = {"lstm": (torch.nn.LSTM, 2, 4), "gru": (torch.nn.GRU, 3, 3)}
    for cell, (cls, mode, gates) in modes.items():
        for hidden, layers, t, b, dtype in [(256, 1, 64, 32, torch.float32), (512, 2, 128, 64, torch.float32),
                                            (1024, 2, 256, 64, torch.float32), (1024, 1, 64, 128, torch.bfloat16),
                                            (2048, 1, 128, 32, torch.float32), (512, 3, 32, 16, torch.bfloat16)]:
            m = cls(hidden, hidden, layers, batch_first=True).to("cuda", dtype)
            x = torch.randn(b, t, hidden, device="cuda", dtype=dtype)
            h0 = torch.zeros(layers, b, hidden, device="cuda", dtype=dtype)
            c0 = torch.zeros_like(h0) if cell == "lstm" else None
            w = m._flat_weights
            rec = {"cell": cell, "hidden": hidden, "layers": layers, "t": t, "b": b, "dtype": str(dtype), "gates": gates}
            try:
                r = torch.ops.aten._cudnn_rnn(x, w, 4, None, h0, c0, mode, hidden, 0, layers, True, 0.0, True, False,
                                              [], None)
                rec.update(reserve_bytes=r[3].numel() * r[3].element_size(), weight_buf_numel=r[4].numel())
            except Exception as e:  # noqa: BLE001
                rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            out.append(rec)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(),
             "cudnn": {"version": torch.backends.cudnn.version(), "enabled": torch.backends.cudnn.enabled,
                       "allow_tf32": torch.backends.cudnn.allow_tf32, "benchmark": torch.backends.cudnn.benchmark},
             "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32}
    for name, fn in (("dispatch", dispatch_facts), ("rnn_reserve", rnn_reserve)):
        try:
            facts[name] = fn()
        except Exception as e:  # noqa: BLE001 - record why, keep the rest
            facts[name] = {"error": f"{type(e).__name__}: {e}"}
    Path(a.out).write_text(json.dumps(facts, indent=1))
    print(json.dumps({k: (v if k != "dispatch" else {kk: vv for kk, vv in v.items() if kk != "cia_and_cuda"})
                      for k, v in facts.items() if k != "rnn_reserve"})[:2000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
