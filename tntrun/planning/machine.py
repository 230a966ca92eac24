"""Facts about the launching node that a plan depends on, gathered without TensorFlow."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class MachineFacts:
    """Facts about the launching node that the plan depends on."""

    cores_per_node: int
    sockets_per_node: int = 1
    numactl: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    python: str = "python"
    horovodrun: str = "horovodrun"


def venv_executable(name: str) -> str:
    """``name`` beside this interpreter (a venv need not be activated), else from PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def machine_facts() -> MachineFacts:
    """Cores, NUMA sockets, numactl and launcher paths of this node."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    numa = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    return MachineFacts(
        cores_per_node=cores or 1,
        sockets_per_node=max(1, len(numa)),
        numactl=shutil.which("numactl"),
        env=dict(os.environ),
        python=sys.executable,
        horovodrun=venv_executable("horovodrun"),
    )
