"""Which third-party models stop under phantora-prof but run on the CPU? (ordinary-script breakages)

For each case (an HF transformers causal LM of every model type that builds from a small config,
or a timm architecture), a short training loop runs twice: on the CPU with plain torch, and under
phantora-prof on the simulated GPU. A case that runs on the CPU and fails in the simulation is
the simulator's bug; a case that fails on both is the model's or the library's.

    python tools/holdout/crash_sweep.py --hf              # every HF causal LM type
    python tools/holdout/crash_sweep.py --timm resnet18,vit_tiny_patch16_224
    python tools/holdout/crash_sweep.py --one hf:llama --device cuda   # one case (what the sweep runs)

Prints one line per case: `CASE cpu=ok|ERR|- sim=ok|ERR first error line` (the CPU run only where
the simulation failed).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SMALL = {"num_hidden_layers": 2, "n_layer": 2, "num_layers": 2, "n_layers": 2, "hidden_size": 128, "n_embd": 128,
         "d_model": 128, "num_attention_heads": 4, "n_head": 4, "num_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 256, "ffn_dim": 256, "n_inner": 256, "head_dim": 32, "vocab_size": 1024,
         "max_position_embeddings": 256, "n_positions": 256}


def _torchvision() -> None:
    """torchvision imported first (zoo.import_torchvision), as transformers and timm import it."""
    sys.path.insert(0, str(HERE))
    import zoo

    zoo.import_torchvision()


def hf_types() -> list[str]:
    _torchvision()
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def build(case: str, dev: str):
    import torch

    kind, name = case.split(":", 1)
    _torchvision()
    if kind == "hf":
        import transformers as tf

        cfg = tf.AutoConfig.for_model(name)
        for k, v in SMALL.items():
            if hasattr(cfg, k) and isinstance(getattr(cfg, k), int):
                setattr(cfg, k, v)
        model = tf.AutoModelForCausalLM.from_config(cfg).to(dev)
        vocab = getattr(cfg, "vocab_size", 1024) or 1024
        ids = torch.randint(0, min(vocab, 1024), (2, 64), device=dev)
        return model, lambda: model(input_ids=ids, labels=ids).loss
    import timm

    model = timm.create_model(name, pretrained=False, num_classes=10).to(dev)
    size = model.default_cfg.get("input_size", (3, 224, 224))
    x = torch.randn(2, *size, device=dev)
    y = torch.randint(0, 10, (2,), device=dev)
    return model, lambda: torch.nn.functional.cross_entropy(model(x), y)


def run_one(case: str, dev: str) -> None:
    import torch

    torch.manual_seed(0)
    model, loss_of = build(case, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(2):
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = loss_of()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print("CASE_OK", float(loss) == float(loss))


def first_error(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln.split(":")[0] or ln.startswith(("RuntimeError", "phantora_prof.errors")):
            return ln.strip()[:240]
    return (lines[-1] if lines else "").strip()[:240]


def sweep(cases: list[str], timeout: int) -> None:
    env = dict(os.environ, HF_NO_TORCHVISION="1", PYTHONWARNINGS="ignore")
    me = str(Path(__file__).resolve())
    cli = [sys.executable, "-m", "phantora_prof", "--no-trace", "python"]
    for case in cases:
        out = {"cpu": ("-", "")}  # the CPU run only where the simulation failed
        for where, cmd in (("sim", cli + [me, "--one", case, "--device", "cuda"]),
                           ("cpu", [sys.executable, me, "--one", case, "--device", "cpu"])):
            if where == "cpu" and out["sim"][0] == "ok":
                break
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
                ok = r.returncode == 0 and "CASE_OK" in r.stdout
                out[where] = ("ok", "") if ok else ("ERR", first_error(r.stderr + r.stdout))
            except subprocess.TimeoutExpired:
                out[where] = ("ERR", f"timeout {timeout}s")
        note = out["sim"][1] if out["sim"][0] != "ok" else (out["cpu"][1] if out["cpu"][0] != "ok" else "")
        print(f"{case} cpu={out['cpu'][0]} sim={out['sim'][0]} {note}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hf", action="store_true", help="every HF causal LM type")
    p.add_argument("--hf-types", default="", help="comma-separated HF model types (instead of --hf's all)")
    p.add_argument("--timm", default="", help="comma-separated timm architectures")
    p.add_argument("--one", help="run one case in this process (hf:TYPE or timm:NAME)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--timeout", type=int, default=300)
    a = p.parse_args()
    if a.one:
        run_one(a.one, a.device)
        return
    cases = ([f"hf:{t}" for t in hf_types()] if a.hf else []) + [f"hf:{t}" for t in a.hf_types.split(",") if t] + \
        [f"timm:{n}" for n in a.timm.split(",") if n]
    sweep(cases, a.timeout)


if __name__ == "__main__":
    main()
