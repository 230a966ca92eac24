"""Where things are, whichever folder of tests/ a module is in."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository's checkout
SCRIPTS = ROOT / "scripts"  # netns_hosts.sh, slurm_cluster.sh
RANK_SCRIPTS = ROOT / "tests" / "rank_scripts"  # run on Horovod ranks by run_on_two_ranks
BIN = Path(sys.executable).parent  # the environment's console scripts: tntrun, horovodrun
