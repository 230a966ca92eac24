"""A finished run's trained models in the store: which ones, described how, registered where.

Rank 0 leaves MLflow Model folders in the run directory (the final model and, with
``checkpoint.monitor``, the best one: :mod:`tntrun.engine.mlflow_model`), because only
it holds the model and TensorFlow. At the end of a FINISHED run the driver logs each
as a model of the run, with the metrics that describe it, and registers the run's
model (the best one if there is one) under ``tracking.register_model``. A sweep's
jobs register nothing: the sweep registers its best job by ``tracking.objective``,
once, when its jobs have ended (:func:`register_best_job`).

Tracker-agnostic: a tracker that keeps models implements
:class:`~tntrun.tracking.ModelRegistry`; the files are read here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tntrun.config.schema import TrackingConfig
from tntrun.contract import run_files
from tntrun.contract.checkpoints import best_checkpoint
from tntrun.contract.metrics import MetricPoint, lowest_is_best, parse_lines
from tntrun.contract.run_status import RunStatus
from tntrun.planning.plan import Plan
from tntrun.tracking import ModelRegistry, RunSummary, Tracker
from tntrun.tracking.outage import is_outage

log = logging.getLogger(__name__)

FINAL, BEST = "final", "best"  # a logged model's role in its run
ROLE_TAG = "tntrun.model"  # final or best, on the logged model and on a registered version
LOGGED_MODEL_TAG = "tntrun.logged_model_id"  # on a registered version: what it was made from
BEST_TAG = "tntrun.best"  # "true" on the best model, with .epoch, .monitor and .value


@dataclass(frozen=True)
class LocalModel:
    """An MLflow Model folder of the run directory and what describes it in the store."""

    folder: Path
    role: str  # FINAL or BEST
    step: int  # the epoch (0-based, as the metrics' steps) the model is from
    tags: Mapping[str, str] = field(default_factory=dict)
    metrics: Sequence[MetricPoint] = ()  # its metrics, linked to it in the store


def metric_lines(run_dir: Path) -> list[list[MetricPoint]]:
    """Rank 0's metrics file as written: one list of points per ``log`` call."""
    path = run_dir / run_files.METRICS
    if not path.is_file():
        return []
    return [parse_lines([line]) for line in path.read_text().splitlines() if line.strip()]


def final_points(lines: Sequence[Sequence[MetricPoint]]) -> list[MetricPoint]:
    """Each metric's last point: the run's final metrics."""
    last: dict[str, MetricPoint] = {}
    for line in lines:
        for point in line:
            last[point[0]] = point
    return list(last.values())


def local_models(run_dir: Path) -> list[LocalModel]:
    """The run directory's MLflow Model folders, the final model first."""
    lines = metric_lines(run_dir)
    models = []
    final = run_dir / run_files.MLFLOW_MODEL
    if final.is_dir():
        last_epoch = Plan.load(run_dir / run_files.PLAN).epochs - 1
        models.append(LocalModel(final, FINAL, last_epoch, {ROLE_TAG: FINAL}, final_points(lines)))
    best_folder, found = run_dir / run_files.MLFLOW_BEST_MODEL, best_checkpoint(run_dir)
    if best_folder.is_dir() and found is not None:
        _, best = found
        monitor, step = str(best["monitor"]), int(best["epoch"]) - 1  # epochs completed
        tags = {
            ROLE_TAG: BEST,
            BEST_TAG: "true",
            f"{BEST_TAG}.epoch": str(best["epoch"]),
            f"{BEST_TAG}.monitor": monitor,
            f"{BEST_TAG}.value": f"{float(best['value']):.6g}",
        }
        # The epoch's line that holds the monitored metric: that epoch's evaluation.
        epoch_line = next(
            (line for line in lines if any(p[0] == monitor and p[3] == step for p in line)), []
        )
        models.append(LocalModel(best_folder, BEST, step, tags, epoch_line))
    return models


def version_tags(run_id: str, config_hash: str, model_id: str, role: str) -> dict[str, str]:
    """What ties a registered version to the run that trained it."""
    return {
        "tntrun.run_id": run_id,
        "tntrun.config_hash": config_hash,
        LOGGED_MODEL_TAG: model_id,
        ROLE_TAG: role,
    }


def registered_line(name: str, version: str, alias: str | None, model_id: str) -> str:
    uri = f"models:/{name}@{alias}" if alias else f"models:/{name}/{version}"
    return f"tntrun: registered {name} version {version} (logged model {model_id}): load {uri}"


@dataclass(frozen=True)
class ModelPublishing:
    """What the end of a run does with its models (``tracking.log_model``,
    ``register_model``, ``register_alias``)."""

    log: bool
    register_as: str | None  # None also in a sweep's job: the sweep registers
    alias: str | None
    config_hash: str

    @classmethod
    def of(cls, tracking: TrackingConfig, config_hash: str, in_sweep: bool) -> ModelPublishing:
        return cls(
            log=tracking.log_model,
            register_as=None if in_sweep else (tracking.register_model or None),
            alias=tracking.register_alias or None,
            config_hash=config_hash,
        )

    def record(self, tracker: Tracker, run_dir: Path, status: RunStatus) -> None:
        """Log a FINISHED run's models and register the chosen one. An outage of the store
        is raised (the delivery retries); any other failure is a warning, never the run's."""
        if status != RunStatus.FINISHED or not self.log or not tracker.run_id:
            return
        models = local_models(run_dir)
        if not models:
            return
        if not isinstance(tracker, ModelRegistry):
            log.warning(f"tntrun: note: {type(tracker).__name__} keeps no models: none logged")
            return
        try:
            logged = {model.role: tracker.log_model(model) for model in models}
            for role, model_id in logged.items():
                log.info(f"tntrun: logged the {role} model: models:/{model_id}")
            if self.register_as:
                role = BEST if BEST in logged else FINAL
                tags = version_tags(tracker.run_id, self.config_hash, logged[role], role)
                version = tracker.register_model(logged[role], self.register_as, self.alias, tags)
                tracker.set_tag("registered_model", f"{self.register_as}/{version}")
                log.info(registered_line(self.register_as, version, self.alias, logged[role]))
        except Exception as err:
            if is_outage(err, tracker.store):
                raise
            log.warning(f"tntrun: warning: the run's model was not logged or registered: {err}")


def objective_of(run: RunSummary, objective: str) -> float | None:
    value = run.metrics.get(objective)
    return float(value) if value is not None and math.isfinite(value) else None


def lower_is_better(objective: str, direction: str | None) -> bool:
    """Whether the best job has the lowest ``objective``: as the sweeper optimises it
    (Optuna's ``direction``), else as checkpoint.mode=auto would (``lowest_is_best``)."""
    if direction in ("minimize", "maximize"):
        return direction == "minimize"
    return lowest_is_best(objective)


def register_best_job(
    tracker: Tracker, jobs: Sequence[RunSummary], tracking: TrackingConfig, direction: str | None
) -> None:
    """Register the sweep's best FINISHED job by ``tracking.objective`` (see
    :func:`lower_is_better`) under ``tracking.register_model``, from the sweep's parent
    run (``tracker``)."""
    name, objective = tracking.register_model, tracking.objective
    if not name or not tracking.log_model or not isinstance(tracker, ModelRegistry):
        return
    scored = [
        (value, job)
        for job in jobs
        if job.status == RunStatus.FINISHED and (value := objective_of(job, objective)) is not None
    ]
    if not scored:
        print(f"tntrun: note: no job finished with {objective}: nothing registered as {name}")
        return
    lowest = lower_is_better(objective, direction)
    value, best = (min if lowest else max)(scored, key=lambda pair: pair[0])
    role, model_id = BEST, tracker.run_model(best.run_id, BEST)
    if model_id is None:
        role, model_id = FINAL, tracker.run_model(best.run_id, FINAL)
    if model_id is None:
        print(f"tntrun: note: job run {best.run_id} logged no model: nothing registered")
        return
    tags = version_tags(best.run_id, best.tags.get("config_hash", ""), model_id, role)
    alias = tracking.register_alias or None
    try:
        version = tracker.register_model(model_id, name, alias, tags)
    except Exception as err:  # the sweep's record stands; its parent still ends
        print(f"tntrun: warning: job run {best.run_id} not registered as {name}: {err}")
        return
    tracker.set_tag("registered_model", f"{name}/{version}")
    tracker.set_tag("registered_job", f"{best.run_id} ({objective}={value:.6g})")
    print(registered_line(name, version, alias, model_id), flush=True)
