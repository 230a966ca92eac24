"""Where things are, whichever folder of tests/ a module is in."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]  # the repository's checkout
SCRIPTS = ROOT / "scripts"  # netns_hosts.sh, slurm_cluster.sh
RANK_SCRIPTS = ROOT / "tests" / "rank_scripts"  # run on Horovod ranks by run_on_two_ranks
BIN = Path(sys.executable).parent  # the environment's console scripts: tntrun, horovodrun


def script_module(name: str) -> ModuleType:
    """``scripts/<name>.py`` imported as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
