"""The formatter and the linter own the layout: the test run fails when either would change it."""

import subprocess
import sys

import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.paths import ROOT

RUFF = [sys.executable, "-m", "ruff"]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RUFF, *args], cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_ruff_check_is_clean():
    result = ruff("check", ".")
    assert_succeeded(result)


@pytest.mark.slow
def test_ruff_format_would_change_nothing():
    result = ruff("format", "--check", ".")
    assert_succeeded(result)


def test_no_line_opts_out_of_the_formatter():
    opted_out = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("tntrun", "models", "datasets", "tests", "bench", "scripts")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "fmt: " + "skip" in line or "fmt: " + "off" in line
    ]
    assert opted_out == []
