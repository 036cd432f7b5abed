"""A rank's process groups as torch.profiler's `distributedInfo` describes them.

Apart from the collectives engine so that the rank timeline (profiler windows written from
inside the run) and the output writer (final traces) read it without importing each other.
"""
from __future__ import annotations

from typing import Any


def distributed_info(tl: Any, world_size: int | None = None) -> dict[str, Any] | None:
    groups: dict = dict(getattr(tl, "pg_info", None) or {})
    seen: dict = getattr(tl, "pg_seen", None) or {}
    for name, (desc, ranks) in seen.items():
        if ":p2p:" not in name:
            groups[name] = (desc, ranks)  # the description set after creation (e.g. mesh_dp)
    if not groups:
        return None
    if world_size is None:
        world_size = len(groups.get("0", ((), ()))[1]) or max((max(r) + 1 for _, r in groups.values() if r), default=1)
    pg_config = [{"pg_name": name, "pg_desc": desc, "backend_config": "cuda:nccl", "pg_size": len(ranks),
                  "ranks": list(ranks)} for name, (desc, ranks) in groups.items()]
    return {"backend": "nccl", "rank": tl.rank, "world_size": world_size, "pg_count": len(pg_config),
            "pg_config": pg_config, "nccl_version": "2.28.9"}
