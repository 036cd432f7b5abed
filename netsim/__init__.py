"""netsim: a torch-free, flow-level network simulator for GPU clusters.

Layers, bottom up (each one a small module):

- ``topology``/``presets``/``cluster_file``: GPUs in nodes, NVLink/NVSwitch and PCIe inside a
  node, one NIC per GPU on a rail-optimized leaf/spine fabric; deterministic ECMP paths.
- ``maxmin`` (numba kernels) and ``flowsim`` (event loop): flows on paths, weighted max-min
  fair sharing by progressive filling, recomputed at every flow arrival and completion.
- ``algorithms``/``tuning``/``selection``: NCCL collectives decomposed the way NCCL runs
  them (ring, double binary tree, NVLS, NVLSTree, p2p, all-to-all), NCCL's own latency model
  (``src/graph/tuning.cc``) and its algorithm/protocol choice by message size.
- ``network``: the engine-facing API (``Network.simulate_collectives``).
- ``nccl_tests``: nccl-tests style sweeps and tables.

It never imports torch or phantora_prof. See netsim/README.md for the model, its
approximations and the published measurements it is checked against.
"""
from netsim.errors import NetsimError
from netsim.topology import ClusterSpec, NetworkSpec, NodeSpec, Topology
from netsim.presets import PRESETS, get_preset
from netsim.cluster_file import load_cluster_file, resolve_cluster
from netsim.network import CollectiveRequest, CollectiveResult, Network

__all__ = [
    "NetsimError",
    "ClusterSpec",
    "NetworkSpec",
    "NodeSpec",
    "Topology",
    "PRESETS",
    "get_preset",
    "load_cluster_file",
    "resolve_cluster",
    "CollectiveRequest",
    "CollectiveResult",
    "Network",
]
