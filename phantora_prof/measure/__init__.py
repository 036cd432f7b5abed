"""Measuring kernel times on a real GPU: `phantora-prof db build` and `--kernel-times measure`.

The simulated rank process never touches the real GPU (its CUDA is fake); it sends each
new op signature to a measuring worker, a separate plain-torch process on the real device
(worker.py), which replays the call with fresh random inputs and times it with
torch.profiler (replay.py). Results land in a kernel database (cost/kernel_db.py) that
later CPU-only runs read with `--kernel-db`.
"""
