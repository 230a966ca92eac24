"""tntrun's cache folder on this machine: results worth keeping between runs (the Horovod
build's summary, the matmul rate, an empty MLflow store), never a run's own data."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tntrun`` (default ``~/.cache/tntrun``), read at each call so that a
    changed environment (a test's, a job's) applies."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tntrun"
