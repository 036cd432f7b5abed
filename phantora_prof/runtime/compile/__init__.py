"""torch.compile on the simulated GPU (issue #16): Inductor's schedule, replayed (backend.py)."""
