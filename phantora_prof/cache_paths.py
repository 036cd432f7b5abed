"""Where phantora-prof keeps what it builds on this machine (one place for every cache)."""
from __future__ import annotations

import os
from pathlib import Path

ENV_CACHE_DIR = "PHANTORA_CACHE_DIR"


def cache_base() -> Path:
    """`$PHANTORA_CACHE_DIR`, else `$XDG_CACHE_HOME/phantora-prof`, else `~/.cache/phantora-prof`."""
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "phantora-prof"
