"""Per-launch time of ATen's `multi_tensor_apply` kernels (the `_foreach_*` ops of torch.optim).

A foreach op over a parameter list runs as one kernel launch per group of chunks
(kernels.multi_tensor_launch_shapes): every block walks one chunk of at most 65,536 elements
of one tensor, 2,048 elements (512 threads x 4) per iteration of its loop, and all blocks of a
launch (at most 320) are resident at once. Two limits decide how long a launch takes:

- **latency**: a block cannot finish faster than its chunk's iterations, each waiting on
  dependent global loads; a launch over a few small tensors plus one full chunk takes as
  long as that chunk (~16 us for 32 iterations on the H200) however few bytes it moves;
- **bandwidth**: many full chunks move bytes = elements x element size x streams (the lists
  read, plus the one written when in place) at a fraction of HBM bandwidth.

    t = t0 + sqrt((iterations of the largest chunk x t_iter)^2 + (bytes / bandwidth)^2)

The quadrature sum is empirical: it follows the measured launches across the switch from
one regime to the other (141 full chunks of a ViT's `_foreach_mul_`: 25.2 us real, 24.9
modelled, where either limit alone gives 17-18).

Why it exists: the in-training family sweep priced a foreach op by its total bytes (a
bandwidth model spread over the launches by elements), right for language models whose
launches are full chunks and 24-70% short for convolution nets and small-parameter models
(MobileNet, EfficientNet, RegNet, LeViT), whose many small tensors make latency-bound
launches: a GoogLeNet optimizer step ran 0.42 ms of foreach kernels on the H200 against
0.17 simulated.

Fitted (profiles/h200.json, `multi_tensor_*`): t0 once, t_iter and the bandwidth fraction per
op and depth, on the 1,694 `multi_tensor_apply` launches of 21 models' real H200 profiles
(tools/holdout/real_h200: HF language models, timm and torchvision vision models, an LSTM),
their chunk structure from each model's parameter list (tools/holdout/foreach_launches.py).
Checked on eight models left out of the fit (HF CLIP, DeBERTa, Qwen3, Whisper, timm LeViT and
MaxViT, torchvision GoogLeNet and R3D): foreach GPU time per profiled step within 1.6% on
average, 5.5% at most (before, for the five of them the old model priced: +0.9% .. -59.3%).
Left out of the model: L2 residency (a model whose optimizer state fits the 50 MB L2 runs
faster: ShuffleNetV2, 2.3M parameters, +17.9%), bf16 lists (fitted on fp32 only; the bytes
scale, the iteration latency is kept), fused optimizers (`_fused_adam(w)_`, priced by the
optimizer class's roofline as before). `_foreach_norm`'s launches use the 'default'
figures (its few real launches were left out of the fit), its cleanup kernel a measured
constant (`lpnorm_cleanup_ns`).
"""
from __future__ import annotations

import math

from phantora_prof.cost import kernels as _K
from phantora_prof.cost.profiles import profile_for
from phantora_prof.cost.roofline import hbm_bw

DEFAULT_KEY = "default"  # the figures for a foreach op the fit did not see


def op_key(base: str, depth: int) -> str:
    """The profile's key for an op's figures: its name and depth (`_foreach_add_@1` adds a
    scalar to one list, `_foreach_add_@2` one list to another: different kernels, and the
    scalar one in AdamW reads what the op before it just wrote, from the L2 cache)."""
    return f"{base}@{depth}"


def streams(base: str, depth: int) -> int:
    """Tensors each element touches in HBM: the `depth` lists of an in-place op and the one it
    writes back; an out-of-place op's depth already counts its output."""
    return depth + 1 if base.endswith("_") else depth


def launch_ns(base: str, depth: int, itemsize: int, elems: int, largest_chunk: int, gpu) -> float:
    """Duration of one launch of `base` over `elems` elements whose largest chunk is
    `largest_chunk` elements, on `gpu` (its profile's `multi_tensor_*` figures)."""
    prof = profile_for(gpu)
    key = op_key(base, depth)
    t_iter = prof.multi_tensor_iter_ns.get(key, prof.multi_tensor_iter_ns[DEFAULT_KEY])
    fraction = prof.multi_tensor_mem_fraction.get(key, prof.multi_tensor_mem_fraction[DEFAULT_KEY])
    iterations = -(-largest_chunk // _K.MULTI_TENSOR_ELEMS_PER_ITER)
    latency = iterations * t_iter
    transfer = elems * itemsize * streams(base, depth) / (hbm_bw(gpu) * fraction) * 1e9
    return prof.multi_tensor_t0_ns + math.hypot(latency, transfer)


def foreach_launch_times(base: str, lists: list[tuple], depth: int, gpu) -> list[float]:
    """The duration of each launch of a foreach op over `lists` (the first list decides the
    split, as in ATen), in launch order."""
    first = lists[0]
    itemsize = first[0].itemsize
    return [launch_ns(base, depth, itemsize, elems, largest, gpu)
            for _, elems, largest in _K.multi_tensor_launch_shapes([t.numel for t in first], depth)]
