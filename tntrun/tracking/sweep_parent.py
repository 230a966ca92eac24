"""The file in a sweep directory that names the sweep's parent run.

The sweep writes it before any job runs; each job (in-process, forked or on a
cluster) and ``tntrun report <sweep dir>`` find the parent run through it.
"""

from __future__ import annotations

from pathlib import Path

PARENT_FILE = "mlflow_parent_run_id"


def parent_run_id(sweep_dir: Path) -> str | None:
    """The parent run's id the sweep directory names (None: not a tracked sweep)."""
    marker = sweep_dir / PARENT_FILE
    return marker.read_text().strip() if marker.exists() else None
