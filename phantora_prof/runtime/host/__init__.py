"""Host (CPU) time that no captured op stands for: the interpreter's work, DataLoader workers, optimizers."""
