"""TOML cluster files: describe any cluster the presets do not cover.

Every field is optional; ``base`` names a preset to start from (default ``dgx-h100``) and
the file overrides what it sets. Units are in the field names.

.. code-block:: toml

    name = "my-h100-ib"          # shown in reports
    base = "dgx-h100"            # preset to start from: dgx-h100, dgx-h200, dgx-a100

    [node]
    gpus_per_node = 8            # GPUs per server
    gpu_arch = "hopper"          # volta | ampere | hopper | blackwell (selects NCCL constants)
    cpu_vendor = "intel"         # intel | amd | arm (NCCL's network overhead constant)
    nvlink_gbps = 450.0          # NVLink GB/s per GPU per direction (links x per-link rate)
    nvlink_links = 18            # NVLink links per GPU (NCCL's bandwidth model uses it)
    nvlink_efficiency = 0.824    # fraction of nvlink_gbps NCCL reaches (0, 1]
    nvlink_latency_ns = 700.0    # GPU->NVSwitch->GPU hop latency
    nvswitch = true              # false: GPUs talk over PCIe inside the node
    nvls = true                  # NVLink SHARP available (hopper/blackwell + nvswitch only)
    pcie_gbps = 64.0             # PCIe GB/s per GPU per direction (Gen5 x16 = 64)
    pcie_efficiency = 0.85       # fraction of pcie_gbps reached
    pcie_latency_ns = 1000.0     # GPU<->PCIe switch round of latency

    [network]
    nics_per_node = 8            # scale-out NICs per node, shared evenly by the GPUs
    nic_gbits = 400.0            # NIC line rate in Gb/s (NDR = 400, HDR = 200)
    nic_efficiency = 0.92        # fraction of line rate NCCL reaches (0, 1]
    nic_latency_ns = 1500.0      # NIC + cable latency, both ends together
    switch_latency_ns = 250.0    # per leaf<->spine hop
    nodes_per_leaf = 32          # nodes under one leaf switch (a scalable unit)
    spines = 32                  # spine switches; every leaf connects to every spine
    oversubscription = 1.0       # leaf downlink : uplink bandwidth ratio (>= 1)
    rail_optimized = true        # NIC r of each node goes to leaf r of its unit

Validation is strict: unknown sections or keys, wrong types and out-of-range values raise
:class:`~netsim.errors.NetsimError` naming the file and the key.
"""
from __future__ import annotations

import dataclasses
import logging
import tomllib
from pathlib import Path
from typing import Any

from netsim.errors import NetsimError
from netsim.presets import PRESETS, get_preset
from netsim.topology import ClusterSpec

log = logging.getLogger(__name__)

_TOP_KEYS = {"name", "base", "node", "network"}


def _fields(cls: type) -> dict[str, type]:
    return {f.name: f.type for f in dataclasses.fields(cls)}


def _coerce(where: str, key: str, value: Any, default: Any) -> Any:
    """Check a TOML value against the type of the default it replaces."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise NetsimError(f"{where}.{key} must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise NetsimError(f"{where}.{key} must be an integer, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise NetsimError(f"{where}.{key} must be a number, got {value!r}")
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise NetsimError(f"{where}.{key} must be a string, got {value!r}")
        return value
    return value


def _section(where: str, table: Any, base_obj: Any) -> Any:
    if not isinstance(table, dict):
        raise NetsimError(f"[{where}] must be a table")
    allowed = _fields(type(base_obj))
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise NetsimError(f"unknown key(s) in [{where}]: {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    changes = {k: _coerce(where, k, v, getattr(base_obj, k)) for k, v in table.items()}
    return dataclasses.replace(base_obj, **changes)


def cluster_from_dict(data: dict[str, Any], source: str = "<dict>") -> ClusterSpec:
    """Build and validate a :class:`ClusterSpec` from parsed TOML data."""
    try:
        unknown = sorted(set(data) - _TOP_KEYS)
        if unknown:
            raise NetsimError(f"unknown top-level key(s): {', '.join(unknown)}; allowed: {', '.join(sorted(_TOP_KEYS))}")
        base_name = data.get("base", "dgx-h100")
        if not isinstance(base_name, str):
            raise NetsimError(f"base must be a preset name string, got {base_name!r}")
        base = get_preset(base_name)
        node = _section("node", data.get("node", {}), base.node)
        network = _section("network", data.get("network", {}), base.network)
        name = data.get("name", f"{base.name}-custom")
        if not isinstance(name, str):
            raise NetsimError(f"name must be a string, got {name!r}")
        return ClusterSpec(name=name, node=node, network=network)
    except NetsimError as e:
        raise NetsimError(f"{source}: {e}") from None


def load_cluster_file(path: str | Path) -> ClusterSpec:
    """Read and validate a TOML cluster file (see the module docstring for the fields)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise NetsimError(f"cannot read cluster file {p}: {e.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise NetsimError(f"{p}: not valid TOML: {e}") from None
    spec = cluster_from_dict(data, source=str(p))
    log.debug("loaded cluster file %s as %s", p, spec.name)
    return spec


def resolve_cluster(name_or_path: str | ClusterSpec) -> ClusterSpec:
    """A preset name, a path to a TOML file, or a ClusterSpec -> ClusterSpec."""
    if isinstance(name_or_path, ClusterSpec):
        return name_or_path
    key = str(name_or_path).strip().lower().replace("_", "-")
    if key in PRESETS:
        return PRESETS[key]
    if str(name_or_path).endswith(".toml") or Path(str(name_or_path)).is_file():
        return load_cluster_file(name_or_path)
    raise NetsimError(f"unknown cluster {name_or_path!r}: not a preset ({', '.join(sorted(PRESETS))}) "
                      "and not a TOML file")
