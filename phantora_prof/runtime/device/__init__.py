"""The simulated GPU as torch.cuda sees it: memory (allocator), streams, events, RNG, graphs, pinned memory."""
