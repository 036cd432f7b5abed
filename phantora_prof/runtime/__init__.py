"""The rank side: runs the user's script with a simulated CUDA device.

Rooms:
- process/: the rank process: entry point (`bootstrap`), set-up (`install`), state, the
  virtual clock, the link to the coordinator, the native fake-CUDA device;
- device/: the simulated GPU as torch.cuda sees it: memory (the caching allocator and the
  allocations ops make besides their outputs), streams and events, RNG, CUDA graphs;
- dispatch/: the op stream: the capture mode (record, cost, fake every CUDA op), dispatch as a
  CUDA build would (CUDA-key kernels, SDPA's backend choice, cuDNN layouts), the op tree,
  real values of small tensors, user ranges;
- host/: host time no captured op stands for (the interpreter's work, DataLoader workers,
  optimizers' per-parameter work);
- patches/: torch APIs patched for a fake device (nn.Module moves, torch.save/load, torch.profiler);
- distributed/: process groups and collectives.

Import order matters: `process.bootstrap` loads the native fake-CUDA library before torch is
imported, then `process.install.install()` patches torch. Nothing in this package's __init__
imports torch.
"""
