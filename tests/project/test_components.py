"""A missing real component fails the tests that need it under CI, and only skips elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.commands import clean_env
from tests.helpers.components import REQUIRE_ENV
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.slow

CHECKOUT = ROOT


def pytest_without_slurm(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """A test needing the ``slurm`` fixture, run by pytest with slurmctld hidden from PATH."""
    (tmp_path / "test_needs_slurm.py").write_text("def test_needs_slurm(slurm):\n    pass\n")
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "slurmctld").exists()]
    base = {k: v for k, v in clean_env().items() if k not in ("CI", REQUIRE_ENV)}
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-rs"]
    return subprocess.run(
        [*command, "-p", "no:cacheprovider", str(tmp_path / "test_needs_slurm.py")],
        cwd=CHECKOUT,
        env={**base, "PATH": os.pathsep.join(path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_under_ci_a_missing_slurm_fails_naming_it(tmp_path):
    result = pytest_without_slurm(tmp_path, CI="true")
    assert_exit(result, 1)
    assert "missing real component: slurmctld" in result.stdout, result.stdout[-2000:]
    assert "1 error" in result.stdout


def test_a_users_run_without_slurm_skips_with_the_reason(tmp_path):
    result = pytest_without_slurm(tmp_path)
    assert_succeeded(result)
    assert "SKIPPED" in result.stdout and "missing real component: slurmctld" in result.stdout
