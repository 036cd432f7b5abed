"""Held-out accuracy: simulated vs real H200 step times on workloads the models were never fitted to.

    python tools/holdout/compare.py                 # simulate every case, print the table
    python tools/holdout/compare.py --only llama,cnn --gpu h200
    python tools/holdout/compare.py --real-gpu      # on a GPU machine: run the real cases and write their logs

The real logs (steady-state medians printed by loop.py / the reference workloads' common.py)
are in tools/holdout/real_h200/; they came from one H200 (torch 2.11, CUDA 13.0) with
`--real-gpu`. The gpt.py cases use ../shared/reference/workloads/gpt.py (--workloads).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REAL = HERE / "real_h200"

# name -> (script, args); scripts without a directory are in tools/holdout/, gpt.py in --workloads.
# blind sets 9's, 10's and 11's models (the sets themselves, ZOO_BLIND9, ..., are defined with the
# others below)
ZOO_BLIND9_MODELS = ("hf_vit_mae", "hf_mobilevit", "timm_bit", "gru", "hf_bart")
ZOO_BLIND10_MODELS = ("hf_mixtral", "tv_deeplabv3", "hf_swinv2", "timm_convnextv2", "timm_efficientvit")
ZOO_BLIND11_MODELS = ("timm_hrnet", "timm_xcit", "hf_xlnet", "tv_inception", "tv_raft")
ZOO_BLIND12_MODELS = ("hf_llama3_8b", "hf_qwen25_7b", "hf_pythia_7b", "timm_vit_large", "tv_resnet152")
ZOO_BLIND13_MODELS = ("hf_gemma2", "hf_roberta", "timm_eva02", "timm_ghostnet", "tv_convnext_base")
ZOO_BLIND14_MODELS = ("hf_hubert", "hf_gpt_bigcode", "tv_lraspp")
ZOO_BLIND15_MODELS = ("hf_mamba", "hf_longformer", "hf_fnet", "timm_pvt_v2", "timm_resnest")
ZOO_BLIND16_MODELS = ("hf_albert", "hf_detr", "timm_sequencer", "timm_res2net", "timm_davit")
ZOO_BLIND22_MODELS = ("hf_phi3", "hf_funnel", "timm_fastvit", "tv_efficientnet_v2", "timm_hiera")
# blind set 17 (session 50), chosen before any run: training recipes no earlier set measured, each on
# a model whose bf16-autocast run was measured before (zoo.py's Recipe): the PyTorch ImageNet
# example's fp32 (torch's default precision flags), fp16 autocast with GradScaler, parameters in bf16
# without autocast, TF32 matmuls with gradient accumulation, activation checkpointing
ZOO_BLIND17_ARGS = {
    "r17_tv_resnet50_fp32": ["--model", "tv_resnet50", "--recipe", "fp32", "--nchw"],
    "r17_hf_phi_fp16": ["--model", "hf_phi", "--recipe", "fp16"],
    "r17_hf_gemma_bf16w": ["--model", "hf_gemma", "--recipe", "bf16-weights"],
    "r17_timm_vit_tf32_accum": ["--model", "timm_vit", "--recipe", "tf32", "--accum", "2"],
    "r17_hf_gpt2_ckpt": ["--model", "hf_gpt2", "--grad-ckpt"],
}
# blind set 18 (session 50), chosen after blind set 17's fixes (cuDNN's TF32 default, fp32
# attention) and before any run of its own: the same recipes on other models, to check those fixes
# where nothing was fitted: ConvNeXt-T in fp32 (depthwise 7x7 convolutions, IEEE fp32 linears),
# BERT-base in fp32 (fp32 attention at 512 tokens), EfficientNet-B0 with fp16 and GradScaler,
# VGG-11-BN with TF32 (NCHW), Qwen2-style LM with activation checkpointing
ZOO_BLIND18_ARGS = {
    "r18_timm_convnext_fp32": ["--model", "timm_convnext", "--recipe", "fp32"],
    "r18_hf_bert_fp32": ["--model", "hf_bert", "--recipe", "fp32"],
    "r18_tv_efficientnet_fp16": ["--model", "tv_efficientnet", "--recipe", "fp16"],
    "r18_tv_vgg_tf32": ["--model", "tv_vgg", "--recipe", "tf32", "--nchw"],
    "r18_hf_qwen2_ckpt": ["--model", "hf_qwen2", "--grad-ckpt"],
}
# blind set 19 (session 50), chosen after the fp32 NCHW convolution and 2x2 pooling sweeps were
# designed (from ResNet-50's and VGG-11's profiles) and before any run: fp32 NCHW CNNs none of
# which ran in fp32 before, to check those sweeps where nothing was fitted: DenseNet-121,
# MobileNetV3-Large, ResNeXt-50 32x4d (grouped), RegNetX-1.6GF (grouped), ResNet-152
ZOO_BLIND19_ARGS = {
    "r19_tv_densenet_fp32": ["--model", "tv_densenet", "--recipe", "fp32", "--nchw"],
    "r19_tv_mobilenet_fp32": ["--model", "tv_mobilenet", "--recipe", "fp32", "--nchw"],
    "r19_timm_resnext_fp32": ["--model", "timm_resnext", "--recipe", "fp32", "--nchw"],
    "r19_tv_regnet_x_fp32": ["--model", "tv_regnet_x", "--recipe", "fp32", "--nchw"],
    "r19_tv_resnet152_fp32": ["--model", "tv_resnet152", "--recipe", "fp32", "--nchw"],
}
# blind set 20 (session 50), chosen after the fp32 NCHW sweeps that blind set 19's profiles led to
# (RegNetX's grouped convolutions, batch norm over more batch x map sizes) and before any run: fp32
# NCHW CNNs none of which ran in fp32 before: EfficientNet-B0, ShuffleNetV2, RegNetY-1.6GF (timm),
# GoogLeNet, MnasNet
ZOO_BLIND20_ARGS = {f"r20_{m}_fp32": ["--model", m, "--recipe", "fp32", "--nchw"]
                    for m in ("tv_efficientnet", "tv_shufflenet", "timm_regnet", "tv_googlenet", "tv_mnasnet")}
# blind set 21 (session 51, 2026-12-07), chosen before any run or simulation of its cases, to compare
# the simulator's H200 predictions for session 50's recipes with an H200 (sets 17-20 ran on H100s
# only): each model + recipe pair never measured before (sets 17-20 and every table above): HF LLaMA
# in fp16 autocast with GradScaler, HF BERT-base with activation checkpointing (an encoder; sets 17-18
# checkpointed decoders), Inception-v3 in fp32 (channels-last: its step forces it, so no --nchw),
# torchvision Swin-T with TF32 matmuls, HF Qwen3 with its parameters in bf16 and 2 micro-batches;
# default sizes; simulated (--gpu h200) before the device run, measured once, compared once
ZOO_BLIND21_ARGS = {
    "r21_hf_llama_fp16": ["--model", "hf_llama", "--recipe", "fp16"],
    "r21_hf_bert_ckpt": ["--model", "hf_bert", "--grad-ckpt"],
    "r21_tv_inception_fp32": ["--model", "tv_inception", "--recipe", "fp32"],
    "r21_tv_swin_tf32": ["--model", "tv_swin", "--recipe", "tf32"],
    "r21_hf_qwen3_bf16w_accum": ["--model", "hf_qwen3", "--recipe", "bf16-weights", "--accum", "2"],
}
# session 55: five of tools/holdout/robustness.py's architectures nobody here had run (zoo.py's
# generic timm:ARCH models: default config, bf16 autocast, channels-last, AdamW, 224 px), chosen after
# their simulation ran clean and before any real run: CaiT's talking heads and class attention,
# VOLO's outlook attention (unfold / fold), MViTv2's pooling attention, CoAtNet's MBConv + relative
# attention, GhostNetV2's cheap operations with DFC attention; at batch 128, where the simulation
# has the GPU busier than the host (at the robustness run's 32 all five are host-bound)
ZOO_BLIND23_ARGS = {
    "b23_cait": ["--model", "timm:cait_xxs24_224", "--batch", "128"],
    "b23_volo": ["--model", "timm:volo_d1_224", "--batch", "128"],
    "b23_mvitv2": ["--model", "timm:mvitv2_tiny", "--batch", "128"],
    "b23_coatnet": ["--model", "timm:coatnet_0_rw_224", "--batch", "128"],
    "b23_ghostnetv2": ["--model", "timm:ghostnetv2_100", "--batch", "128"],
}
# session 56: transformers' mixture-of-experts language models (zoo.py's generic hf:TYPE, 8 x 1024, a
# 32k vocabulary, bf16 autocast, AdamW; transformers' default grouped-mm experts), timed on an H100
# lease before their H100 simulation ran; PhiMoE is where the empty_like / unknown-permutation fix
# was found (runtime/dispatch/values.py), before any of them was timed
MOE56_ARGS = {f"moe_{t}": ["--model", f"hf:{t}"] for t in ("phimoe", "qwen3_moe", "granitemoe", "olmoe")}
# session 56: five more of robustness.py's language models, chosen and simulated before any real
# run: Gemma-3 (sliding-window + global layers, QK norm), GLM-4 (partial rotary, post-norms),
# MiniMax (lightning + softmax attention, MoE), gpt-oss (attention sinks, clamped SwiGLU, MoE with
# biases), DeepSeek-V3 (multi-head latent attention, shared + routed experts)
ZOO_BLIND24_ARGS = {f"b24_{t}": ["--model", f"hf:{t}"] for t in ("gemma3_text", "glm4", "minimax", "gpt_oss",
                                                                  "deepseek_v3")}
# host-bound runs (session 33): the zoo's models at a batch so small that the GPU waits for the
# host, so the step time is the host's (issue #15); name: host_<model>
HOST_BOUND_ARGS = {**{m: ["--batch", "2"] for m in ("hf_swinv2", "timm_efficientvit", "hf_vit_mae", "timm_bit",
                                                     "timm_convnextv2", "tv_resnet50", "timm_vit")},
                   **{m: ["--batch", "1", "--seq", "128"] for m in ("hf_bart", "hf_gpt2", "hf_llama", "hf_mixtral")},
                   "tv_deeplabv3": ["--batch", "2", "--image", "128"]}  # batch 1 fails in training (its pooled BN)
# host-bound held out (session 34): chosen before any run, simulated first, then measured once in one
# process with the reference gpt.py (host_interleaved.py); never used to change the host model
HOST_BOUND_BLIND_ARGS = {**{m: ["--batch", "2"] for m in ("tv_mobilenet", "timm_regnet", "tv_swin")},
                         **{m: ["--batch", "1", "--seq", "128"] for m in ("hf_bert", "hf_qwen2", "hf_t5")}}
HOST_BOUND_ARGS_ALL = {**HOST_BOUND_ARGS, **HOST_BOUND_BLIND_ARGS}
CASES: dict[str, tuple[str, list[str]]] = {
    "gpt_medium": ("gpt.py", ["--layers", "24", "--dim", "1024", "--heads", "16", "--batch", "8"]),
    "gpt_seq2k": ("gpt.py", ["--seq", "2048", "--batch", "4"]),
    "gpt_seq4k": ("gpt.py", ["--seq", "4096", "--batch", "2"]),
    "gpt_hd128": ("gpt.py", ["--dim", "1536", "--heads", "12", "--layers", "8", "--batch", "8"]),
    "gpt_tiny": ("gpt.py", ["--layers", "4", "--dim", "256", "--heads", "4", "--seq", "256", "--batch", "8"]),
    "gpt_b4": ("gpt.py", ["--batch", "4"]),
    "llama": ("llama.py", []),
    "llama_big": ("llama.py", ["--seq", "4096", "--batch", "2", "--dim", "2048", "--heads", "16", "--kv-heads", "8",
                               "--ffn", "5632", "--layers", "4"]),
    "cnn": ("cnn.py", []),
    "cnn_cl": ("cnn.py", ["--channels-last"]),
    "cnn_narrow": ("cnn.py", ["--batch", "128", "--width", "32", "--image", "128"]),
    "mlp": ("mlp.py", []),
    "mlp_tf32": ("mlp.py", ["--tf32"]),
    "mlp_small": ("mlp.py", ["--batch", "256", "--width", "1024"]),
    "vit": ("vit.py", []),
    "vit_b16": ("vit.py", ["--batch", "16"]),
    # third-party models (zoo.py; real medians in real_h200/zoo/). "dev": looked at while fixing the
    # simulator (op stream, kernel families); "blind": measured once, never looked at until the report
    "hf_llama": ("zoo.py", ["--model", "hf_llama"]),
    "hf_gpt2": ("zoo.py", ["--model", "hf_gpt2"]),
    "timm_vit": ("zoo.py", ["--model", "timm_vit"]),
    "tv_resnet50": ("zoo.py", ["--model", "tv_resnet50"]),
    "hf_bert": ("zoo.py", ["--model", "hf_bert"]),
    "hf_mistral": ("zoo.py", ["--model", "hf_mistral"]),
    "hf_qwen2": ("zoo.py", ["--model", "hf_qwen2"]),
    "hf_t5": ("zoo.py", ["--model", "hf_t5"]),
    "timm_convnext": ("zoo.py", ["--model", "timm_convnext"]),
    "tv_mobilenet": ("zoo.py", ["--model", "tv_mobilenet"]),
    "tv_efficientnet": ("zoo.py", ["--model", "tv_efficientnet"]),
    "lstm": ("zoo.py", ["--model", "lstm"]),
    "hf_gptneox": ("zoo.py", ["--model", "hf_gptneox"]),
    "hf_opt": ("zoo.py", ["--model", "hf_opt"]),
    "timm_regnet": ("zoo.py", ["--model", "timm_regnet"]),
    "tv_swin": ("zoo.py", ["--model", "tv_swin"]),
    "tv_densenet": ("zoo.py", ["--model", "tv_densenet"]),
    "hf_phi": ("zoo.py", ["--model", "hf_phi"]),
    "hf_gemma": ("zoo.py", ["--model", "hf_gemma"]),
    "timm_mixer": ("zoo.py", ["--model", "timm_mixer"]),
    "tv_shufflenet": ("zoo.py", ["--model", "tv_shufflenet"]),
    "hf_starcoder2": ("zoo.py", ["--model", "hf_starcoder2"]),
    "hf_olmo": ("zoo.py", ["--model", "hf_olmo"]),
    "timm_resnext": ("zoo.py", ["--model", "timm_resnext"]),
    "tv_regnet_x": ("zoo.py", ["--model", "tv_regnet_x"]),
    "hf_falcon": ("zoo.py", ["--model", "hf_falcon"]),
    "timm_poolformer": ("zoo.py", ["--model", "timm_poolformer"]),
    "tv_vgg": ("zoo.py", ["--model", "tv_vgg"]),
    "tv_mnasnet": ("zoo.py", ["--model", "tv_mnasnet"]),
    **{m: ("zoo.py", ["--model", m]) for m in ("hf_whisper", "hf_wav2vec2", "hf_clip", "tv_r3d", "timm_maxvit")},
    **{m: ("zoo.py", ["--model", m]) for m in ("hf_qwen3", "hf_deberta", "timm_levit", "tv_googlenet")},
    **{m: ("zoo.py", ["--model", m]) for m in ("hf_bloom", "hf_modernbert", "hf_segformer", "timm_nfnet",
                                               "tv_vit_b32")},
    **{m: ("zoo.py", ["--model", m]) for m in ZOO_BLIND9_MODELS + ZOO_BLIND10_MODELS + ZOO_BLIND11_MODELS
       + ZOO_BLIND12_MODELS + ZOO_BLIND13_MODELS + ZOO_BLIND14_MODELS + ZOO_BLIND15_MODELS
       + ZOO_BLIND16_MODELS + ZOO_BLIND22_MODELS},
    **{case: ("zoo.py", args) for case, args in {**ZOO_BLIND17_ARGS, **ZOO_BLIND18_ARGS, **ZOO_BLIND19_ARGS,
                                                          **ZOO_BLIND20_ARGS, **ZOO_BLIND21_ARGS,
                                                          **ZOO_BLIND23_ARGS, **MOE56_ARGS,
                                                          **ZOO_BLIND24_ARGS}.items()},
    # Gemma-2 soft-caps its attention logits, which transformers' sdpa path refuses: eager, as its docs say
    "hf_gemma2": ("zoo.py", ["--model", "hf_gemma2", "--attn", "eager"]),
    **{f"host_{m}": ("zoo.py", ["--model", m, *a]) for m, a in HOST_BOUND_ARGS_ALL.items()},
    # torch.compile (issue #16, session 12): the reference gpt.py (fitted: the Triton launch host
    # cost and the compile time), then held out: four models measured before the simulation ran,
    # and a blind set chosen before any run, measured once at the end of the session
    "gpt_b8c": ("gpt.py", ["--compile"]),
    "gpt_b32c": ("gpt.py", ["--compile", "--batch", "32"]),
    **{f"{m}_c": ("zoo.py", ["--model", m, "--compile"]) for m in (
        "hf_llama", "timm_vit", "tv_resnet50", "hf_bert", "hf_gpt2", "timm_convnext", "tv_mobilenet", "tv_swin",
        "hf_opt", "hf_qwen2", "timm_resnext", "tv_efficientnet")},
    # session 13: HF LLaMA with transformers' flex_attention, compiled and eager (simulated first,
    # then measured once on the H200; flex templates fitted on isolated calls only)
    "hf_llama_fx_c": ("zoo.py", ["--model", "hf_llama", "--attn", "flex_attention", "--compile"]),
    "hf_llama_fx": ("zoo.py", ["--model", "hf_llama", "--attn", "flex_attention"]),
    # session 16: torch.compile(mode="reduce-overhead") (CUDA graph trees) next to the default mode at
    # small, host-bound sizes; real runs in real_h200/session15 (gpt.py) and session16 (zoo.py);
    # the CUDA graph host model was fitted on tools/holdout/cudagraph_host.py only
    "gpt_b1c": ("gpt.py", ["--compile", "--batch", "1", "--seq", "64"]),
    "gpt_b1ro": ("gpt.py", ["--compile", "--batch", "1", "--seq", "64"]),
    "gpt_b8ro": ("gpt.py", ["--compile"]),
    **{f"{m}_{tag}_{mode}": ("zoo.py", ["--model", m, *size.split(), "--compile",
                                         *(["--compile-mode", "reduce-overhead"] if mode == "ro" else [])])
       for m, tag, size in (("hf_gpt2", "b1", "--batch 1 --seq 128"), ("timm_vit", "b8", "--batch 8"),
                            ("tv_resnet50", "b8", "--batch 8"))
       for mode in ("c", "ro")},
}
# cases run through compile_mode.py with this torch.compile mode (gpt.py has no mode option)
MODES = {"gpt_b1ro": "reduce-overhead", "gpt_b8ro": "reduce-overhead"}
ZOO_DEV = ("hf_llama", "hf_gpt2", "timm_vit", "tv_resnet50",
           "timm_convnext", "lstm")  # the last two were blind until session 6 looked at their traces
ZOO_BLIND = ("hf_bert", "hf_mistral", "hf_qwen2", "hf_t5", "tv_mobilenet", "tv_efficientnet")
# measured on the H200 in session 6 after that session's changes (a host ~1.9x slower in Python than
# session 5's: real_h200/zoo/host_probe_blind2.json), compared once, not looked into before the report
ZOO_BLIND2 = ("hf_gptneox", "hf_opt", "timm_regnet", "tv_swin", "tv_densenet")
# chosen in session 7 before any run, measured once on the H200 at the end of that session's changes
# (real_h200/zoo/host_probe_blind3.json: that lease's host), compared once
ZOO_BLIND3 = ("hf_phi", "hf_gemma", "timm_mixer", "tv_shufflenet")
# chosen in session 10 before any run (grouped convolutions of power-of-two and other widths, two
# more LM families), measured once on the H200 at the end of that session's changes, compared once
ZOO_BLIND4 = ("hf_starcoder2", "hf_olmo", "timm_resnext", "tv_regnet_x")
# chosen in session 11 before any run (multi-query parallel-attention LM, pooling token mixer with
# GroupNorm, large dense convolutions with max-pool and 25088-wide linears, depthwise NAS net),
# measured once on the H200 at the end of that session's changes, compared once
ZOO_BLIND5 = ("hf_falcon", "timm_poolformer", "tv_vgg", "tv_mnasnet")
# chosen in session 21 before any run (families no earlier set has: speech front ends and CTC,
# encoder-decoder cross-attention, contrastive towers, 3-D convolutions, MaxViT's block / grid
# attention), measured once on the H200 (transformers 5.17 there) before their simulation was
# compared, compared once
ZOO_BLIND6 = ("hf_whisper", "hf_wav2vec2", "hf_clip", "tv_r3d", "timm_maxvit")
# chosen in session 25 before any run (per-head query/key RMSNorm, DeBERTa's disentangled relative
# attention, LeViT's attention-biased hybrid with BatchNorm'd linears, Inception branches), measured
# once on the H200 before their simulation was compared, compared once
ZOO_BLIND7 = ("hf_qwen3", "hf_deberta", "timm_levit", "tv_googlenet")
# chosen in session 29 before any run (ALiBi baddbmm attention, ModernBERT's local / global
# attention with GeGLU, SegFormer's segmentation head with bilinear upsampling and a per-pixel loss,
# NFNet's weight-standardised convolutions with ECA, torchvision's nn.MultiheadAttention ViT),
# measured once on the H200 before their simulation ran, compared once
ZOO_BLIND8 = ("hf_bloom", "hf_modernbert", "hf_segformer", "timm_nfnet", "tv_vit_b32")
# chosen in session 32 before any run (MAE pretraining with random patch masking, MobileViT's
# unfolded patches, BiT's GroupNorm + weight-standardised convolutions, cuDNN GRU, BART), simulated
# first, then measured once on an H100 (the GPU that lease gave: compare with --gpu h100), compared once
ZOO_BLIND9 = ZOO_BLIND9_MODELS
# chosen in session 33 before any run (sparse mixture-of-experts routing, dilated convolutions with
# ASPP and a full-resolution per-pixel loss, Swin-v2's cosine attention with a position-bias MLP,
# ConvNeXt-v2's global response normalisation, EfficientViT's ReLU linear attention), simulated
# first, then measured once on the GPU the lease gave, compared once
ZOO_BLIND10 = ZOO_BLIND10_MODELS
# chosen in session 36 before any run (HRNet's parallel multi-resolution branches and their fusions,
# XCiT's cross-covariance attention, XLNet's relative positional attention in einsums,
# Inception-v3's factorised convolutions and auxiliary head, RAFT's correlation pyramid with
# grid_sample lookups and 12 recurrent refinements), simulated first, then measured once on the GPU
# the lease gave, compared once
ZOO_BLIND11 = ZOO_BLIND11_MODELS
# chosen in session 37 before any run, at the scale users train (every earlier set is small and, on the
# H200, often host-bound): three 7-8B LLMs' layers at 8k / 2k tokens with their full vocabularies,
# ViT-L/16 at batch 64, ResNet-152 at batch 128; GPU-bound, so the kernel models at large shapes and the
# memory plan decide them; simulated first, then measured once on the GPU the lease gave, compared once
ZOO_BLIND12 = ZOO_BLIND12_MODELS
# chosen in session 38 before any run: Gemma-2's soft-capped logits, 256k vocabulary and head_dim 256,
# RoBERTa-large at 8 x 512, EVA-02's rotary ViT with SwiGLU, GhostNet's cheap operations (dense
# convolutions over 12..100 channels, not multiples of 8, which cuDNN pads), torchvision's ConvNeXt-B;
# simulated first (before the padded-convolution model), measured once, compared once
ZOO_BLIND13 = ZOO_BLIND13_MODELS
# chosen in session 46 before any run, after that session's op-stream fixes and family sweeps, to
# check them at shapes off the sweeps' grids: HuBERT-base + CTC (positional convolution, weight norm,
# CTC loss at 299 frames x batch 6), GPTBigCode (multi-query causal attention with dropout 0.1),
# LR-ASPP MobileNetV3 (pooled branch, bilinear upsampling); simulated first, measured once
ZOO_BLIND14 = ZOO_BLIND14_MODELS
# chosen in session 48 before any run: families none of the sets above has (Mamba's sequential
# selective scan without custom kernels, Longformer's sliding-window attention, FNet's FFT mixing,
# PVT-v2's spatial-reduction attention, ResNeSt's split attention); simulated first, measured once
ZOO_BLIND15 = ZOO_BLIND15_MODELS
# chosen in session 49 before any run: families none of the sets above has (ALBERT's shared layers,
# DETR's detection with host-side Hungarian matching, Sequencer2D's BiLSTMs over feature maps,
# Res2Net's hierarchical split convolutions, DaViT's channel-group attention); simulated first,
# measured once
ZOO_BLIND16 = ZOO_BLIND16_MODELS
ZOO_BLIND17 = tuple(ZOO_BLIND17_ARGS)
ZOO_BLIND18 = tuple(ZOO_BLIND18_ARGS)
ZOO_BLIND19 = tuple(ZOO_BLIND19_ARGS)
ZOO_BLIND20 = tuple(ZOO_BLIND20_ARGS)
ZOO_BLIND21 = tuple(ZOO_BLIND21_ARGS)
# session 52: chosen before any run or simulation (zoo.py's MODELS says what each adds), bf16
# autocast at the default sizes
ZOO_BLIND22 = ZOO_BLIND22_MODELS
ZOO_BLIND23 = tuple(ZOO_BLIND23_ARGS)
MOE56 = tuple(MOE56_ARGS)
ZOO_BLIND24 = tuple(ZOO_BLIND24_ARGS)
COMPILED_FIT = ("gpt_b8c", "gpt_b32c")
COMPILED_HELD = ("hf_llama_c", "timm_vit_c", "tv_resnet50_c", "hf_bert_c", "hf_llama_fx_c", "hf_llama_fx")
COMPILED_BLIND = ("hf_gpt2_c", "timm_convnext_c", "tv_mobilenet_c", "tv_swin_c")
# session 17: chosen before any run, compiled (default mode) at the default, GPU-bound sizes, measured
# on the H200 in the lease that measured the in-model Triton sweep, before the curve was refitted on
# that sweep; compared once at the end of the session, their profiles opened only afterwards
COMPILED_BLIND2 = ("hf_opt_c", "hf_qwen2_c", "timm_resnext_c", "tv_efficientnet_c")
# reduce-overhead: gpt.py's real runs were seen before the CUDA graph model was built (not fitted);
# the zoo models were measured before their simulation first ran, never fitted
RO_SEEN = ("gpt_b1c", "gpt_b1ro", "gpt_b8ro")
# host-bound runs, chosen in session 33 before any of them ran (seven of the twelve models were
# seen at their usual, GPU-bound sizes before; their host side was not fitted on)
HOST_BOUND = tuple(f"host_{m}" for m in HOST_BOUND_ARGS)
HOST_BOUND_BLIND = tuple(f"host_{m}" for m in HOST_BOUND_BLIND_ARGS)
RO_HELD = tuple(f"{m}_{mode}" for m in ("hf_gpt2_b1", "timm_vit_b8", "tv_resnet50_b8") for mode in ("c", "ro"))
ZOO = REAL / "zoo"


def _script(name: str, workloads: Path) -> Path:
    return (workloads if name == "gpt.py" else HERE) / name


def _with_mode(case: str, path: Path) -> list[str]:
    """The script to run, through compile_mode.py where the case sets a torch.compile mode."""
    return [str(HERE / "compile_mode.py"), MODES[case], str(path)] if case in MODES else [str(path)]


def _result(text: str) -> dict | None:
    for line in text.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return None


def real_median(case: str, real_dir: Path = REAL) -> float | None:
    log = real_dir / f"{case}.log"
    if not log.exists() and (ZOO / f"{case}.log").exists():
        log = ZOO / f"{case}.log"
    if not log.exists():
        return None
    res = _result(log.read_text())
    return None if res is None else res["median_steady_ms"]


def in_step_band(sim_ms: float, real_ms: float, band: dict, window_ns: int) -> bool:
    """Whether the real step time is inside a per-step band (errorband.step_band over a window
    of `window_ns`: its asymmetric ends, as shares of the window, around the simulated step)."""
    return sim_ms * band["low_ns"] / window_ns <= real_ms <= sim_ms * band["high_ns"] / window_ns


def inside_band(sim: dict, real_ms: float, whole_run: bool = False) -> bool:
    """Whether the real step time is inside the simulated run's 90% band: the per-step band
    where the run had two or more optimizer steps, else (or with `whole_run`) the whole run's
    relative band around the simulated step."""
    steady = sim.get("steady")
    if steady and steady.get("error_band_90") and not whole_run:
        return in_step_band(sim["ms"], real_ms, steady["error_band_90"], steady["end_ns"] - steady["start_ns"])
    rel = sim["band_run"] if whole_run else sim["band"]
    return rel is not None and abs(sim["ms"] - real_ms) <= rel * sim["ms"]


def transformers_version() -> str | None:
    """The transformers this process (and the simulations it starts, which get its PYTHONPATH)
    imports, from its metadata: not imported, which would pull torch in."""
    import importlib.metadata

    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def real_transformers_versions(real_dir: Path) -> set[str]:
    """The transformers versions the GPU machine's logs next to `real_dir` name (the device
    scripts' `transformers X timm Y ...` line, in logs*.txt of the folder or its parent)."""
    found: set[str] = set()
    for folder in (real_dir, real_dir.parent):
        for log in folder.glob("logs*.txt"):
            for line in log.read_text(errors="replace").splitlines():
                m = re.match(r"transformers (\S+)", line)
                if m:
                    found.add(m.group(1))
    return found


def _is_hf(case: str) -> bool:
    return any(a.startswith("hf_") for a in CASES[case][1])


def warn_transformers(cases: list[str], real_dir: Path, local: str | None) -> None:
    """HF cases run transformers' model code, which changes between versions in ways that move
    step times by tens of percent (5.17 built an explicit causal mask and repeated GQA's KV heads
    where 5.25 passes is_causal: compiled hf_llama -20.7% with 5.25 against its H200 run on 5.17,
    -4.9% with 5.17). Say so when the real runs' version is known and differs."""
    if not any(_is_hf(c) for c in cases):
        return
    real = real_transformers_versions(real_dir)
    if real and local not in real:
        print(f"note: the real runs used transformers {', '.join(sorted(real))}, this simulation imports "
              f"{local or 'none'}: HF model code differs between versions. For a like-for-like comparison, "
              f"pip install --target DIR transformers=={sorted(real)[0]} (and its huggingface-hub) and run "
              "with PYTHONPATH=DIR", file=sys.stderr)


def simulate(case: str, workloads: Path, gpu: str, extra: list[str]) -> tuple[dict | None, str]:
    """{"ms", "peak", "band", "band_run", "steady"} of the simulated run (band: the summary's 90%
    relative band, the per-step one's wider side where it has one), and the output's tail."""
    script, args = CASES[case]
    path = _script(script, workloads)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="200")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.json"
        cmd = [sys.executable, "-m", "phantora_prof", "--no-trace", "--gpu", gpu, "--summary-json", str(summary),
               *extra, "python", *_with_mode(case, path), *args, "--steps", "6"]
        r = subprocess.run(cmd, cwd=path.parent, env=env, capture_output=True, text=True)
        ranks = json.loads(summary.read_text())["ranks"] if summary.exists() else []
    res = _result(r.stdout)
    if res is None:
        return None, (r.stdout + r.stderr)[-2000:]
    # band: the one the summary prints (the steps after the first where there are two or more);
    # band_run: the whole run's, start-up included (the only one before session 37)
    band_run = ranks[0]["error_band_90"]["relative"] if ranks else None
    steady = ranks[0].get("steady") if ranks else None
    band = steady["error_band_90"]["relative"] if steady else band_run
    return ({"ms": res["median_steady_ms"], "peak": res.get("peak_mem_bytes"),
             "band": band, "band_run": band_run, "steady": steady}, (r.stdout + r.stderr)[-2000:])


def real_result(case: str, real_dir: Path = REAL) -> dict | None:
    for log in (real_dir / f"{case}.log", ZOO / f"{case}.log"):
        if log.exists():
            return _result(log.read_text())
    return None


# every named group of cases, in the order a case is looked up (the first group holding it names
# its set); a case in none is "holdout"
SETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("blind", ZOO_BLIND), ("blind2", ZOO_BLIND2), ("blind3", ZOO_BLIND3), ("blind4", ZOO_BLIND4),
    ("blind5", ZOO_BLIND5), ("blind6", ZOO_BLIND6), ("blind7", ZOO_BLIND7), ("blind8", ZOO_BLIND8),
    ("blind9", ZOO_BLIND9), ("blind10", ZOO_BLIND10), ("blind11", ZOO_BLIND11), ("blind12", ZOO_BLIND12),
    ("blind13", ZOO_BLIND13), ("blind14", ZOO_BLIND14), ("blind15", ZOO_BLIND15), ("blind16", ZOO_BLIND16),
    ("blind17", ZOO_BLIND17), ("blind18", ZOO_BLIND18), ("blind19", ZOO_BLIND19), ("blind20", ZOO_BLIND20),
    ("blind21", ZOO_BLIND21), ("blind22", ZOO_BLIND22), ("blind23", ZOO_BLIND23),
    ("moe56", MOE56), ("blind24", ZOO_BLIND24), ("dev", ZOO_DEV), ("host", HOST_BOUND), ("host_blind", HOST_BOUND_BLIND), ("c_fit", COMPILED_FIT),
    ("c_held", COMPILED_HELD), ("c_blind", COMPILED_BLIND), ("c_blind2", COMPILED_BLIND2), ("ro_seen", RO_SEEN),
    ("ro_held", RO_HELD),
)
# the groups main() summarises, in the order it prints them (the host-bound groups are not summarised)
SUMMARY_GROUPS = ("holdout", "dev", *(n for n, _ in SETS if n not in ("dev", "host", "host_blind")))


def case_set(case: str) -> str:
    return next((name for name, cases in SETS if case in cases), "holdout")


def run_real(cases: list[str], workloads: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for case in cases:
        script, args = CASES[case]
        path = _script(script, workloads)
        r = subprocess.run([sys.executable, *_with_mode(case, path), *args, "--steps", "10"], cwd=path.parent,
                           capture_output=True, text=True)
        (out / f"{case}.log").write_text(r.stdout + r.stderr)
        print(case, "ok" if r.returncode == 0 else f"FAILED ({r.returncode})", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="", help="comma-separated case names (default: all)")
    p.add_argument("--gpu", default="h200")
    p.add_argument("--workloads", type=Path, default=REPO.parent / "shared" / "reference" / "workloads")
    p.add_argument("--real-dir", type=Path, default=REAL)
    p.add_argument("--real-gpu", action="store_true", help="run the cases on this machine's GPU into --real-dir")
    p.add_argument("--json", type=Path, help="also write the table as JSON")
    p.add_argument("extra", nargs="*", help="extra phantora-prof options, after --")
    a = p.parse_args(argv)
    cases = [c for c in a.only.split(",") if c] or list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    if a.real_gpu:
        run_real(cases, a.workloads, a.real_dir)  # needs the workloads folder for the gpt.py cases
        return 0
    rows = []
    if not (a.workloads / "gpt.py").exists():
        skipped = [c for c in cases if CASES[c][0] == "gpt.py"]
        if skipped:
            print(f"skipping {', '.join(skipped)}: no gpt.py in {a.workloads} (pass --workloads DIR, the "
                  f"reference workloads folder)", file=sys.stderr)
        cases = [c for c in cases if c not in skipped]
    local_tf = transformers_version()
    warn_transformers(cases, a.real_dir, local_tf)
    print(f"{'case':16s} {'set':8s} {'real ms':>9s} {'sim ms':>9s} {'error':>7s} {'band':>6s} {'in':>3s} {'mem err':>8s}")
    for case in cases:
        real = real_result(case, a.real_dir)
        sim, tail = simulate(case, a.workloads, a.gpu, a.extra)
        row = {"case": case, "set": case_set(case), "real_ms": real and real["median_steady_ms"]}
        if _is_hf(case):
            row["transformers"] = local_tf  # the model code the simulation ran (see warn_transformers)
        if sim is None:
            print(f"{case:16s} simulation failed:\n{tail}")
            rows.append(row)
            continue
        row.update(sim_ms=round(sim["ms"], 3), band=sim["band"], band_run=sim["band_run"], steady=sim["steady"])
        if real is not None:
            err = (sim["ms"] - real["median_steady_ms"]) / real["median_steady_ms"]
            row["error"] = round(err, 4)
            row["inside_band"] = inside_band(sim, real["median_steady_ms"])
            row["inside_band_run"] = inside_band(sim, real["median_steady_ms"], whole_run=True)
            if real.get("peak_mem_bytes") and sim["peak"]:
                row["mem_error"] = round(sim["peak"] / real["peak_mem_bytes"] - 1, 5)
        print(f"{case:16s} {row['set']:8s} {row['real_ms'] or float('nan'):9.2f} {row['sim_ms']:9.2f} "
              f"{'' if 'error' not in row else format(row['error'], '+.1%'):>7s} "
              f"{'' if row['band'] is None else format(row['band'], '.1%'):>6s} "
              f"{'' if 'inside_band' not in row else ('yes' if row['inside_band'] else 'no'):>3s} "
              f"{'' if 'mem_error' not in row else format(row['mem_error'], '+.2%'):>8s}", flush=True)
        rows.append(row)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    for group in SUMMARY_GROUPS:
        errs = sorted(abs(r["error"]) for r in rows if r.get("error") is not None and r["set"] == group)
        if errs:
            inside = sum(1 for r in rows if r.get("inside_band") and r["set"] == group)
            print(f"{group:8s}: |error| mean {sum(errs) / len(errs):.1%}, median {statistics.median(errs):.1%}, "
                  f"max {errs[-1]:.1%} over {len(errs)} cases; real time inside the 90% band in {inside}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
