"""The rank side: runs the user's script with a simulated CUDA device.

Import order matters: `bootstrap` loads the native fake-CUDA library before torch is
imported, then `install()` patches torch. Nothing in this package's __init__ imports torch.
"""
