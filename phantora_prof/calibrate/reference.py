"""Where the shared reference data lives (real H200 traces and the workloads that made them)."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def shared_dir(repo: Path) -> Path:
    """The shared folder of the checkout at `repo`: $PHANTORA_SHARED_DIR, ../shared beside it
    (as CI lays it out), else the workplace's /work/shared (a clone elsewhere). Falls back to
    ../shared, which then does not exist: callers say what is missing."""
    for candidate in (os.environ.get("PHANTORA_SHARED_DIR", ""), Path(repo).parent / "shared", "/work/shared"):
        if str(candidate) and (Path(candidate) / "reference" / "h200").is_dir():
            return Path(candidate).resolve()
    return (Path(repo).parent / "shared").resolve()


def reference_dir(repo: Path = REPO) -> Path | None:
    """The reference data folder (`h200/<run>/trace.pt.trace.json.gz`, `workloads/gpt.py`):
    $PHANTORA_REFERENCE, else the shared folder's `reference/` (../shared/reference beside the
    checkout, see shared_dir) if it exists; None when there is none."""
    env = os.environ.get("PHANTORA_REFERENCE", "")
    if env:
        return Path(env).resolve()
    path = shared_dir(repo) / "reference"
    return path if path.is_dir() else None


def require_reference(reference: Path | None = None) -> Path:
    """`reference`, else the default one (reference_dir); FileNotFoundError when there is none."""
    path = Path(reference) if reference is not None else reference_dir()
    if path is None or not path.is_dir():
        raise FileNotFoundError(f"reference data folder {path or '../shared/reference'} not found "
                                "(pass --reference DIR or set PHANTORA_REFERENCE)")
    return path
