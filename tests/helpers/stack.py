"""The stack this test environment holds, as scripts/setup_env.sh installed it.

Tests compare what a run records (version tags, a logged model's pinned requirements) with
these, so the same tests hold on every supported TensorFlow (2.18 to 2.21) and Python.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from tests.helpers.components import missing


def installed(distribution: str) -> str:
    return importlib.metadata.version(distribution)


def tensorflow_requirement() -> str:
    """``tensorflow-cpu==X`` (or ``tensorflow==X``): the TensorFlow distribution installed here."""
    for name in ("tensorflow-cpu", "tensorflow"):
        try:
            return f"{name}=={installed(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    raise AssertionError("no TensorFlow installed in the test environment")


def tensorflow_version() -> str:
    return tensorflow_requirement().partition("==")[2]


def horovod_wheel() -> Path:
    """The patched Horovod wheel the set-up built (or took from its cache) and installed."""
    record = Path(sys.prefix) / ".horovod-wheel"
    wheel = Path(record.read_text().strip()) if record.exists() else None
    if wheel is None or not wheel.exists():
        missing(f"the cached Horovod wheel named in {record}", "run scripts/setup_env.sh")
    return wheel
