"""Run image classifiers nobody here has run under the simulator, as a new user would (issues #14, #15).

    python tools/holdout/robustness.py [--only a,b] [--out FILE.json] [--gpu h200]

Each architecture (timm:ARCH / tv:ARCH, zoo.py's generic models: default config, bf16 autocast,
AdamW, channels-last, batch 32 at 224 px unless listed otherwise) trains 3 steps under
`phantora-prof --no-trace` in its own process. Per model: the exit code, the simulated step,
the peak memory, how much GPU time came from the roofline (ops no sweep covers), and every
warning line the run printed. A crash or a refused op is a defect to fix; a large roofline share
says which kernel family to measure next. The list is chosen before any run and kept for real
measurement later (ROBUSTNESS_CASES in compare.py terms: zoo.py arguments).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# (zoo.py --model, extra zoo.py arguments): architectures the zoo never ran (session 55)
CASES: dict[str, list[str]] = {
    "timm:coatnet_0_rw_224": [], "timm:efficientformerv2_s1": [], "timm:edgenext_small": [],
    "timm:repvit_m1_1": [], "timm:tiny_vit_11m_224": [], "timm:mvitv2_tiny": [], "timm:cait_xxs24_224": [],
    "timm:crossvit_9_240": ["--image", "240"], "timm:beit_base_patch16_224": [], "timm:volo_d1_224": [],
    "timm:tnt_s_patch16_224": [], "timm:inception_next_tiny": [], "timm:ghostnetv2_100": [],
    "timm:gcvit_tiny": [], "timm:focalnet_tiny_srf": [], "timm:rexnet_100": [], "timm:dla34": [],
    "timm:dpn68": [], "timm:cspdarknet53": [], "timm:ese_vovnet19b_dw": [], "timm:hgnetv2_b0": [],
    "timm:mobilenetv4_conv_small": [], "timm:lcnet_100": [], "timm:mobileone_s1": [],
    "timm:twins_pcpvt_small": [], "timm:swinv2_tiny_window8_256": ["--image", "256"],
    "timm:convmixer_768_32": ["--batch", "16"], "timm:resmlp_12_224": [], "timm:gmlp_s16_224": [],
    "timm:deit3_small_patch16_224": [], "timm:mambaout_tiny": [], "timm:starnet_s1": [],
    "timm:nest_tiny": [], "timm:selecsls42b": [], "timm:rdnet_tiny": [],
    "tv:squeezenet1_1": [], "tv:alexnet": [], "tv:wide_resnet50_2": [], "tv:mobilenet_v2": [],
    "tv:regnet_y_800mf": [], "tv:maxvit_t": [], "tv:swin_v2_t": ["--image", "256"], "tv:vit_b_16": [],
    "tv:efficientnet_b3": ["--image", "300"], "tv:convnext_tiny": [], "tv:shufflenet_v2_x0_5": [],
    "tv:mnasnet0_5": [], "tv:resnext101_32x8d": ["--batch", "16"],
}
# transformers' causal LMs by model type (zoo.py's hf:TYPE: a small decoder, 8 layers x 1024,
# 32k vocabulary, sdpa where the model has it), batch 4 x 1024 tokens
HF_TYPES = ("gptj", "gpt_neo", "codegen", "mpt", "stablelm", "cohere", "cohere2", "granite", "olmo2", "persimmon",
            "recurrent_gemma", "jamba", "dbrx", "deepseek_v2", "deepseek_v3", "qwen2_moe", "qwen3_moe", "phimoe",
            "granitemoe", "olmoe", "gemma3_text", "glm4", "nemotron", "ernie4_5", "smollm3", "helium",
            "falcon_mamba", "mamba2", "bamba", "zamba2", "xglm", "biogpt", "diffllama", "exaone4", "gpt_oss",
            "llama4_text", "qwen3_next", "lfm2", "minimax", "seed_oss", "hunyuan_v1_dense", "apertus", "bitnet",
            "falcon_h1", "jetmoe", "minicpm3", "doge", "ministral", "arcee", "dots1")
CASES.update({f"hf:{t}": ["--batch", "4", "--seq", "1024"] for t in HF_TYPES})
_WARN = re.compile(r"warn|not simulated|unsupported|refus|falls back|eagerly|placeholder", re.I)
_EST = re.compile(r"estimate per step: ([\d.]+) ms")
_ROOF = re.compile(r"roofline model ([\d.]+)%")


def run_case(model: str, extra: list[str], gpu: str, timeout: float) -> dict:
    env = dict(os.environ, HF_NO_TORCHVISION="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, "-m", "phantora_prof", "--gpu", gpu, "--no-trace", "python", "zoo.py",
           "--model", model, "--steps", "3", *extra]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout)
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:  # what it printed so far (bytes even in text mode)
        out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
        rc = "timeout"
    wall = time.perf_counter() - t0
    res = {"model": model, "rc": rc, "wall_s": round(wall, 1)}
    m = re.search(r"^RESULT (\{.*\})$", out, re.M)
    if m:
        d = json.loads(m.group(1))
        res.update(median_ms=d.get("median_steady_ms"), peak_gb=round(d.get("peak_mem_bytes", 0) / 2**30, 3),
                   params_m=round(d.get("params", 0) / 1e6, 2))
    if (m := _EST.search(out)):
        res["estimate_ms"] = float(m.group(1))
    if (m := _ROOF.search(out)):
        res["roofline_pct"] = float(m.group(1))
    res["warnings"] = sorted({ln.strip()[:300] for ln in out.splitlines() if _WARN.search(ln)})
    if rc != 0:
        res["tail"] = out[-3000:]
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=None)
    p.add_argument("--gpu", default="h200")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    names = [n for n in CASES if any(n.startswith(x.rstrip("*")) if x.endswith("*") else n == x
                                     for x in a.only.split(","))] if a.only else list(CASES)
    results = []
    for name in names:
        r = run_case(name, CASES.get(name, []), a.gpu, a.timeout)
        results.append(r)
        print(f"{name:34s} rc {str(r['rc']):7s} {r.get('median_ms', float('nan')):9.2f} ms  "
              f"peak {r.get('peak_gb', 0):6.2f} GB  roofline {r.get('roofline_pct', 0):5.1f}%  "
              f"warnings {len(r['warnings'])}  ({r['wall_s']} s)", flush=True)
        if a.out:
            Path(a.out).write_text(json.dumps(results, indent=1))
    bad = [r["model"] for r in results if r["rc"] != 0]
    print(f"{len(results) - len(bad)} of {len(results)} ran" + (f"; failed: {', '.join(bad)}" if bad else ""))


if __name__ == "__main__":
    main()
