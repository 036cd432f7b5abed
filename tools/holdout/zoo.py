"""Third-party models for held-out accuracy: HF transformers, timm and torchvision, built from
their configs (no downloads), trained for a few steps with the usual recipe of each family.

    python tools/holdout/zoo.py --model hf_llama --steps 10            # on a GPU
    phantora-prof python tools/holdout/zoo.py --model hf_llama         # simulated

Nothing here is simulator-specific: the same script runs on the H200 and under phantora-prof,
and prints `step N time_ms X` and a `RESULT {json}` line through loop.py. The models' code is
the libraries' own; only the size and the training loop are chosen here.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from loop import base_parser, run_loop

_TV_SCHEMAS: object = None  # keeps the registration below alive


def import_torchvision():
    """torchvision, also where its C++ extension cannot load.

    A torchvision wheel built for a CUDA torch fails to load its extension next to a CPU-only
    torch, and its import then stops at `register_fake("torchvision::nms")` because that op
    was never defined. The models used here need none of torchvision's C++ ops, so define the
    two schemas the import registers fakes for and import again. (With a matching torchvision
    build, as on the GPU machine, the first import succeeds and nothing is defined.)"""
    global _TV_SCHEMAS
    try:
        import torchvision

        return torchvision
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _TV_SCHEMAS = lib
    import torchvision

    return torchvision


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How the zoo's models train beyond the model itself (blind set 17, session 50): the numeric
    recipe and gradient accumulation. `bf16` is what every earlier set measured.

    - `bf16`: the forward under bf16 autocast;
    - `fp32`: no autocast, torch's default precision flags (cuDNN convolutions may use TF32,
      matmuls may not), as a script that never mentions precision trains;
    - `tf32`: fp32 with `torch.set_float32_matmul_precision("high")` (TF32 GEMMs);
    - `fp16`: fp16 autocast with `torch.amp.GradScaler` (scale, unscale, inf checks, update);
    - `bf16-weights`: the model's parameters cast to bf16 (`model.to(torch.bfloat16)`), no
      autocast: language models only (their inputs are token ids).
    `accum` micro-batches (the same inputs, each loss divided by `accum`) run per optimizer step."""

    precision: str = "bf16"
    accum: int = 1

    PRECISIONS = ("bf16", "fp32", "tf32", "fp16", "bf16-weights")

    def __post_init__(self):
        if self.precision not in self.PRECISIONS:
            raise SystemExit(f"--recipe must be one of {', '.join(self.PRECISIONS)}, not {self.precision!r}")
        if self.accum < 1:
            raise SystemExit(f"--accum must be at least 1, not {self.accum}")


RECIPE = Recipe()


def _train_step(forward, opt, loss_of=lambda out: out, autocast: bool = True):
    """A training step: the forward under bf16 autocast, its loss's backward, the optimizer's
    step and zero_grad (set to None), as the zoo's models all train. The forward's output
    (an HF model's whole ModelOutput, logits included) stays alive until the step ends, as in
    the scripts that measured the real runs: freeing the logits before the backward moves the
    peak memory (HF LLaMA: -593 MB, a regression of 2026-12-04 found by the held-out table).
    `RECIPE` changes the precision and the number of micro-batches (see Recipe); a model that
    trains without autocast (`autocast=False`) keeps that under every recipe."""
    recipe = RECIPE
    dtype = torch.float16 if recipe.precision == "fp16" else torch.bfloat16
    autocast = autocast and recipe.precision in ("bf16", "fp16")
    scaler = torch.amp.GradScaler("cuda") if recipe.precision == "fp16" else None

    def step(i):
        for _ in range(recipe.accum):
            with torch.autocast("cuda", dtype=dtype, enabled=autocast):
                out = forward()
            loss = loss_of(out)
            if recipe.accum > 1:
                loss = loss / recipe.accum
            (scaler.scale(loss) if scaler is not None else loss).backward()
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _loss(out):
    return out.loss


# ---------------------------------------------------------------- language models (HF transformers)

def _hf_causal_lm(name: str, a):
    import transformers as tf

    if name == "hf_llama":
        cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=a.dim or 1024, intermediate_size=2816,
                             num_hidden_layers=a.layers or 8, num_attention_heads=16, num_key_value_heads=4,
                             max_position_embeddings=a.seq)
        model = tf.LlamaForCausalLM(cfg)
    elif name == "hf_mistral":
        cfg = tf.MistralConfig(vocab_size=32000, hidden_size=a.dim or 1024, intermediate_size=3584,
                               num_hidden_layers=a.layers or 8, num_attention_heads=16, num_key_value_heads=8,
                               max_position_embeddings=a.seq, sliding_window=None)
        model = tf.MistralForCausalLM(cfg)
    elif name == "hf_qwen2":
        cfg = tf.Qwen2Config(vocab_size=32000, hidden_size=a.dim or 896, intermediate_size=4864,
                             num_hidden_layers=a.layers or 8, num_attention_heads=14, num_key_value_heads=2,
                             max_position_embeddings=a.seq)
        model = tf.Qwen2ForCausalLM(cfg)
    elif name == "hf_gpt2":
        cfg = tf.GPT2Config(n_positions=a.seq, n_embd=a.dim or 768, n_layer=a.layers or 12)  # dropout 0.1
        model = tf.GPT2LMHeadModel(cfg)
    elif name == "hf_gptneox":  # parallel attention + MLP, partial rotary (25%), GELU
        cfg = tf.GPTNeoXConfig(vocab_size=50304, hidden_size=a.dim or 1024, intermediate_size=4096,
                               num_hidden_layers=a.layers or 8, num_attention_heads=16, rotary_pct=0.25,
                               max_position_embeddings=a.seq)
        model = tf.GPTNeoXForCausalLM(cfg)
    elif name == "hf_opt":  # learned positions, ReLU MLP, pre-LN (OPT-350m-like width)
        cfg = tf.OPTConfig(vocab_size=50272, hidden_size=a.dim or 1024, ffn_dim=4096, num_hidden_layers=a.layers or 8,
                           num_attention_heads=16, max_position_embeddings=a.seq, word_embed_proj_dim=a.dim or 1024)
        model = tf.OPTForCausalLM(cfg)
    elif name == "hf_phi":  # parallel attention + MLP, partial rotary (50%), biased dense layers, LayerNorm
        cfg = tf.PhiConfig(vocab_size=51200, hidden_size=a.dim or 1024, intermediate_size=4096,
                           num_hidden_layers=a.layers or 8, num_attention_heads=16, partial_rotary_factor=0.5,
                           max_position_embeddings=a.seq)
        model = tf.PhiForCausalLM(cfg)
    elif name == "hf_gemma":  # GeGLU MLP, RMSNorm (1 + weight), multi-query attention, head_dim 256
        cfg = tf.GemmaConfig(vocab_size=32000, hidden_size=a.dim or 1024, intermediate_size=4096,
                             num_hidden_layers=a.layers or 8, num_attention_heads=4, num_key_value_heads=1,
                             head_dim=256, max_position_embeddings=a.seq)
        model = tf.GemmaForCausalLM(cfg)
    elif name == "hf_starcoder2":  # GQA, LayerNorm, biased GELU-tanh MLP
        cfg = tf.Starcoder2Config(vocab_size=49152, hidden_size=a.dim or 1024, intermediate_size=4096,
                                  num_hidden_layers=a.layers or 8, num_attention_heads=16, num_key_value_heads=4,
                                  max_position_embeddings=a.seq, sliding_window=None)
        model = tf.Starcoder2ForCausalLM(cfg)
    elif name == "hf_olmo":  # non-parametric LayerNorm, SwiGLU, no biases
        cfg = tf.OlmoConfig(vocab_size=50304, hidden_size=a.dim or 1024, intermediate_size=4096,
                            num_hidden_layers=a.layers or 8, num_attention_heads=16, max_position_embeddings=a.seq)
        model = tf.OlmoForCausalLM(cfg)
    elif name == "hf_falcon":  # multi-query attention, parallel attention + MLP, one LayerNorm, GELU
        cfg = tf.FalconConfig(vocab_size=50304, hidden_size=a.dim or 1024, num_hidden_layers=a.layers or 8,
                              num_attention_heads=16, multi_query=True, parallel_attn=True,
                              new_decoder_architecture=False, bias=False, max_position_embeddings=a.seq)
        model = tf.FalconForCausalLM(cfg)
    elif name == "hf_bloom":  # ALiBi position biases in a baddbmm attention, fused QKV, GELU (tanh)
        cfg = tf.BloomConfig(vocab_size=50304, hidden_size=a.dim or 1024, n_layer=a.layers or 8, n_head=16)
        model = tf.BloomForCausalLM(cfg)
    elif name == "hf_mixtral":  # sparse MoE: 8 experts, top-2 routing (transformers' default experts path)
        cfg = tf.MixtralConfig(vocab_size=32000, hidden_size=a.dim or 1024, intermediate_size=1792,
                               num_hidden_layers=a.layers or 8, num_attention_heads=16, num_key_value_heads=4,
                               num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=a.seq,
                               sliding_window=None)
        model = tf.MixtralForCausalLM(cfg)
    elif name == "hf_llama3_8b":  # blind set 12: Llama-3.1-8B's layer (GQA 32/8, SwiGLU 14336, 128k vocabulary)
        cfg = tf.LlamaConfig(vocab_size=128256, hidden_size=a.dim or 4096, intermediate_size=14336,
                             num_hidden_layers=a.layers or 4, num_attention_heads=32, num_key_value_heads=8,
                             rope_theta=500000.0, max_position_embeddings=a.seq)
        model = tf.LlamaForCausalLM(cfg)
    elif name == "hf_qwen25_7b":  # blind set 12: Qwen2.5-7B's layer (QKV bias, GQA 28/4, SwiGLU 18944, 152k vocabulary)
        cfg = tf.Qwen2Config(vocab_size=152064, hidden_size=a.dim or 3584, intermediate_size=18944,
                             num_hidden_layers=a.layers or 2, num_attention_heads=28, num_key_value_heads=4,
                             rope_theta=1000000.0, max_position_embeddings=a.seq, tie_word_embeddings=False)
        model = tf.Qwen2ForCausalLM(cfg)
    elif name == "hf_pythia_7b":  # blind set 12: Pythia-6.9B's layer (parallel attention + GELU MLP, 25% rotary)
        cfg = tf.GPTNeoXConfig(vocab_size=50432, hidden_size=a.dim or 4096, intermediate_size=16384,
                               num_hidden_layers=a.layers or 4, num_attention_heads=32, rotary_pct=0.25,
                               max_position_embeddings=a.seq)
        model = tf.GPTNeoXForCausalLM(cfg)
    elif name == "hf_gemma2":  # blind set 13: Gemma-2-2B's layer (GeGLU, logit soft-capping, alternating sliding window)
        cfg = tf.Gemma2Config(vocab_size=256000, hidden_size=a.dim or 2304, intermediate_size=9216,
                              num_hidden_layers=a.layers or 2, num_attention_heads=8, num_key_value_heads=4,
                              head_dim=256, max_position_embeddings=a.seq)
        model = tf.Gemma2ForCausalLM(cfg)
    elif name == "hf_gpt_bigcode":  # blind set 14: SantaCoder-like: multi-query attention, dropout 0.1, GELU-tanh
        cfg = tf.GPTBigCodeConfig(vocab_size=49152, n_positions=a.seq, n_embd=a.dim or 1024, n_layer=a.layers or 8,
                                  n_head=16, multi_query=True)
        model = tf.GPTBigCodeForCausalLM(cfg)
    elif name == "hf_qwen3":  # RMSNorm on every head's queries and keys, GQA, SwiGLU, head_dim 128
        cfg = tf.Qwen3Config(vocab_size=32000, hidden_size=a.dim or 1024, intermediate_size=3072,
                             num_hidden_layers=a.layers or 8, num_attention_heads=16, num_key_value_heads=8,
                             head_dim=128, max_position_embeddings=a.seq)
        model = tf.Qwen3ForCausalLM(cfg)
    elif name == "hf_phi3":  # blind set 22: Phi-3-mini's layer shape: fused qkv and gate_up projections, SwiGLU, MHA
        cfg = tf.Phi3Config(vocab_size=32064, hidden_size=a.dim or 1024, intermediate_size=2816,
                            num_hidden_layers=a.layers or 8, num_attention_heads=16, num_key_value_heads=16,
                            max_position_embeddings=a.seq, pad_token_id=0)
        model = tf.Phi3ForCausalLM(cfg)
    elif name == "hf_mamba":  # blind set 15: Mamba-130m's width, transformers' sequential selective scan
        # (no mamba-ssm kernels: the path a user without them gets, a Python loop over the sequence)
        cfg = tf.MambaConfig(vocab_size=32000, hidden_size=a.dim or 768, num_hidden_layers=a.layers or 4,
                             state_size=16, expand=2, conv_kernel=4, use_mambapy=False)
        return tf.MambaForCausalLM(cfg)  # no attention implementation to set
    else:
        raise SystemExit(f"unknown model {name}")
    model.config._attn_implementation = a.attn
    return model


# the small decoder every hf:TYPE model is built at (set where its config has the attribute, by
# transformers' own names or attribute_map aliases); vocabulary and length keep a step GPU-bound
_HF_SMALL = {"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4,
             "intermediate_size": 2816, "vocab_size": 32000, "max_position_embeddings": 4096,
             "head_dim": 64, "moe_intermediate_size": 704, "num_local_experts": 8, "num_experts": 8,
             "n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "kv_lora_rank": 256,
             "q_lora_rank": 512, "qk_rope_head_dim": 32, "qk_nope_head_dim": 32, "v_head_dim": 64,
             "n_group": 1, "topk_group": 1}


def _hf_generic_lm(model_type: str, a):
    """transformers' causal LM of `model_type` (AutoConfig.for_model) at the small size above, sdpa
    attention where the model has it; --dim / --layers override the size."""
    import transformers as tf

    cfg = tf.AutoConfig.for_model(model_type)
    small = dict(_HF_SMALL, **({"hidden_size": a.dim} if a.dim else {}),
                 **({"num_hidden_layers": a.layers} if a.layers else {}))
    if hasattr(cfg, "qk_rope_head_dim"):  # multi-head latent attention: its rotary part is the head_dim
        small["head_dim"] = small["qk_rope_head_dim"]
    for key, value in small.items():
        if hasattr(cfg, key):
            try:
                setattr(cfg, key, value)
            except AttributeError:  # a derived property (Jamba's layer_types)
                pass
    layer_types = getattr(cfg, "layer_types", None)
    if isinstance(layer_types, list) and len(layer_types) > cfg.num_hidden_layers:
        try:
            cfg.layer_types = layer_types[:cfg.num_hidden_layers]
        except AttributeError:
            pass
    if hasattr(cfg, "n_shared_experts") and cfg.n_shared_experts is None:
        cfg.n_shared_experts = 1
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):  # ids of the default vocabulary
        if isinstance(getattr(cfg, key, None), int) and getattr(cfg, key) >= cfg.vocab_size:
            setattr(cfg, key, cfg.vocab_size - 1)
    try:
        return tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    except ValueError:  # no sdpa path: the model's own attention
        return tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")


def _hf_lm_step(model, a, dev):
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (a.batch, a.seq), device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    return _train_step(lambda: model(input_ids=ids, labels=ids), opt, _loss)


def _hf_bert_step(model, a, dev):
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), device=dev)
    mask = torch.ones(a.batch, a.seq, dtype=torch.long, device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    return _train_step(lambda: model(input_ids=ids, attention_mask=mask, labels=ids), opt, _loss)


def _hf_longformer_step(model, a, dev):
    """Masked LM with local attention everywhere and global attention on the first token."""
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), device=dev)
    mask = torch.ones(a.batch, a.seq, dtype=torch.long, device=dev)
    global_mask = torch.zeros(a.batch, a.seq, dtype=torch.long, device=dev)
    global_mask[:, 0] = 1
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    return _train_step(lambda: model(input_ids=ids, attention_mask=mask, global_attention_mask=global_mask,
                                     labels=ids), opt, _loss)


def _hf_t5_step(model, a, dev):
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), device=dev)
    labels = torch.randint(0, model.config.vocab_size, (a.batch, a.seq // 4), device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    return _train_step(lambda: model(input_ids=ids, labels=labels), opt, _loss)


# ---------------------------------------------------------------- vision models (timm, torchvision)

def _vision_model(name: str):
    if name.startswith("timm_"):
        import_torchvision()
        import timm

        arch = {"timm_vit": "vit_base_patch16_224", "timm_convnext": "convnext_tiny",
                "timm_resnet50": "resnet50", "timm_regnet": "regnety_016", "timm_mixer": "mixer_b16_224",
                "timm_resnext": "resnext50_32x4d", "timm_poolformer": "poolformer_s12",
                "timm_maxvit": "maxvit_tiny_tf_224", "timm_levit": "levit_128s", "timm_nfnet": "eca_nfnet_l0",
                "timm_bit": "resnetv2_50x1_bit", "timm_convnextv2": "convnextv2_tiny",
                "timm_efficientvit": "efficientvit_b1", "timm_hrnet": "hrnet_w18", "timm_xcit": "xcit_tiny_12_p16_224",
                "timm_vit_large": "vit_large_patch16_224", "timm_eva02": "eva02_base_patch14_224",
                "timm_ghostnet": "ghostnet_100", "timm_pvt_v2": "pvt_v2_b2", "timm_resnest": "resnest50d",
                "timm_sequencer": "sequencer2d_s", "timm_res2net": "res2net50_26w_4s", "timm_davit": "davit_tiny",
                "timm_fastvit": "fastvit_sa12", "timm_hiera": "hiera_tiny_224"}[name]
        return timm.create_model(arch, pretrained=False)
    tv = import_torchvision()
    arch = {"tv_resnet50": "resnet50", "tv_mobilenet": "mobilenet_v3_large",
            "tv_efficientnet": "efficientnet_b0", "tv_swin": "swin_t", "tv_densenet": "densenet121",
            "tv_shufflenet": "shufflenet_v2_x1_0", "tv_regnet_x": "regnet_x_1_6gf",
            "tv_vgg": "vgg11_bn", "tv_mnasnet": "mnasnet1_0", "tv_googlenet": "googlenet",
            "tv_vit_b32": "vit_b_32", "tv_resnet152": "resnet152", "tv_convnext_base": "convnext_base",
            "tv_efficientnet_v2": "efficientnet_v2_s"}[name]
    if arch == "googlenet":
        # without the auxiliary heads a training-mode GoogLeNet returns its logits as a tensor, so
        # _MainLogits passes them through; it stays because blind set 7's real runs
        # (real_h200/session25/) were measured with it (one more module call per step)
        return _MainLogits(tv.models.googlenet(aux_logits=False, init_weights=True))
    return getattr(tv.models, arch)()


class _MainLogits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        out = self.m(x)
        return out.logits if hasattr(out, "logits") else out


def _vision_step(model, a, dev, channels_last: bool, sgd: bool):
    x = torch.randn(a.batch, 3, a.image, a.image, device=dev)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4) if sgd
           else torch.optim.AdamW(model.parameters(), lr=1e-4))

    return _train_step(lambda: F.cross_entropy(model(x), y), opt)


# ---------------------------------------------------------------- blind set 6: speech, contrastive, video

def _hf_speech_or_clip(name: str, a):
    import transformers as tf

    if name == "hf_whisper":  # whisper-base: conv1d front end, encoder-decoder with cross-attention
        cfg = tf.WhisperConfig(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                               decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                               attn_implementation="sdpa")
        return tf.WhisperForConditionalGeneration(cfg)
    if name == "hf_wav2vec2":  # wav2vec2-base with a CTC head: 7 strided conv1d, weight-normed positional conv
        cfg = tf.Wav2Vec2Config(vocab_size=32, attn_implementation="sdpa")
        return tf.Wav2Vec2ForCTC(cfg)
    if name == "hf_hubert":  # blind set 14: hubert-base with a CTC head (weight-normed positional conv, CTC)
        cfg = tf.HubertConfig(vocab_size=32, attn_implementation="sdpa")
        return tf.HubertForCTC(cfg)
    if name == "hf_clip":  # CLIP ViT-B/32 image tower + 12-layer text tower, contrastive loss
        cfg = tf.CLIPConfig(attn_implementation="sdpa")
        return tf.CLIPModel(cfg)
    raise SystemExit(f"unknown model {name}")


def _hf_speech_or_clip_step(model, a, dev):
    name = a.model
    g = torch.Generator(device="cpu").manual_seed(0)
    if name == "hf_whisper":
        inputs = {"input_features": torch.randn(a.batch, 80, 3000, generator=g).to(dev),
                  "labels": torch.randint(0, model.config.vocab_size, (a.batch, a.seq), generator=g).to(dev)}
    elif name in ("hf_wav2vec2", "hf_hubert"):
        inputs = {"input_values": torch.randn(a.batch, a.seq, generator=g).to(dev),
                  "labels": torch.randint(1, model.config.vocab_size, (a.batch, 64), generator=g).to(dev)}
    else:
        inputs = {"input_ids": torch.randint(0, model.config.text_config.vocab_size, (a.batch, 77), generator=g).to(dev),
                  "pixel_values": torch.randn(a.batch, 3, 224, 224, generator=g).to(dev), "return_loss": True}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    return _train_step(lambda: model(**inputs), opt, _loss)


def _video_step(model, a, dev):
    """torchvision's video ResNets take (batch, 3, frames, height, width); 16 frames of 112 x 112."""
    x = torch.randn(a.batch, 3, 16, a.image, a.image, device=dev)
    y = torch.randint(0, 400, (a.batch,), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    return _train_step(lambda: F.cross_entropy(model(x), y), opt)


def _hf_segformer_step(model, a, dev):
    """Semantic segmentation as HF trains it: logits at a quarter of the image, upsampled
    bilinearly to the labels' size inside the model's loss (cross entropy over 150 classes)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    pixels = torch.randn(a.batch, 3, a.image, a.image, generator=g).to(dev)
    labels = torch.randint(0, model.config.num_labels, (a.batch, a.image, a.image), generator=g).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    return _train_step(lambda: model(pixel_values=pixels, labels=labels), opt, _loss)


def _tv_segmentation_step(model, a, dev):
    """torchvision's segmentation recipe: channels-last, SGD with momentum, per-pixel cross entropy
    over 21 classes on the model's full-resolution `out` (bilinear upsampling inside the model)."""
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(a.batch, 3, a.image, a.image, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 21, (a.batch, a.image, a.image), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)

    return _train_step(lambda: F.cross_entropy(model(x)["out"], y), opt)


def _hf_pixels_step(model, a, dev, labels: bool = False):
    """Image models that take `pixel_values` (and class labels, for classifiers) and return their
    loss, as HF trains them; ViT-MAE draws its random mask inside the model at every step."""
    g = torch.Generator(device="cpu").manual_seed(0)
    inputs = {"pixel_values": torch.randn(a.batch, 3, a.image, a.image, generator=g).to(dev)}
    if labels:
        inputs["labels"] = torch.randint(0, model.config.num_labels, (a.batch,), generator=g).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    return _train_step(lambda: model(**inputs), opt, _loss)


def _hf_detr_step(model, a, dev):
    """COCO-style detection as HF trains DETR: images with a pixel mask and, per image, a few
    boxes (normalised cx, cy, w, h) with class labels; the loss matches the 100 predictions to
    them with scipy's Hungarian solver on the host (a .cpu() of the cost matrix every step)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    pixels = torch.randn(a.batch, 3, a.image, a.image, generator=g).to(dev)
    mask = torch.ones(a.batch, a.image, a.image, dtype=torch.long, device=dev)
    labels = []
    for i in range(a.batch):
        n = 3 + i % 5
        centre = torch.rand(n, 2, generator=g) * 0.6 + 0.2
        size = torch.rand(n, 2, generator=g) * 0.3 + 0.05
        labels.append({"class_labels": torch.randint(0, 91, (n,), generator=g).to(dev),
                       "boxes": torch.cat([centre, size], dim=1).to(dev)})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4)

    return _train_step(lambda: model(pixel_values=pixels, pixel_mask=mask, labels=labels), opt, _loss)


# ---------------------------------------------------------------- blind set 11: auxiliary heads, optical flow

def _tv_inception_step(model, a, dev):
    """Inception-v3 in training mode returns its logits and the auxiliary head's; torchvision's
    reference recipe adds the auxiliary loss at 0.4 (channels-last, SGD as the other CNNs)."""
    x = torch.randn(a.batch, 3, a.image, a.image, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def loss_of(out):
        return F.cross_entropy(out.logits, y) + 0.4 * F.cross_entropy(out.aux_logits, y)

    return _train_step(lambda: model(x), opt, loss_of)


def _tv_raft_step(model, a, dev):
    """RAFT-small on image pairs of FlyingChairs' crop size (368 x 496): correlation pyramid,
    grid_sample lookups, 12 recurrent refinements; RAFT's sequence loss (L1, weights 0.8^(N-i))
    against a random flow field, AdamW as torchvision's optical-flow recipe."""
    h, w = 368, 496
    g = torch.Generator(device="cpu").manual_seed(0)
    im1 = torch.randn(a.batch, 3, h, w, generator=g).to(dev)
    im2 = torch.randn(a.batch, 3, h, w, generator=g).to(dev)
    flow = torch.randn(a.batch, 2, h, w, generator=g).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=1e-4)

    def loss_of(preds):
        n = len(preds)
        return sum(0.8 ** (n - i - 1) * (p - flow).abs().mean() for i, p in enumerate(preds))

    return _train_step(lambda: model(im1, im2), opt, loss_of)


# ---------------------------------------------------------------- recurrent (cuDNN RNN)

class LstmLM(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, cell=nn.LSTM):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = cell(dim, dim, layers, batch_first=True)
        self.out = nn.Linear(dim, vocab)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.out(h)


def _lstm_step(model, a, dev):
    ids = torch.randint(0, 10000, (a.batch, a.seq), device=dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(i):
        logits = model(ids)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), ids.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


MODELS = {
    # name: (default batch, default seq or image size)
    "hf_llama": (4, 2048), "hf_mistral": (4, 2048), "hf_qwen2": (4, 2048), "hf_gpt2": (8, 1024),
    "hf_bert": (32, 512), "hf_t5": (16, 512),
    "timm_vit": (64, 224), "timm_convnext": (64, 224), "timm_resnet50": (128, 224),
    "tv_resnet50": (128, 224), "tv_mobilenet": (128, 224), "tv_efficientnet": (128, 224),
    "lstm": (64, 256),
    # blind set 2 (added 2026-12-01, session 6): measured once on the H200, compared, not tuned on
    "hf_gptneox": (4, 2048), "hf_opt": (4, 2048), "timm_regnet": (128, 224), "tv_swin": (64, 224),
    "tv_densenet": (64, 224),
    # blind set 3 (added 2026-12-01, session 7): chosen before any run, measured once, not tuned on
    "hf_phi": (4, 2048), "hf_gemma": (4, 2048), "timm_mixer": (64, 224), "tv_shufflenet": (128, 224),
    # blind set 4 (added 2026-12-02, session 10): chosen before any run, measured once at the end of
    # that session's changes, compared once
    "hf_starcoder2": (4, 2048), "hf_olmo": (4, 2048), "timm_resnext": (128, 224), "tv_regnet_x": (128, 224),
    # blind set 5 (added 2026-12-02, session 11): chosen before any run, measured once at the end of
    # that session's changes, compared once
    "hf_falcon": (4, 2048), "timm_poolformer": (128, 224), "tv_vgg": (64, 224), "tv_mnasnet": (128, 224),
    # blind set 6 (added 2026-12-04, session 21): chosen before any run; families none of the sets
    # above has (speech front ends, CTC, cross-attention, contrastive towers, 3-D convolutions,
    # windowed / grid attention with MBConv). --seq: decoder tokens (whisper), audio samples (wav2vec2)
    "hf_whisper": (16, 128), "hf_wav2vec2": (8, 64000), "hf_clip": (128, 224), "tv_r3d": (16, 112),
    "timm_maxvit": (64, 224),
    # blind set 7 (added 2026-12-04, session 25): chosen before any run; families none of the sets
    # above has (per-head query/key RMSNorm, disentangled relative attention, attention-biased
    # conv-transformer hybrid with BatchNorm'd linears, Inception branches)
    "hf_qwen3": (4, 2048), "hf_deberta": (16, 512), "timm_levit": (256, 224), "tv_googlenet": (128, 224),
    # blind set 8 (added 2026-12-05, session 29): chosen before any run; families none of the sets
    # above has (ALiBi baddbmm attention, alternating local / global attention with GeGLU, semantic
    # segmentation with bilinear upsampling and a per-pixel loss, weight-standardised convolutions
    # with ECA, nn.MultiheadAttention)
    "hf_bloom": (4, 2048), "hf_modernbert": (16, 512), "hf_segformer": (16, 512), "timm_nfnet": (64, 224),
    "tv_vit_b32": (128, 224),
    # blind set 9 (added 2026-12-05, session 32): chosen before any run; families none of the sets
    # above has (masked-autoencoder pretraining: argsort / gather of random patch subsets and a
    # pixel loss; MobileViT's unfold of feature maps into patches; GroupNorm with weight-standardised
    # convolutions; cuDNN GRU; BART's learned positions in an encoder-decoder)
    "hf_vit_mae": (64, 224), "hf_mobilevit": (64, 256), "timm_bit": (64, 224), "gru": (64, 256),
    "hf_bart": (16, 512),
    # blind set 10 (added 2026-12-05, session 33): chosen before any run; families none of the sets
    # above has (sparse mixture-of-experts routing, dilated convolutions with atrous spatial pyramid
    # pooling, Swin-v2's cosine attention with a continuous position-bias MLP, ConvNeXt-v2's global
    # response normalisation, EfficientViT's ReLU linear attention with hard-swish MBConvs)
    "hf_mixtral": (4, 2048), "tv_deeplabv3": (16, 512), "hf_swinv2": (64, 256), "timm_convnextv2": (64, 224),
    "timm_efficientvit": (128, 224),
    # blind set 11 (session 36): multi-resolution branches, cross-covariance attention, XLNet's
    # two-stream relative attention, Inception's auxiliary head, RAFT's iterative optical flow
    "timm_hrnet": (64, 224), "timm_xcit": (64, 224), "hf_xlnet": (8, 512), "tv_inception": (64, 299),
    "tv_raft": (8, 368),
    # blind set 12 (session 37): at the scale users train, GPU-bound where every earlier set was small:
    # 7-8B LLMs' layers at 8k tokens (a few layers, the full vocabulary), ViT-L/16, ResNet-152
    "hf_llama3_8b": (1, 8192), "hf_qwen25_7b": (1, 8192), "hf_pythia_7b": (2, 2048), "timm_vit_large": (64, 224),
    "tv_resnet152": (128, 224),
    # blind set 13 (session 38): Gemma-2's soft-capped attention and 256k vocabulary, RoBERTa-large,
    # EVA-02's rotary ViT with SwiGLU, GhostNet's cheap operations (convolutions over 12..100
    # channels, not multiples of 8), torchvision's ConvNeXt-B
    "hf_gemma2": (1, 4096), "hf_roberta": (8, 512), "timm_eva02": (64, 224), "timm_ghostnet": (256, 224),
    "tv_convnext_base": (64, 224),
    # blind set 14 (session 46): chosen before any run, after that session's fixes, families they touch
    # at shapes off their sweeps' grids: HuBERT-base with CTC on 6 s of audio (299 frames, batch 6),
    # a multi-query GPTBigCode with causal attention and dropout, torchvision's LR-ASPP segmentation
    "hf_hubert": (6, 96000), "hf_gpt_bigcode": (4, 2048), "tv_lraspp": (24, 512),
    # blind set 15 (session 48): chosen before any run, families none of the sets above has: Mamba's
    # selective scan as transformers runs it without custom kernels (a launch-bound loop over 256
    # tokens, depthwise causal conv1d), Longformer's sliding-window chunked attention (as_strided,
    # padding, banded einsums), FNet's Fourier mixing (cuFFT), PVT-v2's spatial-reduction attention,
    # ResNeSt's split attention (radix softmax over grouped convolutions)
    "hf_mamba": (8, 256), "hf_longformer": (8, 1024), "hf_fnet": (16, 512), "timm_pvt_v2": (64, 224),
    "timm_resnest": (64, 224),
    # blind set 16 (session 49): chosen before any run, families none of the sets above has: ALBERT's
    # cross-layer parameter sharing with a factorised embedding, DETR's set-prediction detection
    # (ResNet-50 with frozen batch norm, an encoder-decoder over image features, Hungarian matching
    # in scipy on the host, GIoU box loss), Sequencer2D's bidirectional LSTMs over rows and columns
    # of feature maps, Res2Net's hierarchical split convolutions, DaViT's channel-group attention
    "hf_albert": (16, 512), "hf_detr": (8, 512), "timm_sequencer": (64, 224), "timm_res2net": (64, 224),
    "timm_davit": (64, 224),
    # blind set 22 (session 52): chosen before any run, architectures none of the sets above has:
    # Phi-3's fused qkv / gate_up projections (chunked in the forward), Funnel-Transformer's pooled
    # sequence with relative attention, FastViT's train-time multi-branch reparameterisable blocks
    # with large-kernel depthwise convolutions, EfficientNetV2's fused-MBConv stages at 300 px,
    # Hiera's mask-unit attention with unroll / reroll permutes
    "hf_phi3": (4, 2048), "hf_funnel": (16, 512), "timm_fastvit": (64, 256), "tv_efficientnet_v2": (64, 300),
    "timm_hiera": (64, 224),
}


# timm:ARCH, tv:ARCH: any image classifier of those libraries; hf:TYPE: any causal language model
# of transformers by its model type, at a small size (_hf_generic_lm)
GENERIC_PREFIXES = ("timm:", "tv:", "hf:")
GENERIC_DEFAULTS = (32, 224)


def _model_name(name: str) -> str:
    if name in MODELS or (name.startswith(GENERIC_PREFIXES) and name.split(":", 1)[1]):
        return name
    raise argparse.ArgumentTypeError(f"unknown model {name!r}: one of the zoo's ({', '.join(sorted(MODELS))}), "
                                     "or timm:ARCH / tv:ARCH")


def parser() -> argparse.ArgumentParser:
    """The zoo's command line (main's; host_interleaved.py parses each case's arguments with it)."""
    p = base_parser(__doc__)
    p.add_argument("--model", required=True, type=_model_name,
                   help=f"one of {', '.join(sorted(MODELS))}; or any image classifier as timm:ARCH "
                        "(timm.create_model) or tv:ARCH (torchvision.models), default batch 32 at 224 px")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--seq", type=int, default=None, help="sequence length (language models)")
    p.add_argument("--image", type=int, default=None, help="image size (vision models)")
    p.add_argument("--dim", type=int, default=None, help="hidden size (language models; default per model)")
    p.add_argument("--layers", type=int, default=None, help="layers (language models; default per model)")
    p.add_argument("--nchw", action="store_true", help="vision models: keep NCHW (default: channels-last)")
    p.add_argument("--compile", action="store_true", help="wrap the model in torch.compile (default mode)")
    p.add_argument("--compile-mode", default=None, choices=("reduce-overhead", "max-autotune-no-cudagraphs"),
                   help="with --compile: torch.compile's mode (default: its default mode)")
    p.add_argument("--attn", default="sdpa", choices=("sdpa", "flex_attention", "eager"),
                   help="HF causal language models: the attention implementation")
    p.add_argument("--recipe", default="bf16", choices=Recipe.PRECISIONS,
                   help="numeric recipe (default bf16 autocast; see Recipe)")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step (gradient accumulation)")
    p.add_argument("--grad-ckpt", action="store_true",
                   help="activation checkpointing: HF's gradient_checkpointing_enable(), timm's set_grad_checkpointing()")
    return p


def main() -> None:
    a = parser().parse_args()
    model, step = build(a)
    meta = {"workload": f"zoo:{a.model}", "params": sum(p.numel() for p in model.parameters()),
            **{k: v for k, v in vars(a).items() if k != "profile_dir"}}
    run_loop(a, step, meta)


def build(a: argparse.Namespace) -> tuple[torch.nn.Module, Callable[[int], None]]:
    """The model and its training step for parsed arguments `a` (main's; also
    host_interleaved.py, which builds several in one process)."""
    batch, size = MODELS.get(a.model, GENERIC_DEFAULTS)
    a.batch = a.batch or batch
    a.seq = a.seq or size
    a.image = a.image or size
    torch.manual_seed(0)
    dev = torch.device(a.device)
    global RECIPE
    RECIPE = Recipe(getattr(a, "recipe", "bf16"), getattr(a, "accum", 1))
    if RECIPE.precision == "tf32":
        torch.set_float32_matmul_precision("high")
    import_torchvision()  # transformers and timm import it when it is installed
    name = a.model
    if name in ("hf_llama", "hf_mistral", "hf_qwen2", "hf_gpt2", "hf_gptneox", "hf_opt", "hf_phi", "hf_gemma",
                "hf_starcoder2", "hf_olmo", "hf_falcon", "hf_qwen3", "hf_bloom", "hf_mixtral", "hf_llama3_8b",
                "hf_qwen25_7b", "hf_pythia_7b", "hf_gemma2", "hf_gpt_bigcode", "hf_mamba", "hf_phi3"):
        model = _hf_causal_lm(name, a).to(dev)
        step = _hf_lm_step(model, a, dev)
    elif name == "hf_bert":
        import transformers as tf

        model = tf.BertForMaskedLM(tf.BertConfig(max_position_embeddings=a.seq, attn_implementation="sdpa")).to(dev)
        step = _hf_bert_step(model, a, dev)
    elif name == "hf_roberta":  # blind set 13: RoBERTa-large (24 layers x 1024, learned positions, GELU)
        import transformers as tf

        cfg = tf.RobertaConfig(vocab_size=50265, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                               intermediate_size=4096, max_position_embeddings=a.seq + 2, attn_implementation="sdpa")
        model = tf.RobertaForMaskedLM(cfg).to(dev)
        step = _hf_bert_step(model, a, dev)
    elif name == "hf_longformer":  # blind set 15: longformer-base: sliding windows of 256, global CLS token
        import transformers as tf

        cfg = tf.LongformerConfig(vocab_size=50265, attention_window=256, max_position_embeddings=a.seq + 2)
        model = tf.LongformerForMaskedLM(cfg).to(dev)
        step = _hf_longformer_step(model, a, dev)
    elif name == "hf_fnet":  # blind set 15: FNet-base: token mixing by a 2-D FFT instead of attention
        import transformers as tf

        model = tf.FNetForMaskedLM(tf.FNetConfig(max_position_embeddings=a.seq)).to(dev)
        ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), device=dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        # fp32: torch's FFTs take no bfloat16 (on CUDA too) and half only at power-of-two sizes
        step = _train_step(lambda: model(input_ids=ids, labels=ids), opt, _loss, autocast=False)
    elif name == "hf_albert":  # blind set 16: albert-base-v2: one layer's weights shared by 12, 128-wide embedding
        import transformers as tf

        cfg = tf.AlbertConfig(vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12,
                              num_attention_heads=12, intermediate_size=3072, max_position_embeddings=a.seq,
                              attn_implementation="sdpa")
        model = tf.AlbertForMaskedLM(cfg).to(dev)
        step = _hf_bert_step(model, a, dev)
    elif name == "hf_funnel":  # blind set 22: Funnel-Transformer base: the sequence pooled 2x per block,
        # relative-position attention in einsums, a decoder that upsamples back for MLM
        import transformers as tf

        model = tf.FunnelForMaskedLM(tf.FunnelConfig(vocab_size=30522)).to(dev)
        step = _hf_bert_step(model, a, dev)
    elif name == "hf_detr":  # blind set 16: DETR-R50 (transformers' own ResNet), 100 queries, Hungarian matching
        import transformers as tf

        # the backbone from its config, never by name: transformers 5.17 looked "resnet50" up on the hub
        cfg = tf.DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, backbone=None,
                            backbone_config=tf.ResNetConfig(out_features=["stage4"]), num_labels=91)
        model = tf.DetrForObjectDetection(cfg).to(dev)
        step = _hf_detr_step(model, a, dev)
    elif name == "hf_deberta":  # DeBERTa-v3-base-like: disentangled attention with relative positions
        import transformers as tf

        cfg = tf.DebertaV2Config(vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                 intermediate_size=3072, max_position_embeddings=a.seq, relative_attention=True,
                                 position_buckets=256, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
                                 share_att_key=True, position_biased_input=False)
        model = tf.DebertaV2ForMaskedLM(cfg).to(dev)
        step = _hf_bert_step(model, a, dev)
    elif name == "hf_modernbert":  # ModernBERT-base: RoPE, GeGLU, global attention every third layer
        import transformers as tf

        cfg = tf.ModernBertConfig(max_position_embeddings=a.seq, attn_implementation="sdpa")
        model = tf.ModernBertForMaskedLM(cfg).to(dev)
        step = _hf_bert_step(model, a, dev)
    elif name == "hf_segformer":  # SegFormer-B0 (MiT-b0 encoder, all-MLP decoder), ADE20k's 150 classes
        import transformers as tf

        model = tf.SegformerForSemanticSegmentation(tf.SegformerConfig(num_labels=150)).to(dev)
        step = _hf_segformer_step(model, a, dev)
    elif name == "hf_vit_mae":  # ViT-MAE base: 75% of the patches masked at random, an 8-layer decoder
        import transformers as tf

        model = tf.ViTMAEForPreTraining(tf.ViTMAEConfig(attn_implementation="sdpa")).to(dev)
        step = _hf_pixels_step(model, a, dev)
    elif name == "hf_mobilevit":  # MobileViT-small: MobileNetV2 blocks and transformers over unfolded patches
        import transformers as tf

        model = tf.MobileViTForImageClassification(tf.MobileViTConfig(num_labels=1000)).to(dev)
        step = _hf_pixels_step(model, a, dev, labels=True)
    elif name == "hf_bart":  # bart-base: learned positions, GELU, encoder-decoder, 50k vocabulary
        import transformers as tf

        cfg = tf.BartConfig(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                            decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072,
                            max_position_embeddings=a.seq, attn_implementation="sdpa")
        model = tf.BartForConditionalGeneration(cfg).to(dev)
        step = _hf_t5_step(model, a, dev)
    elif name == "hf_swinv2":  # Swin-v2 tiny, window 8: cosine attention, log-spaced position-bias MLP
        import transformers as tf

        cfg = tf.Swinv2Config(image_size=a.image, window_size=8, num_labels=1000)
        model = tf.Swinv2ForImageClassification(cfg).to(dev)
        step = _hf_pixels_step(model, a, dev, labels=True)
    elif name == "tv_lraspp":  # blind set 14: LR-ASPP MobileNetV3-Large: pooled attention branch, bilinear upsampling
        seg = import_torchvision().models.segmentation
        model = seg.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21).to(dev)
        step = _tv_segmentation_step(model, a, dev)
    elif name == "tv_deeplabv3":  # DeepLabV3-ResNet50: dilated last stages, ASPP, 21 classes
        seg = import_torchvision().models.segmentation
        model = seg.deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=21, aux_loss=False).to(dev)
        step = _tv_segmentation_step(model, a, dev)
    elif name == "hf_xlnet":  # xlnet-base-cased's shape: relative positional attention in einsums
        import transformers as tf

        model = tf.XLNetLMHeadModel(tf.XLNetConfig(vocab_size=32000, d_model=768, n_layer=12, n_head=12,
                                                   d_inner=3072)).to(dev)
        step = _hf_lm_step(model, a, dev)
    elif name == "tv_inception":  # Inception-v3 with its auxiliary classifier (training mode)
        model = import_torchvision().models.inception_v3(weights=None, aux_logits=True, init_weights=True).to(dev)
        step = _tv_inception_step(model, a, dev)
    elif name == "tv_raft":  # RAFT-small optical flow, 12 flow updates (torchvision's default)
        model = import_torchvision().models.optical_flow.raft_small(weights=None).to(dev)
        step = _tv_raft_step(model, a, dev)
    elif name == "hf_t5":
        import transformers as tf

        model = tf.T5ForConditionalGeneration(tf.T5Config(decoder_start_token_id=0, pad_token_id=0)).to(dev)  # t5-small
        step = _hf_t5_step(model, a, dev)
    elif name in ("hf_whisper", "hf_wav2vec2", "hf_clip", "hf_hubert"):
        model = _hf_speech_or_clip(name, a).to(dev)
        step = _hf_speech_or_clip_step(model, a, dev)
    elif name == "tv_r3d":
        model = import_torchvision().models.video.r3d_18().to(dev)
        step = _video_step(model, a, dev)
    elif name == "lstm":
        model = LstmLM(10000, a.dim or 1024, a.layers or 2).to(dev)
        step = _lstm_step(model, a, dev)
    elif name == "gru":
        model = LstmLM(10000, a.dim or 1024, a.layers or 2, cell=nn.GRU).to(dev)
        step = _lstm_step(model, a, dev)
    elif name.startswith("hf:"):
        model = _hf_generic_lm(name.split(":", 1)[1], a).to(dev)
        step = _hf_lm_step(model, a, dev)
    elif name.startswith(GENERIC_PREFIXES):  # an image classifier of timm or torchvision, default config
        lib, arch = name.split(":", 1)
        if lib == "timm":
            import timm

            model = timm.create_model(arch, pretrained=False, num_classes=1000)
        else:
            model = import_torchvision().models.get_model(arch, weights=None, num_classes=1000)
        model = _MainLogits(model).to(dev)  # Inception-style training outputs: their logits
        step = _vision_step(model, a, dev, channels_last=not a.nchw, sgd=False)
    else:
        model = _vision_model(name).to(dev)
        step = _vision_step(model, a, dev, channels_last=not a.nchw, sgd="resnet" in name or "mobilenet" in name)
    if RECIPE.precision == "bf16-weights":
        if not hasattr(model, "config"):
            raise SystemExit("--recipe bf16-weights is for the HF language models (token-id inputs)")
        model.to(torch.bfloat16)  # in place: the optimizer above holds the same Parameters
    if getattr(a, "grad_ckpt", False):
        if hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable()
        elif hasattr(model, "set_grad_checkpointing"):
            model.set_grad_checkpointing(True)
        else:
            raise SystemExit(f"--grad-ckpt: {a.model} has no checkpointing switch (HF or timm models only)")
    if a.compile:
        # in place: the step functions above hold the module itself
        model.compile(**({"mode": a.compile_mode} if a.compile_mode else {}))
    return model, step


if __name__ == "__main__":
    main()
