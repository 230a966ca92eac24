"""Checks and facts the driver gathers before planning (no TensorFlow)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from tntrun.plan import DatasetInfo, MachineFacts, PlanError

ZOO_GROUPS = ("model", "dataset")


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


def group_options(group: str) -> list[str]:
    """The options of a config group shipped in ``tntrun.conf``."""
    folder = files("tntrun.conf") / group
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def unknown_group_choices(argv: Sequence[str]) -> list[str]:
    """Problems for ``model=x``/``dataset=x`` overrides naming no shipped config."""
    if any(arg.startswith(("hydra.searchpath", "+hydra.searchpath")) for arg in argv):
        return []  # user config directories may add options
    problems = []
    for arg in argv:
        group, sep, value = arg.partition("=")
        if sep and group in ZOO_GROUPS:
            available = group_options(group)
            for choice in value.split(","):
                if choice and choice not in available:
                    problems.append(
                        f"{group}={choice}: no such {group}; available: {', '.join(available)}"
                    )
    return problems


def check_target(group: str, target: str) -> None:
    """Fail unless ``target`` (module.attr) can be found; zoo modules are imported to check."""
    module, _, attr = target.rpartition(".")
    try:
        spec = importlib.util.find_spec(module) if module else None
    except ModuleNotFoundError:
        spec = None
    if spec is None:
        raise PlanError(
            f"{group}._target_={target}: module {module or '?'} not found; "
            f"tntrun's {group}s: {', '.join(group_options(group))}"
        )
    if module.startswith("tntrun.") and not hasattr(importlib.import_module(module), attr):
        raise PlanError(f"{group}._target_={target}: {module} has no {attr}")


def dataset_info(dataset: Any) -> DatasetInfo:
    """The dataset's sizes and shapes; a missing file becomes a config error."""
    try:
        return dataset.info()
    except FileNotFoundError as err:
        raise PlanError(str(err)) from None
