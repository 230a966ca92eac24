"""When this process started, as a wall-clock time."""

from __future__ import annotations

import os
import time


def process_start_time() -> float:
    """``time.time()`` at this process's creation (to 10 ms), so start-up includes imports.

    Read from ``/proc/self/stat`` (start in clock ticks since boot); where that is
    missing, the time of this call.
    """
    now = time.time()
    try:
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)  # Linux only
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (AttributeError, OSError):
        return now
    started_ticks = int(fields[19])  # field 22 of proc(5); fields[0] is field 3
    return now - (since_boot - started_ticks / os.sysconf("SC_CLK_TCK"))
