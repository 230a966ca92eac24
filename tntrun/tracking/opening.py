"""What a tracked run is opened with: its name, its tags (new or resumed) and its params.

Pure of any store but the tracker it logs params to; the :class:`~tntrun.tracking.recorder.
Recorder` decides when to open the run.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tntrun.config.schema import TrackingConfig
from tntrun.contract.checkpoints import CheckpointMeta
from tntrun.datasets.base import DatasetInfo
from tntrun.planning.plan import Plan
from tntrun.planning.resume import ResumedRun
from tntrun.tracking import DatasetLogging, Tracker, flatten
from tntrun.tracking.lost_runs import DRIVER_LOST_TAG
from tntrun.tracking.run_record import PREEMPTED_TAG, start_layout_tags, start_tags
from tntrun.tracking.runs_table import dataset_record, default_run_name

log = logging.getLogger(__name__)

RUN_NAME_TAG = "mlflow.runName"  # the run's name, as the store keeps it
LAYOUT_CHANGES_TAG = "layout_changes"  # how often a resumption changed the run's layout


@dataclass(frozen=True)
class RunOrigin:
    """Where a run comes from, as its record says: the command line and, in a sweep, the job."""

    overrides: tuple[str, ...] = ()
    choices: Mapping[str, str] = field(default_factory=dict)  # group -> option
    parent_run_id: str | None = None  # the sweep's parent run
    job: int | None = None  # the job's number in a sweep
    # This driver and its job (host, pid, start; the scheduler's job id), tagged anew on a
    # resumed run: a later command tells by them whether the driver is gone.
    launch_tags: Mapping[str, str] = field(default_factory=dict)


def run_name(plan: Plan, origin: RunOrigin) -> str:
    """``tracking.run_name``, else ``$MLFLOW_RUN_NAME`` (a sweep's job adds ``-job<N>``),
    else ``<model>-<dataset>-<ranks>x<micro-batch>`` (``mlp-digits-2x32``), for the runs
    table."""
    settings = plan.settings
    if settings.tracking.run_name:
        return settings.tracking.run_name
    if named := os.environ.get("MLFLOW_RUN_NAME"):
        return named if origin.job is None else f"{named}-job{origin.job}"
    return default_run_name(
        origin.choices,
        settings.model.get("_target_"),
        settings.dataset.get("_target_"),
        plan.world_size,
        plan.micro_batch_size,
        origin.job,
    )


def new_run_tags(plan: Plan, run_dir: Path, origin: RunOrigin) -> dict[str, str]:
    """The tags of a new run (:func:`~tntrun.tracking.run_record.start_tags`) and the user's."""
    overrides, choices = list(origin.overrides), dict(origin.choices)
    return {
        **start_tags(plan, run_dir, overrides, choices, plan.config_hash, origin.launch_tags),
        **user_tags(plan.settings.tracking),
    }


def user_tags(tracking: TrackingConfig) -> dict[str, str]:
    """``tracking.tags``, and ``tracking.description`` as MLflow's note (the run page's
    description)."""
    tags = {str(key): str(value) for key, value in tracking.tags.items()}
    if tracking.description:
        tags["mlflow.note.content"] = tracking.description
    return tags


def resume_tags(
    resumed: ResumedRun,
    plan: Plan,
    run_dir: Path,
    origin: RunOrigin,
    recorded: Mapping[str, str],
    number: int,
) -> dict[str, str]:
    """Tags for a resumed run: restart ``number`` (how, from where, and how the run had
    ended), and a layout change when there is one."""
    ended = recorded.get(PREEMPTED_TAG) or recorded.get(DRIVER_LOST_TAG)
    restart = f"{resumed.how}: from {Path(resumed.point.checkpoint).name}"
    tags = {
        "resumed_in": str(run_dir),
        "run_dir": str(run_dir),
        **origin.launch_tags,
        "restarts": str(number),
        f"restart.{number}": f"{restart}; {ended}" if ended else restart,
    }
    tags.update(
        {key: value for key, value in start_layout_tags(plan).items() if recorded.get(key) != value}
    )
    change = layout_change(resumed, plan)
    if change:
        tags.update(renamed_for_layout(plan, recorded, resumed.point.meta))
        tags[LAYOUT_CHANGES_TAG] = str(int(recorded.get(LAYOUT_CHANGES_TAG, "0")) + 1)
        tags["resume.layout_change"] = change
        tags[f"restart.{number}"] += f"; layout {change}"
        log.info(f"tntrun: resuming with a new layout: {change}")
    return tags


def layout_change(resumed: ResumedRun, plan: Plan) -> str | None:
    """How the layout changed since the checkpoint (None: it did not), and where the run
    goes on."""
    before = resumed.point.meta
    if (before.world_size, before.global_batch_size) == (plan.world_size, plan.global_batch_size):
        return None
    where = f"step {plan.initial_step}"
    if plan.initial_batch:
        where += f" (epoch {plan.initial_epoch + 1}, batch {plan.initial_batch})"
    return (
        f"{before.world_size} ranks, global batch {before.global_batch_size} -> "
        f"{plan.world_size} ranks, global batch {plan.global_batch_size}; "
        f"LR {plan.scaled_lr:g}, restarting at {where}"
    )


def renamed_for_layout(
    plan: Plan, recorded: Mapping[str, str], before: CheckpointMeta
) -> dict[str, str]:
    """The run's default name (``mlp-digits-2x32``) with the new ``<ranks>x<micro batch>``;
    nothing for a name of the user's."""
    old = f"-{before.world_size}x{before.global_batch_size // before.world_size}"
    name = recorded.get(RUN_NAME_TAG, "")
    found = re.search(rf"{re.escape(old)}(-job\d+)?$", name)
    if not found:
        return {}
    new = f"-{plan.world_size}x{plan.micro_batch_size}"
    return {RUN_NAME_TAG: name[: found.start()] + new + (found.group(1) or "")}


def log_run_params(
    tracker: Tracker,
    recorded_config: Mapping[str, Any],
    plan: Plan,
    origin: RunOrigin,
    dataset: DatasetInfo | None,
) -> None:
    """The flattened config and the plan's summary as params; the dataset as an input."""
    tracker.log_params(run_params(recorded_config, plan))
    if dataset is not None and isinstance(tracker, DatasetLogging):
        tracker.log_dataset(dataset_record(origin.choices, plan.settings.dataset, dataset))


def run_params(recorded_config: Mapping[str, Any], plan: Plan) -> dict[str, Any]:
    """A run's params: the config as recorded (config.yaml, plain values) flattened, and the
    plan's summary (``tntrun sync`` logs them too, on a run it creates)."""
    params = dict(flatten(recorded_config))
    params.update(plan.summary_params())
    return params
