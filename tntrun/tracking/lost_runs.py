"""Runs left RUNNING by a driver that is gone: found and ended KILLED with ``driver_lost``.

A SIGKILLed driver (the OOM killer, Slurm's KillWait, a lost login node) cannot end
its run. The next tntrun run on the same store (a new or a resumed one), ``tntrun ui``
and ``tntrun sync`` look at the RUNNING runs and end those whose driver is gone
(:func:`tntrun.launch.driver_alive.lost_driver`).
"""

from __future__ import annotations

import sys
from typing import Any

from tntrun.launch.driver_alive import lost_driver

DRIVER_LOST_TAG = "driver_lost"


def end_lost_runs(client: Any, here: str | None = None) -> list[str]:
    """End every RUNNING run of the store whose driver is gone; their ids."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return []
    ended = []
    for run in client.search_runs(experiments, filter_string="attributes.status = 'RUNNING'"):
        why = lost_driver(run.data.tags, here)
        if why is None:
            continue
        client.set_tag(run.info.run_id, DRIVER_LOST_TAG, why)
        client.set_terminated(run.info.run_id, status="KILLED")
        print(
            f"tntrun: run {run.info.run_id} ended KILLED: {why} ({DRIVER_LOST_TAG})",
            file=sys.stderr,
            flush=True,
        )
        ended.append(run.info.run_id)
    return ended
