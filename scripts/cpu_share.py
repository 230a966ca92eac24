#!/usr/bin/env python3
"""What CPU cgroups grant: their settings read back, and busy processes measured in them.

    cpu_share.py SECONDS CGROUP_DIR...   # prints {"cores": ..., "quota_cores": ..., ...}

Read back: ``quota_cores`` (the CFS quota over its period; null when unlimited) and
``cpus`` (the cpuset), as the kernel holds them. Measured: this process joins the
cgroups (writes its pid to each ``cgroup.procs``) and forks 2 busy loops (so a limit up
to 2 cores shows) that spin for SECONDS; ``cores`` is their user + system CPU time over
the wall time. A quota caps it whatever else runs; what it reaches below the cap depends
on the machine's other work, so ``free_cores`` measures 2 busy loops outside the cgroups
over the same seconds. Standard library only: it runs under the system Python.
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


def quota_cores(cgroup: Path) -> float | None:
    """The cgroup's CFS quota in cores (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``)."""
    if (cgroup / "cpu.max").exists():
        quota, period = (cgroup / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    quota = int((cgroup / "cpu.cfs_quota_us").read_text())
    return None if quota < 0 else quota / int((cgroup / "cpu.cfs_period_us").read_text())


def settings(cgroups: list[Path]) -> dict[str, float | str | None]:
    found: dict[str, float | str | None] = {}
    for cgroup in cgroups:
        if (cgroup / "cpu.max").exists() or (cgroup / "cpu.cfs_quota_us").exists():
            found["quota_cores"] = quota_cores(cgroup)
        if (cgroup / "cpuset.cpus").exists():
            found["cpus"] = (cgroup / "cpuset.cpus").read_text().strip()
    return found


def busy(count: int, deadline: float) -> list[int]:
    children = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            spin_until(deadline)
            os._exit(0)
        children.append(pid)
    return children


def cpu_time_of(children: list[int]) -> float:
    """User + system seconds of ``children``, waited for."""
    total = 0.0
    for pid in children:
        _, _, usage = os.wait4(pid, 0)
        total += usage.ru_utime + usage.ru_stime
    return total


def measure(cgroups: list[Path], seconds: float, processes: int = 2) -> dict:
    start = time.monotonic()
    deadline = start + seconds
    free = busy(processes, deadline)  # forked before joining: outside the cgroups
    for cgroup in cgroups:
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))  # the children inherit them
    held = busy(processes, deadline)
    cores, free_cores = cpu_time_of(held), cpu_time_of(free)
    wall = time.monotonic() - start
    return {
        "cores": cores / wall,
        "free_cores": free_cores / wall,
        "seconds": wall,
        **settings(cgroups),
    }


if __name__ == "__main__":
    print(json.dumps(measure([Path(p) for p in sys.argv[2:]], float(sys.argv[1]))), flush=True)
