"""Runs left RUNNING by a driver that is gone: found and ended KILLED with ``driver_lost``.

A SIGKILLed driver (the OOM killer, Slurm's KillWait, a lost login node) cannot end
its run. The next tntrun run on the same store (a new or a resumed one), ``tntrun ui``
and ``tntrun sync`` look at the RUNNING runs and end those whose driver is gone
(:func:`tntrun.contract.driver_alive.lost_driver`); the store's tracker does the ending.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tntrun.contract.driver_alive import lost_driver
from tntrun.tracking import RunSummary

log = logging.getLogger(__name__)

DRIVER_LOST_TAG = "driver_lost"


def lost_runs(running: Iterable[RunSummary], here: str | None = None) -> list[tuple[str, str]]:
    """(run id, why) of the RUNNING runs whose driver is gone."""
    found = []
    for run in running:
        why = lost_driver(dict(run.tags), here)
        if why is not None:
            found.append((run.run_id, why))
    return found


def announce_lost(run_id: str, why: str) -> None:
    log.warning(f"tntrun: run {run_id} ended KILLED: {why} ({DRIVER_LOST_TAG})")
