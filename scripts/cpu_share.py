#!/usr/bin/env python3
"""Measure the CPU cgroups grant: busy processes inside them, their CPU time over wall time.

    cpu_share.py SECONDS CGROUP_DIR...   # prints {"cores": ..., "seconds": ...}

This process joins the cgroups (writes its pid to each ``cgroup.procs``) and
forks 2 busy loops (so a limit up to 2 cores shows) that spin for SECONDS; the
cores granted are their user + system CPU time over the wall time. Standard
library only: it runs under the system Python.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def spin_until(deadline: float) -> None:
    while time.monotonic() < deadline:
        pass


def measure(cgroups: list[Path], seconds: float, processes: int = 2) -> dict[str, float]:
    for cgroup in cgroups:
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))  # the children inherit them
    start = time.monotonic()
    deadline = start + seconds
    children = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            spin_until(deadline)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    wall = time.monotonic() - start
    used = os.times()
    return {"cores": (used.children_user + used.children_system) / wall, "seconds": wall}


if __name__ == "__main__":
    print(json.dumps(measure([Path(p) for p in sys.argv[2:]], float(sys.argv[1]))), flush=True)
