"""Facts about the launching node that a plan depends on, gathered without TensorFlow."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tntrun.environments import Allocation, ClusterEnvironment
from tntrun.planning.layout import LOCALHOST


@dataclass(frozen=True)
class MachineFacts:
    """Facts about the launching node that the plan depends on."""

    cores_per_node: int
    sockets_per_node: int = 1
    numactl: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    python: str = "python"
    hostname: str = "localhost"
    gpus: int = 0  # GPUs this node shows (nvidia-smi -L, else /dev/nvidia<N>)
    gpu_probe: str = "not probed"  # how they were counted, for messages
    allocation: Allocation | None = None  # the cluster environment's hosts (tntrun.environments)


PACKAGES = {
    "tensorflow": ("tensorflow-cpu", "tensorflow"),
    "keras": ("keras",),
    "horovod": ("horovod",),
    "hydra": ("hydra-core",),
    "mlflow": ("mlflow",),
    "tntrun": ("tntrun",),
}


def versions() -> dict[str, str]:
    """Installed versions of Python and the stack, read from package metadata."""
    found = {"version.python": platform.python_version()}
    for name, distributions in PACKAGES.items():
        for dist in distributions:
            try:
                found[f"version.{name}"] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return found


def venv_executable(name: str) -> str:
    """``name`` beside this interpreter (a venv need not be activated), else from PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def machine_facts(cluster: ClusterEnvironment) -> MachineFacts:
    """Cores, NUMA sockets, numactl and the interpreter of this node, and the allocation of
    the cluster environment it runs in (``cluster``, detected once by the driver)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    numa = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    return MachineFacts(
        cores_per_node=cores or 1,
        sockets_per_node=max(1, len(numa)),
        numactl=shutil.which("numactl"),
        env=dict(os.environ),
        python=sys.executable,
        hostname=socket.gethostname(),
        allocation=cluster.allocation(),
        **dict(zip(("gpus", "gpu_probe"), count_gpus(), strict=True)),
    )


def count_gpus() -> tuple[int, str]:
    """GPUs on this node without importing TensorFlow: ``nvidia-smi -L``, else device files."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError) as err:
            return 0, f"nvidia-smi -L failed ({err})"
        found = [line for line in listed.stdout.splitlines() if line.startswith("GPU ")]
        return len(found), f"nvidia-smi -L lists {len(found)}"
    devices = [p for p in Path("/dev").glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name)]
    return len(devices), f"no nvidia-smi, {len(devices)} /dev/nvidia<N> device(s)"


def device_problems(hosts: Sequence[tuple[str, int]], gpus: int, facts: MachineFacts) -> list[str]:
    """Ranks that would run here asking for more GPUs than this node shows (a real run;
    a dry run may plan for GPUs elsewhere). Remote hosts are checked by their ranks."""
    here = any(host in (LOCALHOST, facts.hostname) for host, _ in hosts)
    if gpus > 0 and here and facts.gpus < gpus:
        return [
            f"gpus={gpus}: this node ({facts.hostname}) shows {facts.gpus} GPU(s) "
            f"({facts.gpu_probe}): run on a node with {gpus} GPUs or set gpus=0 for CPU "
            "ranks"
        ]
    return []


def tensorboard_problems(wanted: bool) -> list[str]:
    """``train.tensorboard`` without TensorBoard installed: TensorFlow 2.20+ no longer
    requires it, and the master rank would fail at its first logged step."""
    if wanted and importlib.util.find_spec("tensorboard") is None:
        return [
            "train.tensorboard=true: TensorBoard is not installed in this environment: "
            "pip install tensorboard (tntrun's cpu and gpu extras bring it), or set "
            "train.tensorboard=false"
        ]
    return []
