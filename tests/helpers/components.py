"""The real components tests need (Slurm, sshd, Chromium, a built Horovod wheel, ...).

A missing one must never turn a headline test into a silent skip where it should be
there: under CI (``CI=true``) and under ``make test`` as root (which sets
``TNTRUN_REQUIRE_COMPONENTS=1``; its set-up installs them) the test fails, naming the
component and how to get it. Elsewhere (a user's ``make test`` without root) it is
skipped, and pytest's ``-ra`` summary lists every reason at the end.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

REQUIRE_ENV = "TNTRUN_REQUIRE_COMPONENTS"


def required() -> bool:
    """Whether a missing component fails the test instead of skipping it."""
    return os.environ.get("CI", "").lower() in ("true", "1") or os.environ.get(REQUIRE_ENV) == "1"


def missing(what: str, fix: str) -> NoReturn:
    """Fail (CI, ``make test`` as root) or skip (elsewhere): ``what`` is missing."""
    message = f"missing real component: {what} ({fix})"
    if required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_root(why: str) -> None:
    if os.geteuid() != 0:
        missing("root", f"{why} needs root: run the tests as root, e.g. sudo make test")


def require_commands(*names: str, fix: str) -> None:
    """Every command on PATH (or, given as a path, present)."""
    absent = [n for n in names if not (Path(n).exists() if "/" in n else shutil.which(n))]
    if absent:
        missing(", ".join(absent), fix)


def require_module(name: str, fix: str = "make test installs tntrun's dependencies") -> ModuleType:
    """The imported module: ``pytest.importorskip`` that fails where components are required."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        missing(f"Python module {name} ({err})", fix)


def require_path(path: Path, what: str, fix: str) -> None:
    if not path.exists():
        missing(f"{what} ({path})", fix)
