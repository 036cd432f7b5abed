"""Does torch.profiler change a convolution's GPU time? (issue #14, session 21)

The family sweep measures kernels under torch.profiler. For HF wav2vec2's positional
convolution (768 channels, kernel 128, 16 groups: cuDNN's legacy per-group kernels) the
profiled kernels summed to ~31 ms per call, while the unprofiled training step's forward took
~18 ms on the host including a sync after it. This times the same convolutions with CUDA
events, unprofiled, then sums their kernels under the profiler.

    python tools/holdout/conv_profiler_probe.py   (on a GPU)
"""
import json

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile

CASES = [  # (batch, channels, length, kernel, groups)
    (8, 768, 199, 128, 16), (32, 768, 256, 128, 16), (8, 512, 12799, 3, 1), (16, 256, 1024, 3, 1),
]


def main() -> None:
    torch.backends.cudnn.benchmark = False
    out = []
    for n, c, length, k, g in CASES:
        conv = nn.Conv1d(c, c, k, padding=k // 2, groups=g).cuda()
        x = torch.randn(n, c, length, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            for _ in range(3):
                conv(x)
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(10):
                conv(x)
            b.record()
            torch.cuda.synchronize()
            events_ms = a.elapsed_time(b) / 10
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    conv(x)
                torch.cuda.synchronize()
        kernels_ms = sum(e.self_device_time_total for e in prof.key_averages()) / 1e3 / 10
        row = {"n": n, "c": c, "len": length, "k": k, "g": g, "events_ms": round(events_ms, 4),
               "profiled_kernels_ms": round(kernels_ms, 4)}
        print(json.dumps(row), flush=True)
        out.append(row)


if __name__ == "__main__":
    main()
