"""Where the shared reference data lives (real H200 traces and the workloads that made them)."""
from __future__ import annotations

import os
from pathlib import Path



def shared_dir(repo: Path) -> Path:
    """The shared folder of the checkout at `repo`: $PHANTORA_SHARED_DIR, ../shared beside it
    (as CI lays it out), else the workplace's /work/shared (a clone elsewhere). Falls back to
    ../shared, which then does not exist: callers say what is missing."""
    for candidate in (os.environ.get("PHANTORA_SHARED_DIR", ""), Path(repo).parent / "shared", "/work/shared"):
        if str(candidate) and (Path(candidate) / "reference" / "h200").is_dir():
            return Path(candidate).resolve()
    return (Path(repo).parent / "shared").resolve()
