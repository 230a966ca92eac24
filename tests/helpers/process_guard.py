"""Starting a process is what makes a test slow: a test not marked ``slow`` that starts one
fails, telling to mark it, so ``make check`` (``-m "not slow"``) stays in-process and fast.

Python's ways of starting a process end in one of :data:`ENTRY_POINTS` (``subprocess``,
``os.popen``, ``asyncio`` and ``multiprocessing`` included; a C extension forking on its
own is not seen); while a test that is not marked runs, each of them fails that test
instead of starting the process. An attempt made where the failure
cannot reach the test (another thread, a broad ``except``) is still recorded, and
:func:`no_process_started` fails the test with it afterwards.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

ENTRY_POINTS: tuple[tuple[Any, str], ...] = (
    (subprocess.Popen, "_execute_child"),
    (_posixsubprocess, "fork_exec"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
    (os, "fork"),
    (os, "forkpty"),
)

# What libraries run once per process to describe the machine, and cache: Python's platform
# module (`uname -p`, asked by MLflow and TensorFlow) and joblib (`lscpu`, physical cores).
# Whichever test asks first would otherwise be taken for one that starts processes.
MACHINE_PROBES = ("uname", "lscpu")

FIX = (
    "mark it @pytest.mark.slow (or pytestmark = pytest.mark.slow in a module whose tests all "
    'start processes): make check runs -m "not slow", the tests that stay in-process'
)


def _command(args: tuple[Any, ...]) -> str:
    """The command a refused call was given, for the message (its first str or list)."""
    for arg in args:
        if isinstance(arg, (str, bytes, list, tuple)):
            return str(arg)[:200]
    return ""


def _is_machine_probe(args: tuple[Any, ...]) -> bool:
    for arg in args:
        if isinstance(arg, (list, tuple)) and arg:
            return os.path.basename(str(arg[0])) in MACHINE_PROBES
        if isinstance(arg, str):
            return arg.split(" ", 1)[0] in MACHINE_PROBES
    return False


def _refusal(
    test: str, name: str, attempts: list[str], original: Callable[..., Any]
) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        if _is_machine_probe(args):
            return original(*args, **kwargs)
        attempt = f"{test} starts a process ({name} {_command(args)}) but is not marked slow"
        attempts.append(attempt)
        pytest.fail(f"{attempt}: {FIX}")

    refused.refuses_for = test  # type: ignore[attr-defined]
    return refused


@contextmanager
def processes_refused(test: str) -> Iterator[list[str]]:
    """Within: starting a process fails ``test``; yields the attempts made."""
    attempts: list[str] = []
    originals = [(owner, name, getattr(owner, name)) for owner, name in ENTRY_POINTS]
    try:
        for owner, name, _ in originals:
            setattr(owner, name, _refusal(test, name, attempts, getattr(owner, name)))
        yield attempts
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def no_process_started(attempts: list[str]) -> None:
    """Fail the test if it tried to start a process, even where that failure was swallowed."""
    if attempts:
        pytest.fail(f"{attempts[0]}: {FIX}", pytrace=False)


def is_slow(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is not None
