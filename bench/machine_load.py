"""How much CPU other processes take while a benchmark runs (Linux ``/proc/stat``).

The machine is shared: a run that overlapped someone else's job measures
that job too. ``foreign_cores`` is the machine's busy CPU time during a
command minus what the command (and its waited-for descendants) used,
divided by the wall time.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (all cores)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """CPU seconds of this process and its finished children."""
    me, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def foreign_seconds() -> float:
    """Busy CPU seconds of the machine not spent by this process or its finished children:
    the difference of two readings is what other processes used in between."""
    return busy_seconds() - own_seconds()


@dataclass(frozen=True)
class Measured:
    stdout: str
    wall_s: float
    foreign_cores: float


def run(argv: Sequence[str], **kwargs) -> Measured:
    """``subprocess.run(argv, check=True)`` with the load other processes added meanwhile."""
    before, start = foreign_seconds(), time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, check=True, **kwargs).stdout
    wall = time.perf_counter() - start
    return Measured(out, wall, max(0.0, foreign_seconds() - before) / wall)


def wait_for_quiet(
    threshold: float = 0.25, sample_s: float = 2.0, patience_s: float = 120.0
) -> float:
    """Wait until other processes use under ``threshold`` cores (or ``patience_s`` passed)."""
    deadline = time.perf_counter() + patience_s
    while True:
        before = foreign_seconds()
        time.sleep(sample_s)
        load = (foreign_seconds() - before) / sample_s
        if load < threshold or time.perf_counter() > deadline:
            return load
        time.sleep(3.0)
