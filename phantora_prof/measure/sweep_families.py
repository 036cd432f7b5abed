"""Kernel families in training context: one profiled sweep on a real GPU (plain torch).

Where measure_kernels.py times single ops in isolation (L2 evicted), this runs small
forward + backward programs per family, the way training runs them (kernels back to back, a
warm L2), over a generic grid of shapes, and records them under torch.profiler with
`record_shapes`. Each configuration is wrapped in a `record_function("sweep:{json}")` range,
so the trace says which ops and kernels belong to which configuration. Families:

    conv        conv2d + batch norm + ReLU blocks: 1x1, 3x3, depthwise 3/5/7, strided, stems,
                patchify; channels-last and NCHW; bf16 autocast and fp32 (TF32 as cuDNN defaults)
    conv_grouped  the same blocks with grouped 3x3 convolutions (group widths 4..128, stride 1
                and 2) and strided depthwise 3x3 / 5x5
    conv_grouped2  grouped 3x3 convolutions of group widths that are not powers of two (12..240)
    conv1d      1-D convolutions: dense, strided front ends, depthwise, grouped wide kernels
    conv3d      3-D convolutions: 3x3x3, strided, 1x1x1, factorised, depthwise, stems; both layouts
    pool        max_pool2d 3/2, avg_pool2d 2/2, adaptive_avg_pool2d(1); both layouts and dtypes
    pool_windows  avg_pool2d 3/1 (count_include_pad=False) and max_pool2d 3/1
    pointwise   activations and binary ops on channels-last and strided tensors, their backwards
    copies      permutes, transposes, repeat_interleave, RoPE, cat, expand + contiguous
    cat_cache   cat onto an empty tensor (HF's key/value caches), keys contiguous and transposed
    attention   SDPA per backend (cuDNN, flash, efficient) with dropout, GQA, masks, causal, a
                learned additive bias (with its gradient)
    norms       layer_norm, rms_norm (fused), group_norm, fwd + bwd
    norms_narrow  layer_norm / rms_norm over short rows (64..512 wide: ConvNeXt / Swin / MLP-Mixer
                layers normalise channels, where one block per row leaves the GPU idle)
    reductions  sum / mean over: the batch and spatial dims of channels-last and NCHW maps (a
                bias gradient), the leading dim of a 2-D gradient (a linear's bias), the last dim
    reductions_cols  column sums with 49..1000 columns (token-count and classifier widths)
    reductions_outer  column sums over a dense rows x columns grid (16..4096 columns), each call
                after the L2 is overwritten (cold, as a bias gradient reads its input in training)
    losses      cross_entropy over vocabularies, fp32 and bf16 logits
    embedding   embedding fwd + bwd
    optim       foreach AdamW / SGD-momentum / fused AdamW steps over parameter lists
    rnn         cuDNN LSTM / GRU fwd + bwd
    conv_patch  patch embeddings (kernel = stride: 4, 8, 14, 16, 32) and ECA's 1-channel conv1d
                over a channel vector (k 3, 5, 7)
    norms_tiny  layer_norm / rms_norm over rows of 16..48 (SegFormer's first stage: 32 channels)
    pointwise_views  GeGLU / SwiGLU halves (activations on chunked, row-strided views) and a
                convolution's bias added in place over a map (both layouts)
    attention_sr  attention of long queries over short keys (SegFormer / PVT spatial-reduction
                attention: 16,384 queries over 256 keys), per backend
    conv_sr     strided stems and spatial-reduction convolutions of pyramid vision transformers
                (7x7 / 4 over 512 x 512 images; k x k / k, k = 2..8, over 32..320 channels)
    conv_wide   1x1 convolutions of many input channels over large maps (segmentation decoders'
                fusion: 1024 -> 256 at 128 x 128)
    upsample    bilinear and nearest upsampling (x2, x4, x8) of NCHW and channels-last maps, fwd + bwd
    spatial     softmax / log_softmax over the channels of a map (dim 1) and cross entropy over
                per-pixel logits (nll_loss2d), both layouts: segmentation heads
    sync_bn     SyncBatchNorm's statistics / elementwise kernels, forward and backward (its
                collectives left out: one GPU), both layouts and dtypes
    rnn_cell    nn.GRUCell / nn.LSTMCell steps: two GEMMs and ATen's fused cell, fwd + bwd
    conv_grouped_1x1  grouped 1x1 convolutions (group widths 8..64, powers of two and not):
                cuDNN's per-group loop of slice, dgrad and wgrad kernels
    conv_dilated  dilated 3x3 convolutions (dilation 2..36: DeepLab's atrous stages and ASPP)
    conv_dw_dilated  dilated depthwise 3x3 / 5x5 convolutions (MobileNet backbones for segmentation)
    conv_maps   dense convolutions over maps the conv grid has not (odd and even sizes 9..75) and
                asymmetric kernels (1x3 / 3x1, 1x5 / 5x1, 1x7 / 7x1: factorised convolutions)
    upsample_pool  bilinear upsampling from pooled grids (1..32 -> x10..x64: ASPP / pyramid pooling)
    conv_unaligned  dense convolutions whose channel counts are not multiples of 8 (multiples of 4
                and of 2: 12..60 channels), 3x3 / 1x1 / strided, in and out of aligned widths:
                cuDNN pads 16-bit channels-last operands (nhwcAddPaddingKernel) and runs other kernels
    conv_dw_multiplier  depthwise convolutions with a channel multiplier (groups = C_in, C_out = 2 or
                4 x C_in; 1x1..7x7, stride 1 and 2) and depthwise 1x1 ones: cuDNN runs some as a
                loop of one kernel per group

    python -m phantora_prof.measure.sweep_families --out sweep.pt.trace.json.gz [--only conv,pool]

The grid is generic (log-spaced sizes, the usual layer patterns), not the held-out models'
shapes. `phantora-prof calibrate families` (phantora_prof/calibrate/families.py) turns the trace into the
per-family curves the cost model interpolates.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DEV = "cuda"
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SDP_BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}


def _backward(y: torch.Tensor, state: dict) -> None:
    """Backpropagate a dense gradient shaped (and laid out) like y, as training does.

    `y.sum().backward()` would feed the last op's backward an expanded (stride-0) gradient,
    a case training never has; the gradient is made once, in the first (warm-up) call."""
    g = state.get("g")
    if g is None or g.shape != y.shape or g.stride() != y.stride():
        g = state["g"] = torch.randn_like(y)
    y.backward(g)


def _square_map(p: dict) -> torch.Tensor:
    """A random (n, c, h, h) map of the configuration's dtype, channels-last when its layout is `cl`."""
    x = torch.randn(p["n"], p["c"], p["h"], p["h"], device=DEV, dtype=DT[p["dtype"]])
    return x.contiguous(memory_format=torch.channels_last) if p["layout"] == "cl" else x


def _autocast(dtype: str):
    return torch.autocast("cuda", dtype=DT[dtype], enabled=dtype != "fp32")


# ------------------------------------------------------------------ families: each yields (params, fn)

def conv_cases():
    # (C_in, C_out, H, kernel, stride, groups) — groups -1: depthwise (groups = C_in)
    shapes = []
    for c, h in [(64, 56), (128, 28), (256, 14), (512, 7), (256, 56), (512, 28), (1024, 14), (2048, 7), (32, 112),
                 (96, 56), (192, 28), (384, 14), (768, 7)]:
        shapes += [(c, c // 4 if c >= 256 else c * 4, h, 1, 1, 1), (c, c, h, 3, 1, 1), (c, c, h, 7, 1, -1),
                   (c, c, h, 3, 1, -1)]
    shapes += [(64, 128, 56, 3, 2, 1), (128, 256, 28, 3, 2, 1), (256, 512, 14, 3, 2, 1), (32, 64, 112, 3, 2, -1),
               (96, 96, 56, 5, 2, -1), (240, 240, 28, 5, 1, -1), (672, 672, 14, 5, 1, -1), (16, 16, 112, 3, 1, -1),
               (3, 64, 224, 7, 2, 1), (3, 32, 224, 3, 2, 1), (3, 96, 224, 4, 4, 1), (3, 768, 224, 16, 16, 1),
               (256, 1024, 14, 1, 1, 1), (1024, 256, 14, 1, 1, 1), (64, 256, 56, 1, 1, 1), (512, 2048, 7, 1, 1, 1)]
    for layout in ("cl", "nchw"):
        for dtype in ("bf16", "fp32"):
            for (ci, co, h, k, s, g) in shapes:
                if layout == "nchw" and dtype == "fp32" and (ci * h) % 3:
                    continue  # fewer fp32 NCHW points
                batch = 64 if h >= 56 else 128
                yield dict(fam="conv", layout=layout, dtype=dtype, n=batch, ci=ci, co=co, h=h, k=k, s=s,
                           g=ci if g == -1 else g), _conv_block


def grouped_conv_cases():
    """Grouped (not depthwise) 3x3 convolutions over group widths 4..128 (ResNeXt, RegNet,
    grouped stems) and strided depthwise 3x3 / 5x5 (MobileNet, EfficientNet downsampling):
    cuDNN runs these at a small fraction of its dense efficiency, and the dense and stride-1
    depthwise points of `conv` do not show it (issue #14). A generic grid: channels with
    their usual feature-map sizes, every power-of-two group width below the channel count."""
    maps = [(64, 112), (128, 56), (256, 28), (512, 14), (1024, 7)]
    shapes = []
    for c, h in maps:
        for gw in (4, 8, 16, 32, 64, 128):
            if gw < c:
                for s in (1, 2):
                    shapes.append((c, h, 3, s, c // gw))
    for c, h in [(32, 112), (96, 56), (192, 28), (384, 14), (768, 14), (1024, 7)]:
        for k in (3, 5):
            shapes.append((c, h, k, 2, c))
    for layout in ("cl", "nchw"):
        for dtype in ("bf16", "fp32"):
            for (c, h, k, s, g) in shapes:
                batch = 64 if h >= 56 else 128
                yield dict(fam="conv_grouped", layout=layout, dtype=dtype, n=batch, ci=c, co=c, h=h, k=k, s=s,
                           g=g), _conv_block


def odd_width_grouped_conv_cases():
    """Grouped 3x3 convolutions whose group width is not a power of two (RegNet's 24..240,
    ResNeXt-style 12..96): cuDNN pads such groups with tensor-transform kernels around the
    convolution, several times the convolution's own time. Two group counts per width."""
    shapes = []
    for gw in (12, 24, 40, 48, 56, 72, 96, 120, 160, 192, 240):
        for g in (4, 16):
            c = gw * g
            h = 56 if c <= 128 else 28 if c <= 256 else 14 if c <= 768 else 7
            shapes.append((c, h, 1, g))
            if g == 16:
                shapes.append((c, h * 2 if h < 56 else h, 2, g))
    for layout in ("cl", "nchw"):
        for dtype in ("bf16", "fp32"):
            for (c, h, s, g) in shapes:
                batch = 64 if h >= 56 else 128
                yield dict(fam="conv_grouped2", layout=layout, dtype=dtype, n=batch, ci=c, co=c, h=h, k=3, s=s,
                           g=g), _conv_block


def pointwise_grouped_conv_cases():
    """Grouped 1 x 1 convolutions (EfficientViT's multi-scale attention mixes its q/k/v
    channels per head this way; ShuffleNet-style networks): cuDNN runs some of them as a loop
    over the groups, each slicing its channels out of the channels-last tensor (4 slice
    kernels, a dgrad, a wgrad and a split-K reduction per group in the backward: 2.7 ms for a
    [128, 384, 14, 14] map in 24 groups of 16 on an H100, where one implicit GEMM was
    simulated, session 33). Power-of-two and other group widths over the usual maps."""
    maps = [(128, 56), (256, 56), (256, 28), (512, 28), (384, 14), (512, 14), (768, 7), (1024, 7)]
    for layout, dtype in (("cl", "bf16"), ("nchw", "bf16"), ("cl", "fp32")):
        for c, h in maps:
            for gw in (8, 16, 32, 64, 24, 48):
                if gw < c and c % gw == 0:
                    yield dict(fam="conv_grouped_1x1", layout=layout, dtype=dtype, n=64 if h >= 56 else 128, ci=c,
                               co=c, h=h, k=1, s=1, g=c // gw), _conv_block


def dilated_conv_cases():
    """Dilated 3 x 3 convolutions (DeepLab's atrous backbone stages and its ASPP branches at
    dilations 12 / 24 / 36): cuDNN picks other kernels than for the undilated ones the `conv`
    points have (an "indexed" weight-gradient kernel; the H100 profile of DeepLabV3 took 2.97
    ms for a backward simulated at 1.62, session 33)."""
    shapes = [(2048, 256, 64, d) for d in (6, 12, 24, 36)] + [(1024, 256, 32, d) for d in (6, 12, 18)]
    shapes += [(512, 512, 64, d) for d in (2, 4)] + [(256, 256, 64, d) for d in (2, 4)]
    shapes += [(256, 256, 128, 2), (128, 128, 128, 2), (64, 64, 256, 2)]
    for layout, dtype in (("cl", "bf16"), ("nchw", "bf16"), ("cl", "fp32")):
        for ci, co, h, d in shapes:
            n = 8 if h >= 128 else 16 if h >= 64 else 32
            yield dict(fam="conv_dilated", layout=layout, dtype=dtype, n=n, ci=ci, co=co, h=h, k=3, s=1, g=1,
                       d=d), _conv_block


def dw_dilated_conv_cases():
    """Dilated depthwise convolutions (a MobileNet / EfficientNet backbone run at output stride
    8 or 16 for segmentation: DeepLabV3- and LR-ASPP-MobileNetV3 dilate their last stages'
    depthwise 3x3 / 5x5 convolutions). cuDNN runs them with a grouped direct kernel and
    `dgrad2d_c1_k1` / indexed weight-gradient kernels that take milliseconds where the undilated
    depthwise convolution takes tens of microseconds (an H100 profile of LR-ASPP: 2.5 ms for a
    forward the roofline put at 33 us, session 47). Generic widths and maps, dilations 2 and 4."""
    shapes = [(c, h) for c in (96, 240, 576, 1152) for h in (16, 32)]
    shapes += [(c, 64) for c in (96, 240)]
    for layout, dtype in (("cl", "bf16"), ("nchw", "bf16"), ("cl", "fp32")):
        for c, h in shapes:
            for k in (3, 5):
                for d in (2, 4):
                    if dtype == "fp32" and d == 4:
                        continue
                    yield dict(fam="conv_dw_dilated", layout=layout, dtype=dtype, n=16 if h >= 64 else 32, ci=c,
                               co=c, h=h, k=k, s=1, g=c, d=d), _conv_block


def map_conv_cases():
    """Dense convolutions over map sizes the `conv` grid lacks (it has 7..112 in powers of two
    times 7): cuDNN picks other kernels on some of them (on the H100, a 96 -> 96 3x3 convolution
    over a 35 x 35 map ran an `implicit_gemm_indexed ... strided` data gradient and a CUTLASS
    s16816 forward, 2.2x the time the 56 x 56 point scaled to it; session 38); and asymmetric
    kernels (1 x k then k x 1, as factorised convolutions run), which no grid had. Generic maps,
    odd and even (9..75), none of Inception-v3's (8, 17, 35, 71, 73, 147)."""
    shapes = []
    for h in (9, 13, 15, 19, 27, 33, 37, 45, 65, 75, 12, 20, 26, 34, 38, 46):
        for ci, co in ((64, 96), (96, 96), (192, 192)):
            shapes.append((ci, co, h, (3, 3)))
        if h in (13, 19, 33, 37, 65, 20, 38):
            shapes += [(256, 64, h, (1, 1)), (64, 256, h, (1, 1)), (48, 64, h, (5, 5))]
    for h in (10, 13, 16, 19, 24, 33):
        for ci, co in ((128, 128), (160, 192), (192, 192), (384, 384)):
            if ci >= 384 and h > 19:
                continue
            for kh, kw in ((1, 7), (7, 1), (1, 3), (3, 1)):
                shapes.append((ci, co, h, (kh, kw)))
    for layout, dtype in (("cl", "bf16"), ("cl", "fp32")):
        for ci, co, h, k in shapes:
            if dtype == "fp32" and k[0] == k[1] and h not in (13, 33):
                continue
            yield dict(fam="conv_maps", layout=layout, dtype=dtype, n=64, ci=ci, co=co, h=h, k=list(k), s=1,
                       g=1), _conv_block


def unaligned_conv_cases():
    """Dense convolutions whose input or output channels are not a multiple of 8 (multi-resolution
    nets carry 18 / 36-channel branches, small detectors and U-Nets other widths): for a 16-bit
    channels-last convolution cuDNN pads such operands to the next multiple of 8 with
    `nhwcAddPaddingKernel` and runs CUTLASS s16816 tiles instead of Hopper's implicit GEMMs
    (timm's HRNet on the H100: 4 kernels per forward, 8-9 per backward; session 37). The grid is
    generic: widths that are multiples of 4 (12, 20, 28, 44, 60) and of 2 only (14, 22, 30, 46,
    54), none of them a width that profile had (18, 36), each as a 3x3 and a 1x1 convolution over
    two maps, strided up to twice the width, down from twice the width, and out of 256 channels;
    NCHW bf16 and channels-last fp32 (TF32) for the 3x3 / 1x1 ones, to see whether they pad too."""
    shapes = []
    for c in (12, 20, 28, 44, 60, 14, 22, 30, 46, 54):
        for h in (56, 28):
            shapes += [(c, c, h, 3, 1), (c, c, h, 1, 1), (c, 2 * c, h, 3, 2), (2 * c, c, h // 2, 1, 1)]
        shapes.append((256, c, 56, 3, 1))
        if c <= 22:
            shapes.append((c, c, 112, 3, 1))
    for layout, dtype in (("cl", "bf16"), ("nchw", "bf16"), ("cl", "fp32")):
        for ci, co, h, k, s in shapes:
            if (layout, dtype) != ("cl", "bf16") and not (ci == co and s == 1 and h in (56, 28)):
                continue
            n = 32 if h >= 112 else 64 if h >= 28 else 128
            yield dict(fam="conv_unaligned", layout=layout, dtype=dtype, n=n, ci=ci, co=co, h=h, k=k, s=s,
                       g=1), _conv_block


def dw_multiplier_conv_cases():
    """Depthwise convolutions with a channel multiplier (groups = C_in, C_out = m x C_in: each
    input channel feeds m outputs; reparameterisable mobile blocks downsample this way) and
    depthwise 1 x 1 convolutions (a per-channel scale branch, as re-parameterisable blocks train
    it). cuDNN runs no single kernel for several of these: on an H100 (torch 2.11, cuDNN 9.19) a
    stride-2 7 x 7 one of multiplier 2 over 64 channels launched one forward kernel per group
    (64 launches, 2.4 ms where the depthwise class's curve said 19 us) and a 1 x 1 one of
    multiplier 2 over 512 groups a dgrad, a layout transform and a scale kernel per group in its
    backward (1,537 kernels, 5.2 ms); a depthwise 1 x 1 over a large map ran a grouped direct
    kernel 7x its roofline time (timm FastViT's profile, session 53). The grid is the `conv`
    family's generic (channels, map) pairs, not that model's: multiplier 2 at kernels 1/3/5/7,
    multiplier 4 at 3, multiplier 1 at 1, strides 1 and 2."""
    convs = [(2, k, s) for k in (1, 3, 5, 7) for s in (1, 2)] + [(4, 3, 1), (4, 3, 2), (1, 1, 1), (1, 1, 2)]
    maps = [(32, 112), (64, 56), (128, 28), (256, 14), (512, 7), (96, 56), (192, 28), (384, 14), (768, 7)]
    for layout, dtype in (("cl", "bf16"), ("nchw", "bf16"), ("cl", "fp32")):
        for m, k, s in convs:
            if (layout, dtype) != ("cl", "bf16") and k not in (1, 3, 7):
                continue
            for c, h in maps:
                yield dict(fam="conv_dw_multiplier", layout=layout, dtype=dtype, n=64 if h >= 56 else 128, ci=c,
                           co=m * c, h=h, k=k, s=s, g=c), _conv_block


def _conv_block(p):
    d = p.get("d", 1)
    k = tuple(p["k"]) if isinstance(p["k"], list) else (p["k"], p["k"])
    # grouped: C_out = C_in, except a depthwise convolution with a channel multiplier (C_out a
    # multiple of groups = C_in)
    co = p["co"] if p["g"] == 1 or (p["g"] == p["ci"] and p["co"] % p["ci"] == 0) else p["ci"]
    conv = nn.Conv2d(p["ci"], co, k, p["s"], (d * (k[0] // 2), d * (k[1] // 2)),
                     dilation=d, groups=p["g"], bias=False).to(DEV)
    bn = nn.BatchNorm2d(conv.out_channels).to(DEV)
    x = torch.randn(p["n"], p["ci"], p["h"], p["h"], device=DEV)
    if p["layout"] == "cl":
        conv, bn = conv.to(memory_format=torch.channels_last), bn.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(p["ci"] != 3)
    return _conv_bn_relu(conv, bn, x, p["dtype"])


def conv_fp32_nchw_cases():
    """fp32 NCHW convolution + batch norm + ReLU blocks (the fp32 ImageNet recipe), where the
    `conv` family kept only a third of its NCHW fp32 shapes: its whole grid in fp32 NCHW, plus
    the shapes ResNets and VGGs run that it lacks (1x1 stride-2 projections, 3x3 convolutions
    at full resolution, the 3-channel stems). Session 50: ResNet-50 and VGG-11 in fp32 NCHW put
    their convolutions -50..+57% off the H100 profiles from the few fp32 NCHW points."""
    shapes = []
    for c, h in [(64, 56), (128, 28), (256, 14), (512, 7), (256, 56), (512, 28), (1024, 14), (2048, 7), (32, 112),
                 (96, 56), (192, 28), (384, 14), (768, 7)]:
        shapes += [(c, c // 4 if c >= 256 else c * 4, h, 1, 1, 1), (c, c, h, 3, 1, 1), (c, c, h, 3, 1, -1)]
    shapes += [(64, 128, 56, 3, 2, 1), (128, 256, 28, 3, 2, 1), (256, 512, 14, 3, 2, 1), (128, 128, 56, 3, 2, 1),
               (256, 256, 28, 3, 2, 1), (512, 512, 14, 3, 2, 1), (256, 512, 56, 1, 2, 1), (512, 1024, 28, 1, 2, 1),
               (1024, 2048, 14, 1, 2, 1), (3, 64, 224, 7, 2, 1), (3, 64, 224, 3, 1, 1), (64, 64, 224, 3, 1, 1),
               (64, 128, 112, 3, 1, 1), (128, 128, 112, 3, 1, 1), (128, 256, 56, 3, 1, 1), (256, 512, 28, 3, 1, 1),
               (512, 512, 28, 3, 1, 1), (64, 256, 56, 1, 1, 1), (512, 2048, 7, 1, 1, 1), (32, 64, 112, 3, 2, -1)]
    for (ci, co, h, k, s, g) in shapes:
        batch = 32 if h >= 224 else (64 if h >= 56 else 128)
        yield dict(fam="conv_fp32_nchw", layout="nchw", dtype="fp32", n=batch, ci=ci, co=co, h=h, k=k, s=s,
                   g=ci if g == -1 else g), _conv_block


def pool_k2_cases():
    """2x2 stride-2 max and average pooling (VGG's, U-Net's): the `pool` family's max-pool is
    3x3 stride 2, which cuDNN / ATen run with other kernels and costs (session 50: VGG-11's
    2x2 max-pools in fp32 NCHW came out +28..+53% from those points)."""
    for layout in ("nchw", "cl"):
        for dtype in ("fp32", "bf16"):
            for c, h in [(64, 224), (128, 112), (256, 56), (512, 28), (512, 14), (96, 56), (32, 128)]:
                for kind in ("max2", "avg"):
                    yield dict(fam="pool_k2", layout=layout, dtype=dtype, n=32 if h >= 224 else 64, c=c, h=h,
                               kind=kind), _pool


def regnet_grouped_fp32_nchw_cases():
    """fp32 NCHW grouped 3x3 convolutions at the stage shapes of torchvision's RegNetX-400MF /
    800MF / 1.6GF / 3.2GF (widths 32-1,008, group widths 16 / 24 / 48; each stage's strided first
    convolution and a stride-1 one), batch 128, + batch norm + ReLU. cuDNN runs some through
    slow generic transposes: RegNetX-1.6GF's [128, 72, 112, 112] in 3 groups, stride 2, took 11.8
    ms on an H100 where the odd-width grid's nearest points said 1.2 (session 50, blind set 19)."""
    for widths, gw in (((32, 64, 160, 400), 16), ((64, 128, 288, 672), 16), ((72, 168, 408, 912), 24),
                       ((96, 192, 432, 1008), 48)):
        for c, h in zip(widths, (56, 28, 14, 7)):
            for s, hin in ((2, 2 * h), (1, h)):
                yield dict(fam="regnet_grouped_fp32_nchw", layout="nchw", dtype="fp32", n=128, ci=c, co=c, h=hin,
                           k=3, s=s, g=c // gw), _conv_block


def bn_nchw_fp32_more_cases():
    """bn_nchw_fp32's channels over more batch x map combinations (128 x 112, 32 x 224, 256 x
    56, 32 x 56): its grid varied the map with the batch fixed per map size, and the family's
    features then extrapolated MobileNetV3's [128, 16, 112, 112] from [64, 16, 112, 112] to
    0.56x of its H100 time, where the kernel's time is linear in N*H*W at a fixed channel count."""
    for c in (16, 24, 40, 64, 72, 128, 256, 512):
        for n, h in ((128, 112), (32, 224), (256, 56), (32, 56)):
            if n * c * h * h > 2 ** 28:
                continue
            yield dict(fam="bn_nchw_fp32_more", n=n, c=c, h=h), _bn_relu_nchw_fp32


def bn_nchw_fp32_cases():
    """fp32 NCHW batch norm + ReLU (the PyTorch ImageNet example's recipe: no autocast, NCHW):
    cuDNN's bn_fw_tr_1C11 / bn_bw_1C11 kernels, whose time follows the channel count as much as
    the bytes (the conv sweep's few fp32 NCHW points put VGG-11's [64, 128, 112, 112] batch norm
    at 1.7x its H100 time, between C=64 points that run 1.6x their roofline and C>=384 ones at
    0.7x; session 50). Channels 16-2048 over the feature maps CNNs give them."""
    for c in (16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048):
        for n, h in ((64, 112), (64, 56), (128, 28), (128, 14), (128, 7)):
            if n * c * h * h > 2 ** 27 or n * c * h * h < 2 ** 16:
                continue
            yield dict(fam="bn_nchw_fp32", n=n, c=c, h=h), _bn_relu_nchw_fp32


def _bn_relu_nchw_fp32(p):
    bn = nn.BatchNorm2d(p["c"]).to(DEV)
    x = torch.randn(p["n"], p["c"], p["h"], p["h"], device=DEV, requires_grad=True)
    state: dict = {}

    def run():
        _backward(F.relu(bn(x)), state)

    return run


def _conv_bn_relu(conv: nn.Module, bn: nn.Module, x: torch.Tensor, dtype: str):
    """One step of a convolution block: conv, batch norm, ReLU forward and their backward."""
    state: dict = {}

    def run():
        with _autocast(dtype):
            y = F.relu(bn(conv(x)))
        _backward(y, state)

    return run


def conv1d_cases():
    """1-D convolutions (N, C, L) + batch norm + ReLU, as sequence and speech models use them:
    dense kernels 1-5 over 256..16k steps, strided front ends (kernel 2-10, stride 2-5, from one
    input channel), depthwise kernels 3-31 (Conformer-style), and grouped wide kernels 32-128
    (relative positional convolutions). cuDNN runs them as 2-D convolutions of height 1, often
    with other algorithms than the 2-D points of `conv` show. No channels-last layout exists
    for 3-D tensors; bf16 autocast and fp32."""
    # (C_in, C_out, L, kernel, stride, groups) - groups -1: depthwise
    shapes = []
    for c in (64, 256, 512, 1024):
        for length in (256, 1024, 4096):
            shapes += [(c, c, length, 3, 1, 1), (c, c, length, 1, 1, 1)]
    shapes += [(256, 256, 1024, 5, 1, 1), (512, 512, 512, 5, 1, 1)]
    shapes += [(1, 256, 16000, 10, 5, 1), (1, 512, 32000, 10, 5, 1), (1, 64, 8000, 4, 2, 1),
               (256, 256, 3200, 3, 2, 1), (512, 512, 6400, 3, 2, 1), (512, 512, 1600, 2, 2, 1),
               (256, 512, 2048, 4, 4, 1), (128, 128, 8192, 5, 5, 1)]
    for c in (256, 512):
        for length in (512, 2048):
            for k in (3, 15, 31):
                shapes.append((c, c, length, k, 1, -1))
    for c in (512, 768, 1024):
        for length in (256, 1024):
            for k, g in ((32, 16), (64, 16), (128, 16), (128, 4)):
                shapes.append((c, c, length, k, 1, g))
    for dtype in ("bf16", "fp32"):
        for (ci, co, length, k, s, g) in shapes:
            batch = 8 if length >= 4096 else 16 if length >= 1024 else 32
            yield dict(fam="conv1d", layout="ncl", dtype=dtype, n=batch, ci=ci, co=co, h=length, k=k, s=s,
                       g=ci if g == -1 else g), _conv_nd_block


def conv1d_pos_cases():
    """The positional convolution of wav2vec2-style speech encoders (wav2vec2, HuBERT, data2vec
    audio, WavLM: Conv1d(C, C, 128, padding=64, groups=16) over the feature frames, C 768 or 1024),
    at the lengths such models see (1-30 s of audio at 50 frames a second: 50..1500) and small
    batches. cuDNN's time for it does not follow the work: in the H200 profile of HF's
    Wav2Vec2ForCTC (batch 8, 199 frames) the forward took 30.9 ms, more than the `conv1d` grid's
    32 x 256 point (13.3 ms) and 16 x 1024 point (17.7 ms), so this family measures the
    (batch, length) plane instead of interpolating across it."""
    for dtype in ("bf16", "fp32"):
        for c in (768, 1024):
            for length in (50, 100, 199, 300, 499, 800, 1500):
                for batch in (4, 8, 16):
                    yield dict(fam="conv1d", layout="ncl", dtype=dtype, n=batch, ci=c, co=c, h=length, k=128, s=1,
                               g=16), _conv_nd_block


def conv3d_cases():
    """3-D convolutions (N, C, T, H, W) + batch norm + ReLU, as video and volumetric models use
    them: dense 3x3x3 at the usual (channels, frames, size) steps, strided 3x3x3, 1x1x1,
    factorised (1x3x3 spatial, 3x1x1 temporal), depthwise 3x3x3, and stems from 3 channels;
    NCDHW and channels-last-3d, bf16 autocast and fp32."""
    # (C_in, C_out, T, H, (kt, kh), (st, sh), groups)
    shapes = []
    for c, t, h in ((32, 16, 112), (64, 16, 56), (128, 8, 28), (256, 4, 14), (512, 2, 7), (64, 8, 28),
                    (128, 16, 14)):
        shapes += [(c, c, t, h, (3, 3), (1, 1), 1), (c, c * 2 if c < 512 else c, t, h, (1, 1), (1, 1), 1)]
    shapes += [(64, 128, 16, 56, (3, 3), (2, 2), 1), (128, 256, 8, 28, (3, 3), (2, 2), 1),
               (256, 512, 4, 14, (3, 3), (2, 2), 1)]
    shapes += [(64, 64, 16, 56, (1, 3), (1, 1), 1), (144, 64, 16, 56, (3, 1), (1, 1), 1),
               (128, 128, 8, 28, (1, 3), (1, 1), 1), (288, 128, 8, 28, (3, 1), (1, 1), 1)]
    shapes += [(96, 96, 16, 28, (3, 3), (1, 1), -1), (192, 192, 8, 14, (3, 3), (1, 1), -1),
               (48, 48, 16, 56, (3, 3), (1, 2), -1)]
    shapes += [(3, 64, 16, 112, (3, 7), (1, 2), 1), (3, 45, 16, 112, (1, 7), (1, 2), 1),
               (3, 24, 16, 160, (1, 3), (1, 2), 1), (3, 96, 16, 224, (2, 16), (2, 16), 1)]
    for layout in ("cl", "ncdhw"):
        for dtype in ("bf16", "fp32"):
            for (ci, co, t, h, k, s, g) in shapes:
                batch = 8 if t * h * h >= 16 * 56 * 56 else 16
                yield dict(fam="conv3d", layout=layout, dtype=dtype, n=batch, ci=ci, co=co, t=t, h=h, k=list(k),
                           s=list(s), g=ci if g == -1 else g), _conv_nd_block


def _conv_nd_block(p):
    """conv1d / conv3d + batch norm + ReLU, forward and backward (the 2-D `_conv_block`'s pattern)."""
    if p["fam"] == "conv1d":
        conv = nn.Conv1d(p["ci"], p["co"], p["k"], p["s"], p["k"] // 2, groups=p["g"], bias=False).to(DEV)
        bn = nn.BatchNorm1d(p["co"]).to(DEV)
        x = torch.randn(p["n"], p["ci"], p["h"], device=DEV)
    else:
        (kt, kh), (st, sh) = p["k"], p["s"]
        conv = nn.Conv3d(p["ci"], p["co"], (kt, kh, kh), (st, sh, sh), (kt // 2, kh // 2, kh // 2), groups=p["g"],
                         bias=False).to(DEV)
        bn = nn.BatchNorm3d(p["co"]).to(DEV)
        x = torch.randn(p["n"], p["ci"], p["t"], p["h"], p["h"], device=DEV)
        if p["layout"] == "cl":
            cl = torch.channels_last_3d
            conv, bn, x = conv.to(memory_format=cl), bn.to(memory_format=cl), x.contiguous(memory_format=cl)
    x.requires_grad_(p["ci"] != 3 and p["ci"] != 1)
    return _conv_bn_relu(conv, bn, x, p["dtype"])


def pool_cases():
    for layout in ("cl", "nchw"):
        for dtype in ("bf16", "fp32"):
            for c, h in [(64, 112), (128, 56), (256, 28), (512, 14), (2048, 7), (1280, 7), (32, 56)]:
                for kind in ("max", "avg", "adaptive"):
                    yield dict(fam="pool", layout=layout, dtype=dtype, n=128, c=c, h=h, kind=kind), _pool


def _pool(p):
    x = _square_map(p)
    x.requires_grad_(True)
    f = {"max": lambda t: F.max_pool2d(t, 3, 2, 1), "avg": lambda t: F.avg_pool2d(t, 2, 2),
         "adaptive": lambda t: F.adaptive_avg_pool2d(t, 1),
         "avg3s1": lambda t: F.avg_pool2d(t, 3, 1, 1, count_include_pad=False),
         "max3s1": lambda t: F.max_pool2d(t, 3, 1, 1), "max2": lambda t: F.max_pool2d(t, 2, 2)}[p["kind"]]

    st: dict = {}

    def run():
        _backward(f(x), st)

    return run


def pool_window_cases():
    """3x3 windows at stride 1 (PoolFormer's token mixer: avg_pool2d(3, 1, 1,
    count_include_pad=False); max pooling at stride 1), both layouts and dtypes: one thread per
    output reading nine inputs, far from the bandwidth the stride-2 windows above reach."""
    for layout in ("cl", "nchw"):
        for dtype in ("bf16", "fp32"):
            for c, h in [(64, 112), (64, 56), (128, 28), (320, 14), (512, 7), (256, 56)]:
                for kind in ("avg3s1", "max3s1"):
                    yield dict(fam="pool", layout=layout, dtype=dtype, n=128, c=c, h=h, kind=kind), _pool


def pointwise_cases():
    for layout in ("cl", "contig", "strided"):
        for dtype in ("bf16", "fp32"):
            for numel_log in (18, 21, 24, 26):
                for op in ("relu", "gelu", "silu", "hardswish", "sigmoid", "add", "mul", "gelu_tanh", "dropout"):
                    yield dict(fam="pointwise", layout=layout, dtype=dtype, log2=numel_log, op=op), _pointwise


def _pointwise(p):
    n = 1 << p["log2"]
    c = 256
    hw = max(1, int((n // (32 * c)) ** 0.5))
    shape = (32, c, hw, hw) if p["layout"] != "strided" else (32, hw * hw, c)
    x = torch.randn(*shape, device=DEV, dtype=DT[p["dtype"]])
    if p["layout"] == "cl":
        x = x.contiguous(memory_format=torch.channels_last)
    elif p["layout"] == "strided":
        x = x.transpose(1, 2)  # a non-contiguous view, as after a permute
    x.requires_grad_(True)
    y = torch.randn_like(x)
    f = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "hardswish": F.hardswish, "sigmoid": torch.sigmoid,
         "add": lambda t: t + y, "mul": lambda t: t * y, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
         "dropout": lambda t: F.dropout(t, 0.1, True)}[p["op"]]

    st: dict = {}

    def run():
        _backward(f(x), st)

    return run


def mixed_layout_cases():
    """Binary elementwise ops whose operands are each dense but in different dim orders (class
    `mixed`): an NCHW map plus a channels-last one (EfficientViT's and DeepLabV3's residuals
    where one branch is channels-last: 68 us for a bf16 (128, 384, 14, 14) add on the H200, ~2x
    the strided class's points), a sequence plus a transposed one (Whisper adds its positional
    embedding to the conv front end's transposed output, fp32 + bf16: 88 us for (16, 1500, 512)),
    and ReLU's backward over such a pair. The TensorIterator kernel reads one operand across its
    layout; the `pointwise` grid's strided points had one operand only."""
    maps = [(128, 384, 14, 14), (128, 128, 56, 56), (16, 256, 64, 64), (64, 64, 112, 112), (32, 1024, 28, 28)]
    seqs = [(16, 1500, 512), (8, 4096, 1024), (32, 512, 768), (4, 2048, 4096)]
    for dtype in ("bf16", "fp32", "fp32+bf16"):
        for shape in maps + seqs:
            for op in ("add", "mul", "relu_backward"):
                if dtype == "fp32+bf16" and op != "add":
                    continue
                yield dict(fam="pointwise_mixed", dtype=dtype, shape=list(shape), op=op), _mixed_layout


def _mixed_layout(p):
    shape = p["shape"]
    dt_a, dt_b = (DT["fp32"], DT["bf16"]) if p["dtype"] == "fp32+bf16" else (DT[p["dtype"]],) * 2
    a = torch.randn(*shape, device=DEV, dtype=dt_a)
    if len(shape) == 4:
        b = torch.randn(*shape, device=DEV, dtype=dt_b).contiguous(memory_format=torch.channels_last)
    else:  # the second operand transposed in memory: (B, C, T) storage seen as (B, T, C)
        b = torch.randn(shape[0], shape[2], shape[1], device=DEV, dtype=dt_b).transpose(1, 2)
    if p["op"] == "relu_backward":
        def run():
            torch.ops.aten.threshold_backward(a, b, 0)
    else:
        f = torch.add if p["op"] == "add" else torch.mul

        def run():
            f(a, b)
    return run


def copy_cases():
    for dtype in ("bf16", "fp32"):
        for b, s, h, d in [(4, 2048, 16, 64), (8, 1024, 12, 64), (2, 4096, 32, 128), (16, 512, 16, 64),
                           (4, 2048, 8, 128), (64, 197, 12, 64), (1, 8192, 32, 128)]:
            for op in ("permute", "transpose_last", "repeat_interleave", "rope", "cat", "expand"):
                yield dict(fam="copies", dtype=dtype, b=b, s=s, h=h, d=d, op=op), _copies


def _copies(p):
    b, s, h, d = p["b"], p["s"], p["h"], p["d"]
    x = torch.randn(b, s, h, d, device=DEV, dtype=DT[p["dtype"]], requires_grad=True)
    cos = torch.randn(s, d, device=DEV, dtype=DT[p["dtype"]])

    def rope(t):
        t = t.transpose(1, 2)
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos + torch.cat((-t2, t1), dim=-1) * cos

    f = {"permute": lambda t: t.permute(0, 2, 1, 3).contiguous(),
         "transpose_last": lambda t: t.transpose(-1, -2).contiguous(),
         "repeat_interleave": lambda t: t.transpose(1, 2).repeat_interleave(4, dim=1),
         "rope": rope,
         "cat": lambda t: torch.cat((t, t), dim=-1),
         "expand": lambda t: t[:, :, :1].expand(b, s, h, d).contiguous()}[p["op"]]

    st: dict = {}

    def run():
        _backward(f(x), st)

    return run


def cat_cache_cases():
    """`torch.cat` onto an empty tensor along the sequence dim, as HF's key/value caches do on
    their first update (DynamicCache starts as `torch.tensor([])`), every layer every step in
    training: the held-out HF models' H200 profiles show ATen's non-vectorized batched copy for
    it where a dense cat of two tensors runs the vectorized one. Keys contiguous and transposed
    (a view of the projection), and two non-empty inputs for comparison."""
    for dtype in ("bf16", "fp32"):
        for b, h, s, d in [(4, 4, 2048, 64), (8, 12, 1024, 64), (16, 8, 1500, 64), (4, 16, 2048, 128),
                           (16, 8, 128, 64), (2, 32, 4096, 128), (32, 12, 197, 64)]:
            for op in ("empty_first", "empty_first_transposed", "two"):
                yield dict(fam="cat_cache", dtype=dtype, b=b, s=s, h=h, d=d, op=op), _cat_cache


def _cat_cache(p):
    b, s, h, d = p["b"], p["s"], p["h"], p["d"]
    x = torch.randn(b, s, h, d, device=DEV, dtype=DT[p["dtype"]])
    keys = x.transpose(1, 2) if p["op"] == "empty_first_transposed" else x.transpose(1, 2).contiguous()
    empty = torch.tensor([], device=DEV, dtype=DT[p["dtype"]])

    def run():
        if p["op"] == "two":
            torch.cat((keys, keys), dim=-2)
        else:
            torch.cat((empty, keys), dim=-2)

    return run


def attention_cases(variants=("plain", "causal", "dropout", "gqa", "pad_mask", "bias")):
    for backend in ("cudnn", "flash", "efficient"):
        for d in (64, 128):
            for (b, h, kv, s) in [(8, 12, 12, 1024), (4, 16, 4, 2048), (2, 32, 8, 4096), (16, 16, 16, 512),
                                  (64, 12, 12, 197), (32, 8, 8, 256)]:
                for variant in variants:
                    if variant == "gqa" and kv == h:
                        continue
                    yield dict(fam="attention", backend=backend, d=d, b=b, h=h, kv=kv, s=s, variant=variant), _attn


def _attn(p):
    b, h, kv, s, d = p["b"], p["h"], p["kv"], p["s"], p["d"]
    q = torch.randn(b, s, h, d, device=DEV, dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True)
    nkv = kv if p["variant"] == "gqa" else h
    k = torch.randn(b, s, nkv, d, device=DEV, dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True)
    v = torch.randn(b, s, nkv, d, device=DEV, dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True)
    kw = {}
    if p["variant"] == "causal":
        kw["is_causal"] = True
    elif p["variant"] == "dropout":
        kw["dropout_p"] = 0.1
    elif p["variant"] == "gqa":
        kw["enable_gqa"] = True
        kw["is_causal"] = True
    elif p["variant"] == "pad_mask":
        kw["attn_mask"] = torch.ones(b, 1, 1, s, device=DEV, dtype=torch.bool)
    elif p["variant"] == "bias":  # a learned additive bias (T5's relative positions): its gradient too
        kw["attn_mask"] = torch.randn(b, h, s, s, device=DEV, dtype=torch.bfloat16).requires_grad_(True)
    be = SDP_BACKENDS[p["backend"]]

    st: dict = {}

    def run():
        with sdpa_kernel([be]):
            _backward(F.scaled_dot_product_attention(q, k, v, **kw), st)

    return run


def sr_attention_cases():
    """Queries far longer than keys and values (spatial-reduction attention): the grid above
    has queries and keys of one length only."""
    for backend in ("cudnn", "flash", "efficient"):
        for (b, h, sq, skv, d) in [(16, 1, 16384, 256, 32), (16, 2, 4096, 256, 32), (16, 5, 1024, 256, 32),
                                   (8, 1, 16384, 1024, 64), (32, 2, 3136, 49, 64), (16, 4, 4096, 64, 64)]:
            yield dict(fam="attention_sr", backend=backend, b=b, h=h, sq=sq, skv=skv, d=d), _sr_attn


def _sr_attn(p):
    b, h, d = p["b"], p["h"], p["d"]
    q = torch.randn(b, p["sq"], h, d, device=DEV, dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True)
    k = torch.randn(b, p["skv"], h, d, device=DEV, dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True)
    v = torch.randn(b, p["skv"], h, d, device=DEV, dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True)
    be = SDP_BACKENDS[p["backend"]]
    st: dict = {}

    def run():
        with sdpa_kernel([be]):
            _backward(F.scaled_dot_product_attention(q, k, v), st)

    return run


def sr_conv_cases():
    """SegFormer / PVT: an overlapping 7x7 / 4 patch embedding of large images, and the k x k /
    k convolutions that shrink keys and values in spatial-reduction attention."""
    for layout in ("cl", "nchw"):
        for dtype in ("bf16", "fp32"):
            for ci, co, h, k, s, n in [(3, 32, 512, 7, 4, 16), (3, 64, 224, 7, 4, 64), (32, 32, 128, 8, 8, 16),
                                       (64, 64, 64, 4, 4, 16), (160, 160, 32, 2, 2, 16), (64, 64, 56, 8, 8, 64),
                                       (128, 128, 28, 4, 4, 64), (320, 320, 14, 2, 2, 64)]:
                yield dict(fam="conv", layout=layout, dtype=dtype, n=n, ci=ci, co=co, h=h, k=k, s=s, g=1), _conv_block


def wide_conv_cases():
    for layout in ("cl", "nchw"):
        for dtype in ("bf16", "fp32"):
            for ci, co, h, n in [(1024, 256, 128, 16), (768, 256, 64, 16), (2048, 512, 32, 16), (1024, 256, 64, 32)]:
                yield dict(fam="conv", layout=layout, dtype=dtype, n=n, ci=ci, co=co, h=h, k=1, s=1, g=1), _conv_block


def norm_cases():
    for dtype in ("bf16", "fp32"):
        for rows, hidden in [(8192, 768), (8192, 1024), (16384, 2048), (4096, 4096), (32768, 512), (2048, 8192),
                             (12608, 768)]:
            for op in ("layer_norm", "rms_norm"):
                yield dict(fam="norms", dtype=dtype, rows=rows, hidden=hidden, op=op), _norm
        for n, c, hw, groups in [(32, 256, 32, 32), (16, 512, 16, 32), (64, 128, 64, 32)]:
            yield dict(fam="norms", dtype=dtype, n=n, c=c, hw=hw, groups=groups, op="group_norm"), _norm


def _norm(p):
    dt = DT[p["dtype"]]
    if p["op"] == "group_norm":
        x = torch.randn(p["n"], p["c"], p["hw"], p["hw"], device=DEV, dtype=dt, requires_grad=True)
        m = nn.GroupNorm(p["groups"], p["c"]).to(DEV, dt)
    else:
        x = torch.randn(p["rows"], p["hidden"], device=DEV, dtype=dt, requires_grad=True)
        m = (nn.LayerNorm if p["op"] == "layer_norm" else nn.RMSNorm)(p["hidden"]).to(DEV, dt)

    st: dict = {}

    def run():
        _backward(m(x), st)

    return run


def narrow_norm_cases():
    for dtype in ("bf16", "fp32"):
        for hidden in (64, 96, 128, 192, 256, 384, 512):
            for rows in (8192, 50176, 200704):
                for op in ("layer_norm", "rms_norm"):
                    yield dict(fam="norms_narrow", dtype=dtype, rows=rows, hidden=hidden, op=op), _norm


def tiny_norm_cases():
    """Rows narrower than the narrow grid (16..48 wide): SegFormer-B0's first stage normalises
    32 channels of 16,384 tokens per image."""
    for dtype in ("bf16", "fp32"):
        for hidden in (16, 32, 48):
            for rows in (65536, 262144, 1048576):
                for op in ("layer_norm", "rms_norm"):
                    yield dict(fam="norms_tiny", dtype=dtype, rows=rows, hidden=hidden, op=op), _norm


def view_pointwise_cases():
    """Elementwise ops on views training makes all the time and the `pointwise` grid lacks: an
    activation of one half of a chunked projection times the other half (GeGLU / SwiGLU: each
    half is row-strided, its rows twice as far apart as they are long), and a convolution's bias
    added in place after cuDNN (`out.add_(bias.view(1, C, 1, 1))`, NCHW and channels-last)."""
    for dtype in ("bf16", "fp32"):
        for rows, width in [(8192, 1152), (8192, 2816), (16384, 4096), (4096, 1024), (32768, 512)]:
            for act in ("gelu", "silu"):
                yield dict(fam="pointwise_views", dtype=dtype, rows=rows, width=width, op=f"glu_{act}"), _glu
        for layout in ("cl", "nchw"):
            for n, c, h in [(64, 384, 14), (64, 128, 56), (128, 256, 28), (64, 1536, 7), (32, 64, 112)]:
                yield dict(fam="pointwise_views", dtype=dtype, layout=layout, n=n, c=c, h=h, op="bias_add_"), _bias_add


def _glu(p):
    x = torch.randn(p["rows"], 2 * p["width"], device=DEV, dtype=DT[p["dtype"]], requires_grad=True)
    act = F.gelu if p["op"] == "glu_gelu" else F.silu
    st: dict = {}

    def run():
        a, b = x.chunk(2, dim=-1)
        _backward(act(a) * b, st)

    return run


def _bias_add(p):
    x = _square_map(p)
    bias = torch.randn(p["c"], device=DEV, dtype=DT[p["dtype"]])

    def run():
        x.add_(bias.view(1, -1, 1, 1))

    return run


def reduction_cases():
    for dtype in ("bf16", "fp32"):
        for n, c, hw in [(64, 64, 56), (64, 96, 56), (64, 192, 28), (64, 384, 14), (64, 768, 7), (128, 256, 56),
                         (32, 128, 112), (128, 2048, 7), (256, 64, 32), (16, 512, 28)]:
            for layout in ("cl", "nchw"):
                yield dict(fam="reductions", dtype=dtype, shape=[n, c, hw, hw], layout=layout, dims=[0, 2, 3],
                           op="sum"), _reduce
        for rows, cols in [(200704, 96), (50176, 192), (12544, 384), (3136, 768), (8192, 1024), (16384, 4096),
                           (65536, 256), (4096, 16384), (200704, 384), (32768, 64)]:
            yield dict(fam="reductions", dtype=dtype, shape=[rows, cols], layout="c", dims=[0], op="sum"), _reduce
            yield dict(fam="reductions", dtype=dtype, shape=[rows, cols], layout="c", dims=[1], op="sum"), _reduce
        for shape in ([64, 384, 14, 14], [8, 2048, 4096]):
            yield dict(fam="reductions", dtype=dtype, shape=shape, layout="c", dims=[len(shape) - 1],
                       op="mean"), _reduce


def short_row_reduction_cases():
    """Sums, means and 2-norms over a short innermost dim (2..128 elements) of many rows: cosine
    attention's F.normalize over a head dim of 32 (SwinV2), linear attention's sums over 16
    (EfficientViT), q/k norms over a head dim of 128 (Qwen3), router sums over top-k (MoE).
    ATen's inner reduce kernel gives each row a few threads and each block 16+ rows: one element
    per thread, its index arithmetic per element dominates (SwinV2's fp32 sum over 32 for 786k
    rows took 178 us on the H200, 0.56 TB/s), which the `reductions` grid's rows of 64+ elements
    and few thousand outputs did not show."""
    for dtype in ("fp32", "bf16"):
        for row in (2, 8, 16, 32, 49, 64, 128):
            for outs in (65536, 262144, 1048576, 4194304):
                if outs * row > 2 ** 27:
                    continue
                for op in ("sum", "norm") if row in (16, 32, 128) else ("sum",):
                    yield dict(fam="reductions", dtype=dtype, shape=[outs, row], layout="c", dims=[1], op=op), \
                        _reduce


def column_reduction_cases():
    """Column sums (a linear's bias gradient over tokens x features) whose column count is not a
    multiple of 64: token counts (49, 196, 197: ViT and MLP-Mixer patch grids), classifier
    widths (100, 1000). The `reductions` grid has multiples of 64 only."""
    for dtype in ("bf16", "fp32"):
        for rows in (8192, 49152, 196608):
            for cols in (49, 64, 100, 128, 196, 197, 256, 500, 1000):
                yield dict(fam="reductions_cols", dtype=dtype, shape=[rows, cols], layout="c", dims=[0],
                           op="sum"), _reduce


def outer_reduction_cases():
    """Column sums over a dense grid of (rows, columns): a bias gradient of a channels-last
    convolution ([N*H*W, C] in memory) or of a linear over tokens. ATen's reduction picks its
    launch (threads per output, blocks splitting the rows, a second pass) from both sizes, so
    the time is not monotonic in either; the trace's grid and block sizes show which launch
    ran. Session 33: the `reductions` grid's 8 channels-last shapes left 45 in-training bias
    gradients 0.30-1.93x off. Cold: the L2 is overwritten before each call. A training step's
    bias gradient reads a gradient other kernels have pushed out of the L2 since it was written
    (H100: a [50176, 192] bf16 column sum took 96 us in ConvNeXt-V2's backward, 91 us in the
    first, cold, call of the sweep, 50 us repeated on a warm L2)."""
    for dtype in ("bf16", "fp32"):
        for rows in (1024, 4096, 12544, 50176, 200704, 802816):
            for cols in (16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 1024, 1280,
                         1536, 2048, 3072, 4096):
                if rows * cols <= 1 << 28:
                    yield dict(fam="reductions_outer", dtype=dtype, shape=[rows, cols], layout="c", dims=[0],
                               op="sum", cold=True), _reduce


# bytes written before each `cold` configuration's call: more than any GPU's L2 (H100 50 MB,
# H200 60 MB), so the reduction reads its input from HBM
_EVICT_BYTES = 256 << 20


def _reduce(p):
    x = torch.randn(*p["shape"], device=DEV, dtype=DT[p["dtype"]])
    if p["layout"] == "cl":
        x = x.contiguous(memory_format=torch.channels_last)
    fn = {"sum": torch.sum, "mean": torch.mean,
          "norm": lambda t, dims: torch.linalg.vector_norm(t, 2, dims, keepdim=True)}[p["op"]]
    scratch = torch.empty(_EVICT_BYTES, device=DEV, dtype=torch.uint8) if p.get("cold") else None

    def run():
        if scratch is not None:
            scratch.zero_()
        fn(x, p["dims"])

    return run


def loss_cases():
    for dtype in ("fp32", "bf16"):
        for n, v in [(8192, 32000), (4096, 50257), (16384, 32000), (2048, 128256), (32768, 1000), (512, 1000),
                     (8192, 151936)]:
            yield dict(fam="losses", dtype=dtype, n=n, v=v), _loss


def _loss(p):
    x = torch.randn(p["n"], p["v"], device=DEV, dtype=DT[p["dtype"]], requires_grad=True)
    y = torch.randint(0, p["v"], (p["n"],), device=DEV)

    def run():
        F.cross_entropy(x, y).backward()

    return run


def embedding_cases():
    for v, d, n in [(32000, 1024, 8192), (50257, 768, 8192), (128256, 4096, 4096), (32000, 4096, 16384),
                    (151936, 896, 8192), (30522, 768, 16384)]:
        yield dict(fam="embedding", v=v, d=d, n=n), _embedding


def _embedding(p):
    e = nn.Embedding(p["v"], p["d"]).to(DEV)
    ids = torch.randint(0, p["v"], (p["n"],), device=DEV)

    st: dict = {}

    def run():
        _backward(e(ids), st)

    return run


def optim_cases():
    for total_m, count in [(1, 20), (10, 100), (25, 160), (85, 150), (125, 150), (300, 300), (37, 10), (5, 60)]:
        for opt in ("adamw_foreach", "sgd_foreach", "adamw_fused", "adam_forloop"):
            yield dict(fam="optim", total_m=total_m, count=count, opt=opt), _optim


def _optim(p):
    total, count = p["total_m"] * 1_000_000, p["count"]
    sizes = [max(64, int(total * w)) for w in _split_weights(count)]
    params = [torch.zeros(s, device=DEV, requires_grad=True) for s in sizes]
    for t in params:
        t.grad = torch.randn_like(t)
    o = {"adamw_foreach": lambda: torch.optim.AdamW(params, foreach=True),
         "sgd_foreach": lambda: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True),
         "adamw_fused": lambda: torch.optim.AdamW(params, fused=True),
         "adam_forloop": lambda: torch.optim.Adam(params, foreach=False)}[p["opt"]]()

    def run():
        o.step()

    return run


def _split_weights(count: int) -> list[float]:
    """A transformer-like spread: a few large tensors, many small ones (sums to 1)."""
    raw = [1.0 / (1 + (i % 7)) ** 2 for i in range(count)]
    s = sum(raw)
    return [r / s for r in raw]


def rnn_cases():
    for cell in ("lstm", "gru"):
        for hidden, layers, t, b in [(256, 1, 64, 32), (512, 2, 128, 64), (1024, 2, 256, 64), (1024, 1, 64, 128),
                                     (2048, 1, 128, 32)]:
            for dtype in ("fp32", "bf16"):
                yield dict(fam="rnn", cell=cell, hidden=hidden, layers=layers, t=t, b=b, dtype=dtype), _rnn


def _rnn(p):
    cls = nn.LSTM if p["cell"] == "lstm" else nn.GRU
    m = cls(p["hidden"], p["hidden"], p["layers"], batch_first=True).to(DEV)
    x = torch.randn(p["b"], p["t"], p["hidden"], device=DEV, requires_grad=True)

    st: dict = {}

    def run():
        with _autocast(p["dtype"]):
            y, _ = m(x)
        _backward(y, st)

    return run


def patch_conv_cases():
    """Patch embeddings of vision transformers (a kernel as large as its stride over the image)
    and ECA attention's 1-D convolution over the pooled channel vector (one channel in and out):
    shapes the generic grids above have one point of (16 / 16) or none."""
    for layout in ("cl", "nchw"):
        for dtype in ("bf16", "fp32"):
            for co, h, k in [(768, 224, 32), (1024, 224, 14), (768, 224, 16), (384, 224, 16), (192, 224, 16),
                             (128, 224, 4), (96, 224, 8), (768, 384, 16)]:
                yield dict(fam="conv", layout=layout, dtype=dtype, n=128 if co < 768 else 64, ci=3, co=co, h=h,
                           k=k, s=k, g=1), _conv_block
    for dtype in ("bf16", "fp32"):
        for n, c, k in [(64, 1536, 5), (64, 512, 5), (128, 256, 3), (128, 1024, 5), (64, 2048, 7)]:
            yield dict(fam="conv1d", layout="nchw", dtype=dtype, n=n, ci=1, co=1, length=c, k=k, s=1, g=1,
                       bn=False), _eca_conv


def _eca_conv(p):
    conv = nn.Conv1d(1, 1, p["k"], padding=p["k"] // 2, bias=False).to(DEV)
    x = torch.randn(p["n"], 1, p["length"], device=DEV, requires_grad=True)
    st: dict = {}

    def run():
        with _autocast(p["dtype"]):
            y = torch.sigmoid(conv(x))
        _backward(y, st)

    return run


def upsample_cases():
    """F.interpolate as segmentation and detection heads use it (align_corners=False): one thread
    per output element; the NHWC kernels and the backward's atomics run far below bandwidth, the
    more so the larger the scale (each input element takes scale^2 outputs' atomic adds: on the
    H200 the NCHW fp32 backward ran at 5x its roofline time at x2, 10x at x4, 29x at x8), so the
    scale is a feature of its own (families.shape_features). Since session 38 also 2- and
    3-channel maps (optical flow, RGB), whose backward is all contention."""
    for layout in ("cl", "nchw"):
        for dtype in ("bf16", "fp32"):
            for mode in ("bilinear", "nearest"):
                for scale in (2, 4, 8):
                    for c, h in [(64, 56), (256, 32), (150, 128), (19, 64), (512, 16), (2, 64), (3, 32)]:
                        yield dict(fam="upsample", layout=layout, dtype=dtype, n=16, c=c, h=h, mode=mode,
                                   scale=scale), _upsample


def pooled_upsample_cases():
    """Bilinear upsampling from pooled grids back to a feature map (DeepLab's ASPP image pooling:
    1 x 1 -> 64 x 64; PSPNet's pyramid: 1 / 2 / 3 / 6 -> 60; decoders' x16 / x32 heads): scales of
    10..64 the `upsample` points (x2 / x4 / x8) do not reach, whose backward piles up to scale^2
    atomic adds on each input element (DeepLabV3 on the H100: [16, 256, 1, 1] -> 64 x 64,
    channels-last fp32, 2.2 ms per backward; the x8 points extrapolated said 32 us)."""
    for layout in ("cl", "nchw"):
        for dtype in ("fp32", "bf16"):
            for c, h, scale in [(256, 1, 64), (256, 1, 32), (512, 1, 16), (512, 2, 30), (512, 3, 20), (512, 6, 10),
                                (64, 1, 56), (21, 16, 32), (150, 8, 16), (19, 32, 16)]:
                yield dict(fam="upsample_pool", layout=layout, dtype=dtype, n=16, c=c, h=h, mode="bilinear",
                           scale=scale), _upsample


def pooled_upsample_cl_cases():
    """The pooled upsampling of `upsample_pool` whose gradient arrives channels-last: a 1 x 1 map's
    output is contiguous (its strides do not suggest channels-last), so the sweep's backward ran
    ATen's NCHW kernel (33 ms for [16, 256, 1, 1] -> 64 x 64 fp32 on the H100), while a model that
    concatenates the branch with channels-last features (DeepLabV3's ASPP) hands the backward a
    channels-last gradient and ATen runs the NHWC kernel (2.2 ms on the H200). The output is made
    channels-last here (its backward passes the gradient through as it is)."""
    for dtype in ("fp32", "bf16"):
        for c, h, scale in [(256, 1, 64), (256, 1, 32), (512, 1, 16), (64, 1, 56), (256, 1, 128), (2048, 1, 8)]:
            yield dict(fam="upsample_pool", layout="cl", dtype=dtype, n=16, c=c, h=h, mode="bilinear", scale=scale,
                       out_cl=True), _upsample


def _upsample(p):
    x = _square_map(p)
    x.requires_grad_(True)
    kw = {"align_corners": False} if p["mode"] == "bilinear" else {}
    st: dict = {}

    def run():
        y = F.interpolate(x, scale_factor=p["scale"], mode=p["mode"], **kw)
        if p.get("out_cl"):
            y = y.contiguous(memory_format=torch.channels_last)
        _backward(y, st)

    return run


def spatial_cases():
    """Softmax over a map's channels and per-pixel cross entropy (nll_loss2d), as semantic
    segmentation computes its loss on upsampled logits."""
    for layout in ("cl", "nchw"):
        for dtype in ("bf16", "fp32"):
            for n, c, h in [(16, 150, 128), (16, 19, 256), (8, 21, 512), (16, 150, 512), (32, 64, 32)]:
                for kind in ("log_softmax", "softmax", "cross_entropy"):
                    yield dict(fam="spatial", layout=layout, dtype=dtype, n=n, c=c, h=h, kind=kind), _spatial


def _spatial(p):
    x = _square_map(p)
    x.requires_grad_(True)
    target = torch.randint(0, p["c"], (p["n"], p["h"], p["h"]), device=DEV)
    st: dict = {}

    def run():
        if p["kind"] == "cross_entropy":
            F.cross_entropy(x, target, ignore_index=255).backward()
        else:
            _backward((F.log_softmax if p["kind"] == "log_softmax" else F.softmax)(x, dim=1), st)

    return run


def sync_bn_cases():
    """SyncBatchNorm's kernels (batch_norm_stats, gather_stats_with_counts, elemt and the backward
    reduce / elemt pair) over conv-net maps in both layouts, run as torch's SyncBatchNorm
    function runs them, minus its two collectives: one GPU has no peer, so the gathered
    statistics are this rank's own, repeated `ranks` times (the kernels' work is the same)."""
    for layout in ("cl", "nchw"):
        for dtype in ("bf16", "fp32"):
            for n, c, h in [(32, 64, 112), (32, 256, 56), (32, 512, 28), (32, 1024, 14), (32, 2048, 7),
                            (8, 64, 128), (64, 128, 32)]:
                yield dict(fam="sync_bn", layout=layout, dtype=dtype, n=n, c=c, h=h, ranks=8), _sync_bn


def _sync_bn(p):
    x = _square_map(p)
    x.requires_grad_(True)
    c, ranks, eps = p["c"], p["ranks"], 1e-5
    weight = torch.ones(c, device=DEV, requires_grad=True)
    bias = torch.zeros(c, device=DEV, requires_grad=True)
    running_mean, running_var = torch.zeros(c, device=DEV), torch.ones(c, device=DEV)

    class _LocalSyncBN(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            mean, invstd = torch.batch_norm_stats(x, eps)
            count = torch.full((1,), x.numel() // x.size(1), dtype=mean.dtype, device=mean.device)
            combined = torch.cat([mean, invstd, count]).repeat(ranks, 1)
            mean_all, invstd_all, count_all = torch.split(combined, c, dim=1)
            count_all = count_all[count_all.squeeze(-1) >= 1]
            mean, invstd = torch.batch_norm_gather_stats_with_counts(
                x, mean_all, invstd_all, running_mean, running_var, 0.1, eps, count_all.view(-1))
            ctx.save_for_backward(x, weight, mean, invstd, count_all.to(torch.int32))
            return torch.batch_norm_elemt(x, weight, bias, mean, invstd, eps)

        @staticmethod
        def backward(ctx, grad):
            x, weight, mean, invstd, count = ctx.saved_tensors
            grad = grad.contiguous(memory_format=torch.channels_last) if p["layout"] == "cl" else grad.contiguous()
            sum_dy, sum_dy_xmu, grad_weight, grad_bias = torch.batch_norm_backward_reduce(
                grad, x, mean, invstd, weight, True, True, True)
            combined = torch.cat([sum_dy, sum_dy_xmu]) * ranks  # the all_reduce's sum over identical ranks
            sum_dy, sum_dy_xmu = torch.split(combined, c)
            grad_input = torch.batch_norm_backward_elemt(grad, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count)
            return grad_input, grad_weight, grad_bias

    st: dict = {}

    def run():
        _backward(_LocalSyncBN.apply(x, weight, bias), st)

    return run


def rnn_cell_cases():
    """nn.GRUCell / nn.LSTMCell steps (two GEMMs and ATen's fused cell kernel, forward and
    backward): decoders and RL policies that loop over time in Python use them."""
    for cell in ("gru", "lstm"):
        for dtype in ("fp32", "bf16"):
            for b, hidden in [(32, 256), (64, 512), (128, 1024), (256, 2048), (1024, 512), (16, 4096)]:
                yield dict(fam="rnn_cell", cell=cell, dtype=dtype, b=b, hidden=hidden), _rnn_cell


def _rnn_cell(p):
    m = (nn.GRUCell if p["cell"] == "gru" else nn.LSTMCell)(p["hidden"], p["hidden"]).to(DEV)
    x = torch.randn(p["b"], p["hidden"], device=DEV, requires_grad=True)
    h = torch.randn(p["b"], p["hidden"], device=DEV, requires_grad=True)
    state = h if p["cell"] == "gru" else (h, torch.randn_like(h))
    st: dict = {}

    def run():
        with _autocast(p["dtype"]):
            y = m(x, state)
        _backward(y if p["cell"] == "gru" else y[0], st)

    return run


def speech_op_cases():
    """Two ops of speech training that no other family has: the weight norm of wav2vec2-style
    positional convolutions (`torch._weight_norm` over dim 2 of a (C, C / 16, 128) weight: ATen's
    last-dim kernels, 338 us forward and 404 us backward for 768 channels on the H200, priced as
    one elementwise pass of ~15 us), and CTC loss (ATen's alpha / beta recursions, one block per
    utterance and sequential over the frames: 107 us forward, 400 us backward for 199 frames, 8
    utterances, 64-token targets, 32 classes). fp32, as autocast runs both."""
    for c, g in ((768, 48), (1024, 64), (512, 32)):
        yield dict(fam="speech", kind="weight_norm", c=c, g=g, k=128), _speech_op
    for t in (99, 199, 499, 999):
        for n in (4, 8, 16):
            for classes, s in ((32, 64), (32, 16), (1000, 64), (32, 200)):
                yield dict(fam="speech", kind="ctc", t=t, n=n, classes=classes, s=s), _speech_op


def _speech_op(p):
    st: dict = {}
    if p["kind"] == "weight_norm":
        v = torch.randn(p["c"], p["g"], p["k"], device=DEV, requires_grad=True)
        g = torch.randn(1, 1, p["k"], device=DEV, requires_grad=True)

        def run():
            _backward(torch._weight_norm(v, g, 2), st)
        return run
    logits = torch.randn(p["t"], p["n"], p["classes"], device=DEV, requires_grad=True)
    s = min(p["s"], (p["t"] - 1) // 2)
    targets = torch.randint(1, p["classes"], (p["n"], s), device=DEV)
    in_len = torch.full((p["n"],), p["t"], dtype=torch.long)
    tgt_len = torch.full((p["n"],), s, dtype=torch.long)

    def run():
        loss = F.ctc_loss(logits.log_softmax(-1), targets, in_len, tgt_len, zero_infinity=True)
        loss.backward()
    return run


FAMILIES = {"conv": conv_cases, "conv_grouped": grouped_conv_cases,
            "conv_grouped2": odd_width_grouped_conv_cases, "conv1d": conv1d_cases, "conv1d_pos": conv1d_pos_cases, "speech": speech_op_cases, "conv3d": conv3d_cases, "pool": pool_cases, "pool_windows": pool_window_cases,
            "pointwise": pointwise_cases, "pointwise_mixed": mixed_layout_cases, "copies": copy_cases, "cat_cache": cat_cache_cases,
            "attention": attention_cases, "attention_bias": lambda: attention_cases(("bias",)), "norms": norm_cases, "norms_narrow": narrow_norm_cases,
            "reductions": reduction_cases, "reductions_cols": column_reduction_cases,
            "reductions_short": short_row_reduction_cases,
            "reductions_outer": outer_reduction_cases, "conv_grouped_1x1": pointwise_grouped_conv_cases,
            "conv_dilated": dilated_conv_cases, "conv_dw_dilated": dw_dilated_conv_cases, "conv_unaligned": unaligned_conv_cases,
            "conv_maps": map_conv_cases, "upsample_pool": pooled_upsample_cases,
            "upsample_pool_cl": pooled_upsample_cl_cases, "losses": loss_cases, "embedding": embedding_cases,
            "optim": optim_cases, "rnn": rnn_cases, "conv_patch": patch_conv_cases, "attention_sr": sr_attention_cases,
            "conv_wide": wide_conv_cases, "conv_sr": sr_conv_cases, "norms_tiny": tiny_norm_cases,
            "pointwise_views": view_pointwise_cases, "upsample": upsample_cases, "spatial": spatial_cases,
            "sync_bn": sync_bn_cases, "rnn_cell": rnn_cell_cases, "bn_nchw_fp32": bn_nchw_fp32_cases,
            "conv_fp32_nchw": conv_fp32_nchw_cases, "pool_k2": pool_k2_cases,
            "regnet_grouped_fp32_nchw": regnet_grouped_fp32_nchw_cases, "bn_nchw_fp32_more": bn_nchw_fp32_more_cases,
            "conv_dw_multiplier": dw_multiplier_conv_cases}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="trace file (.pt.trace.json.gz)")
    ap.add_argument("--only", default="", help="comma-separated families (default: all)")
    ap.add_argument("--iters", type=int, default=2, help="profiled iterations per configuration")
    ap.add_argument("--list", action="store_true", help="print the configurations and exit")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="start no configuration after this many seconds; the trace of those done is still "
                         "written (a device lease's time limit kills a sweep before its export otherwise)")
    a = ap.parse_args()
    fams = [f for f in a.only.split(",") if f] or list(FAMILIES)
    cases = [c for f in fams for c in FAMILIES[f]()]
    if a.list:
        for params, _ in cases:
            print(json.dumps(params))
        print(f"{len(cases)} configurations")
        return 0
    from torch.profiler import ProfilerActivity, profile, record_function

    t0 = time.time()
    tmp = tempfile.mkdtemp()
    done = 0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for params, make in cases:
            if a.max_seconds is not None and time.time() - t0 > a.max_seconds:
                print(f"stopped at the time limit ({a.max_seconds:.0f} s) before {json.dumps(params)}", flush=True)
                break
            torch.manual_seed(0)
            try:
                run = make(params)
                run()
                run()  # warm-up (cuDNN / cuBLAS heuristics, allocator), outside the marked range
                torch.cuda.synchronize()
                with record_function("sweep:" + json.dumps(params, sort_keys=True)):
                    for _ in range(a.iters):
                        run()
                torch.cuda.synchronize()
                done += 1
            except Exception as e:  # noqa: BLE001 - an unsupported combination is skipped, and said
                print(f"skip {json.dumps(params)}: {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
            run = None
            torch.cuda.empty_cache()
    print(f"{done} of {len(cases)} configurations profiled in {time.time() - t0:.1f} s", flush=True)
    raw = os.path.join(tmp, "t.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as src, gzip.open(a.out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(tmp)
    print(f"trace written in {time.time() - t0:.1f} s -> {a.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
