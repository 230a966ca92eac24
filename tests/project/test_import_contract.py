"""The import contract: layers, independent sides, no rank-side import of the driver side,
no cycle (pyproject.toml's [tool.importlinter], checked by import-linter's lint-imports)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.asserts import assert_exit

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
ZOO = ("models", "datasets")


def lint_imports(package_parent: Path) -> subprocess.CompletedProcess:
    """lint-imports with the project's contracts over the ``tntrun`` found in ``package_parent``."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")],
        cwd=package_parent,
        env={"PYTHONPATH": str(package_parent), "PATH": str(LINT_IMPORTS.parent)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_package_keeps_its_import_contract(monkeypatch):
    """lint-imports' check in this process (the fast tier); its report shows on a failure."""
    from importlinter.application.use_cases import lint_imports as lint_in_process
    from importlinter.configuration import configure

    configure()  # what the lint-imports command does first: its readers and graph builder
    monkeypatch.chdir(ROOT)
    kept = lint_in_process(str(ROOT / "pyproject.toml"), cache_dir=None, no_logo=True)
    assert kept, "a contract is broken: the report above names the imports"


@pytest.mark.slow  # a copy of the package checked by lint-imports in a process of its own
@pytest.mark.parametrize(
    ("module", "bad_import", "contract"),
    [
        ("engine/trainer.py", "import tntrun.tracking.metrics_stream", "rank side imports no"),
        ("planning/plan.py", "import tntrun.launch", "Each side imports only the sides below"),
        ("launch/watchdog.py", "import tntrun.tracking.provenance", "are independent"),
        ("tracking/metrics_stream.py", "import tntrun.tracking.delivery", "No import cycle"),
    ],
)
def test_a_broken_contract_fails(tmp_path, module, bad_import, contract):
    shutil.copytree(ROOT / "tntrun", tmp_path / "tntrun", ignore=shutil.ignore_patterns("*.pyc"))
    target = tmp_path / "tntrun" / module
    # Inside a function, as hidden circles are: the contract still sees it.
    target.write_text(f"{target.read_text()}\n\ndef _bad() -> None:\n    {bad_import}\n")
    done = lint_imports(tmp_path)
    assert_exit(done, 1)
    broken = done.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, done.stdout


def test_the_zoo_imports_nothing_of_tntrun_but_the_zoo():
    """models/ and datasets/ (tntrun.models, tntrun.datasets) are outside the graph
    lint-imports builds from tntrun/: user-facing model code, it needs only itself."""
    outside = []
    for folder in ZOO:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
                outside += [
                    f"{path.relative_to(ROOT)}: {name}"
                    for name in names
                    if name.split(".")[0] == "tntrun"
                    and not name.startswith(tuple(f"tntrun.{zoo}" for zoo in ZOO))
                ]
    assert not outside
