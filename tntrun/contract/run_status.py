"""A run's status: what the tracker records, the console prints and results carry.

A :class:`~enum.StrEnum`, so each member is the very string MLflow stores and
``tracking_pending.json`` holds ("FINISHED"), and compares equal to it: records,
output and the run directory read as they did with bare strings.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """How a run stands or ended; the first five are the tracking store's own."""

    RUNNING = "RUNNING"
    SCHEDULED = "SCHEDULED"  # a store's run not started yet (MLflow has it; tntrun sets none)
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"  # stopped by a signal, Ctrl-C, or its driver gone
    INVALID = "INVALID"  # refused before launch: bad config, never tracked as a store status
    PLANNED = "PLANNED"  # dry_run=true: planned, nothing launched
