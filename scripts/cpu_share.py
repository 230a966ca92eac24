#!/usr/bin/env python3
"""Measure the CPU a cgroup grants: busy processes inside it, their CPU time over wall time.

    cpu_share.py CGROUP_DIR [SECONDS] [PROCESSES]   # prints {"cores": ..., "seconds": ...}

This process joins the cgroup (writes its pid to ``cgroup.procs``) and forks
PROCESSES busy loops (default 2, so a limit up to 2 cores shows) that spin for
SECONDS (default 2); the cores granted are their user + system CPU time over
the wall time. Standard library only: it runs under the system Python.
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


def measure(cgroup: Path, seconds: float, processes: int) -> dict[str, float]:
    (cgroup / "cgroup.procs").write_text(str(os.getpid()))  # the children inherit it
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
    where = Path(sys.argv[1])
    span = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    print(json.dumps(measure(where, span, count)), flush=True)
