"""Rank side of bench/allreduce_launchers.py: bench/allreduce_rank.py's allreduces, the rank
placed as tntrun's worker places it.

    python bench/allreduce_rank_placed.py SETTINGS.json

SETTINGS holds the variables allreduce_rank.py reads (MODELS, COMPRESSIONS, REPEATS, the
fusion threshold) and the plan's hosts: a file, since Open MPI passes a remote rank only
the variables it is told to. A rank mpirun started (``TNTRUN_RANK_ENVIRONMENT=mpi``) maps
its MPI's variables to Horovod's with tntrun's own code before Horovod starts, as
``tntrun.engine.worker`` does; horovodrun's ranks have Horovod's already.
"""

import json
import os
import runpy
import sys
from pathlib import Path

settings = json.loads(Path(sys.argv[1]).read_text())
os.environ.update(settings["env"])
placed_by = os.environ.get("TNTRUN_RANK_ENVIRONMENT")
if placed_by:
    from tntrun.environments import environment_named

    hosts = [(host, int(slots)) for host, slots in settings["hosts"]]
    os.environ.update(environment_named(placed_by, os.environ).rank_environment(hosts))
runpy.run_path(str(Path(__file__).with_name("allreduce_rank.py")), run_name="__main__")
