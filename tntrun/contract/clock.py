"""When a process started, as a wall-clock time."""

from __future__ import annotations

import os
import time


def process_start_time(pid: int | None = None) -> float | None:
    """``time.time()`` at the creation of process ``pid`` (default: this one), to 10 ms.

    Read from ``/proc/<pid>/stat`` (start in clock ticks since boot). For this process,
    where that is missing, the time of this call; for another, None if it is not running.
    """
    now = time.time()
    try:
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)  # Linux only
        with open(f"/proc/{pid or 'self'}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (AttributeError, OSError):
        return None if pid else now
    if pid and fields[0] in ("Z", "X"):  # dead, not yet reaped by its parent
        return None
    started_ticks = int(fields[19])  # field 22 of proc(5); fields[0] is field 3
    return now - (since_boot - started_ticks / os.sysconf("SC_CLK_TCK"))
