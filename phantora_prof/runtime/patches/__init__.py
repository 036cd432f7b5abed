"""torch APIs patched for a fake device: nn.Module moves, torch.save/load, torch.profiler."""
