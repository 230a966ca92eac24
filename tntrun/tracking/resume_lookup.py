"""Which tracked run a command continues, found in the store: ``resume=<run id or dir>``,
``resume=auto`` (the newest unfinished run of this config) or a requeued cluster job's."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tntrun.environments import ClusterEnvironment
from tntrun.planning.resume import AUTO, ResumedRun, first_resumable, load_resumed_run
from tntrun.tracking import Tracker, TrackerSettings, tracker_for
from tntrun.tracking.mlflow_store import sqlite_path

log = logging.getLogger(__name__)


def run_to_continue(
    tracker: Tracker,
    resume: str | None,
    config_hash: str,
    cluster: ClusterEnvironment,
    requeued_job: str | None,
) -> tuple[str | None, str]:
    """The run to continue and how it was chosen: ``resume=`` as given; for ``resume=auto``
    the newest unfinished run of this config with a checkpoint, and for a requeued cluster
    job the newest of that job (None: start a new run)."""
    if resume not in (None, AUTO):
        return resume, f"resume={resume}"
    if requeued_job is not None:
        how = f"requeued {cluster.title} job {requeued_job} (restart {cluster.restart_count()})"
        wanted = cluster.tags()
    elif resume == AUTO:
        how, wanted = "resume=auto", {"config_hash": config_hash}
    else:
        return None, ""
    found = first_resumable(tracker.unfinished_runs(wanted))
    if found is None:
        log.info(
            f"tntrun: {how}: no unfinished run of this {'job' if requeued_job else 'config'} "
            f"with a checkpoint in {tracker.store}; starting a new run"
        )
    return found, how


def resumed_run(
    settings: TrackerSettings,
    reference: str,
    how: str,
    overrides: Sequence[str],
    groups: Sequence[str],
    allow_layout_change: bool,
) -> ResumedRun:
    """The run ``reference`` names, with its config and checkpoint.

    A run id is looked up with a tracker of its own: attaching moves a tracker onto that
    run, and the run's own tracker stays unattached until the recorder reopens the run."""
    lookup = tracker_for(settings)

    def recorded_run_dir(run_id: str) -> str | None:
        store_file = sqlite_path(lookup.store)
        if store_file is not None and not store_file.exists():
            raise LookupError(run_id)  # no store yet, so no such run: and none is created
        lookup.attach(run_id)
        return lookup.summary().tags.get("run_dir")

    return load_resumed_run(
        reference, recorded_run_dir, lookup.store, overrides, groups, allow_layout_change, how
    )
