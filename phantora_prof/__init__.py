"""phantora-prof: simulate a GPU cluster for an unmodified PyTorch training script.

Importing this package must stay cheap and must not import torch: rank processes load
the native fake-CUDA library before torch.
"""
__version__ = "0.1.0"
