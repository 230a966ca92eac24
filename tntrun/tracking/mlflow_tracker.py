"""The MLflow tracker (``tracking._target_``'s default): runs in an MLflow store.

MLflow is imported on first use of the store, not when the tracker is made,
so the driver starts the ranks first and opens the store while they import
TensorFlow (:mod:`tntrun.tracking.session`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tntrun.config.schema import DEFAULT_EXPERIMENT
from tntrun.contract.run_status import RunStatus
from tntrun.tracking import MetricPoint, RunSummary, TrackerSettings
from tntrun.tracking.fresh_store import start_empty
from tntrun.tracking.lost_runs import DRIVER_LOST_TAG, announce_lost, lost_runs
from tntrun.tracking.mlflow_models import find_run_model, log_logged_model, register_version
from tntrun.tracking.mlflow_store import (
    bound_http_retries,
    quiet_store_errors,
    sqlite_path,
    store_lock,
    store_problems,
    tracking_uri,
)
from tntrun.tracking.mlflow_ui import is_server, run_url, server_command
from tntrun.tracking.outage import is_remote
from tntrun.tracking.run_record import PREEMPTED_TAG
from tntrun.tracking.runs_table import DatasetRecord
from tntrun.tracking.store_check import open_problems

if TYPE_CHECKING:
    from tntrun.tracking.logged_model import LocalModel

MAX_PARAM_VALUE = 6000  # MLflow truncates longer values.
PARAMS_PER_BATCH = 100  # MLflow's log_batch limits.
METRICS_PER_BATCH = 1000
ARTIFACTS = "mlartifacts"  # under output_root, one folder per experiment
# The experiment tag MLflow 3's UI reads to choose its view; "custom_model_development"
# is its "Machine learning" kind (runs table), "genai_development" its traces view.
EXPERIMENT_KIND = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"

# Attempts to log a dataset that parallel drivers insert at once (see log_dataset).
DATASET_ATTEMPTS = 3


class MlflowTracker:
    """One MLflow run: created in ``tracking.experiment_name`` or attached to by id."""

    label = "MLflow"

    def __init__(self, settings: TrackerSettings) -> None:
        output_root = settings.output_root
        self.store = tracking_uri(settings.tracking.uri, output_root)
        # tracking.experiment_name, else MLflow's own variable, else tntrun's default (also for
        # `tntrun report` and a store lookup, which name only the store).
        self.experiment_name = str(
            settings.tracking.experiment_name
            or os.environ.get("MLFLOW_EXPERIMENT_NAME")
            or DEFAULT_EXPERIMENT
        )
        self.artifact_root = output_root / ARTIFACTS
        self.run_id: str | None = None
        self._experiment_id: str | None = None
        bound_http_retries(self.store)  # a server gone away fails a request in seconds

    @classmethod
    def at(cls, uri: str | None, output_root: Path = Path("outputs")) -> MlflowTracker:
        """A tracker on ``uri`` (else $MLFLOW_TRACKING_URI, else output_root's store)."""
        return cls(TrackerSettings.at(uri, output_root))

    @property
    def uri(self) -> str:
        return self.store

    @cached_property
    def client(self) -> Any:
        """The MLflow client; its first use of a fresh store (the schema) under the store lock."""
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        from mlflow.tracking import MlflowClient  # seconds: only once the ranks are starting

        quiet_store_errors()
        with store_lock(self.store):
            if (database := sqlite_path(self.store)) is not None:
                start_empty(database)
            client = MlflowClient(tracking_uri=self.store)
            client.search_experiments(max_results=1)  # creates or migrates the schema
        return client

    def problems(self) -> list[str]:
        return store_problems(self.store) or open_problems(self.store)

    @property
    def experiment_id(self) -> str:
        """The experiment's id, created if missing (under a lock: parallel drivers).

        Marked as model training (``EXPERIMENT_KIND``), also when it exists without a
        kind, so MLflow 3's UI opens its runs table rather than its GenAI traces view.
        """
        if self._experiment_id is None:
            client = self.client
            with store_lock(self.store):  # one creator of the experiment among parallel drivers
                experiment = client.get_experiment_by_name(self.experiment_name)
                if experiment is None:
                    self._experiment_id = self.create_experiment(client)
                else:
                    self._experiment_id = experiment.experiment_id
                    if not experiment.tags.get(EXPERIMENT_KIND):  # a user's choice stays
                        client.set_experiment_tag(
                            self._experiment_id, EXPERIMENT_KIND, MODEL_TRAINING
                        )
        return self._experiment_id

    def create_experiment(self, client: Any) -> str:
        """The new experiment's id, or that of the one another driver created meanwhile
        (behind a server, drivers on other machines share no lock)."""
        from mlflow.exceptions import MlflowException

        try:
            return client.create_experiment(
                self.experiment_name,
                self.new_experiment_artifacts(),
                tags={EXPERIMENT_KIND: MODEL_TRAINING},
            )
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return client.get_experiment_by_name(self.experiment_name).experiment_id

    def new_experiment_artifacts(self) -> str | None:
        """Where a new experiment keeps its artifacts: the server's default behind an
        ``http(s)://`` store (proxied ``mlflow-artifacts:``, readable by the whole team),
        else a folder under output_root (a local store has no artifact server)."""
        if is_remote(self.store):
            return None
        return (self.artifact_root / self.experiment_name).resolve().as_uri()

    def start(
        self, run_name: str | None, tags: Mapping[str, str], parent_run_id: str | None = None
    ) -> str:
        tags = dict(tags)
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        self.end_lost_runs()  # runs whose driver died before it could end them
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags)
        self.run_id = run.info.run_id
        return self.run_id

    def attach(self, run_id: str) -> None:
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            raise LookupError(f"no run {run_id} in {self.store}") from None
        self.run_id, self._experiment_id = run_id, run.info.experiment_id

    def reopen(self, run_id: str) -> dict[str, str]:
        self.end_lost_runs()
        self.attach(run_id)
        before = dict(self.client.get_run(run_id).data.tags)
        for ended in (DRIVER_LOST_TAG, PREEMPTED_TAG):  # it lives again
            if ended in before:
                self.client.delete_tag(run_id, ended)
        self.client.update_run(run_id, status=RunStatus.RUNNING)
        return before

    def end_lost_runs(self, here: str | None = None) -> list[str]:
        """End every RUNNING run of the store whose driver is gone; their ids."""
        client = self.client
        experiments = [e.experiment_id for e in client.search_experiments()]
        if not experiments:
            return []
        running = client.search_runs(experiments, filter_string="attributes.status = 'RUNNING'")
        ended = []
        for run_id, why in lost_runs(map(summary_of, running), here):
            client.set_tag(run_id, DRIVER_LOST_TAG, why)
            client.set_terminated(run_id, status=RunStatus.KILLED)
            announce_lost(run_id, why)
            ended.append(run_id)
        return ended

    def unfinished_runs(self, tags: Mapping[str, str]) -> list[tuple[str, str | None]]:
        """(run id, run directory) of the experiment's KILLED and FAILED runs with ``tags``,
        newest first; runs whose driver is gone are ended first."""
        self.end_lost_runs()
        where = " and ".join(f"tags.{key} = '{value}'" for key, value in tags.items())
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=where, order_by=["attributes.start_time DESC"]
        )
        return [
            (run.info.run_id, run.data.tags.get("run_dir"))
            for run in runs
            if run.info.status in (RunStatus.KILLED, RunStatus.FAILED)
        ]

    def children(self) -> list[RunSummary]:
        """The runs nested under this one."""
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{self.run_id}'"
        )
        return [summary_of(run) for run in runs]

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:MAX_PARAM_VALUE]) for k, v in params.items()]
        for start in range(0, len(items), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[start : start + PARAMS_PER_BATCH])

    def log_metrics(self, points: Sequence[MetricPoint]) -> None:
        """Log (key, value, timestamp ms, step) points in as few requests as MLflow allows."""
        from mlflow.entities import Metric

        metrics = [Metric(key, value, t, step) for key, value, t, step in points]
        for start in range(0, len(metrics), METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + METRICS_PER_BATCH])

    def log_dataset(self, dataset: DatasetRecord) -> None:
        """The run's dataset as an MLflow dataset input (the runs table's Dataset column).

        Parallel drivers logging the same dataset race to insert it: MLflow looks it up in
        the experiment, then inserts it. On SQLite the store lock serialises them; a
        server's database refuses the loser's insert (seen with 4 drivers on PostgreSQL),
        and its second attempt finds the winner's dataset and links it."""
        from mlflow.exceptions import MlflowException

        for attempt in range(DATASET_ATTEMPTS):
            try:
                with store_lock(self.store):
                    self.client.log_inputs(self.run_id, datasets=[dataset_input(dataset)])
                return
            except MlflowException as err:
                if attempt + 1 == DATASET_ATTEMPTS or not lost_insert_race(err):
                    raise

    def log_model(self, model: LocalModel) -> str:
        """The model folder as a logged model of the run (:mod:`.mlflow_models`)."""
        return log_logged_model(self.client, self.experiment_id, str(self.run_id), model)

    def run_model(self, run_id: str, role: str) -> str | None:
        found = find_run_model(self.client, self.experiment_id, run_id, role)
        return found.model_id if found is not None else None

    def register_model(
        self, model_id: str, name: str, alias: str | None, tags: Mapping[str, str]
    ) -> str:
        """Under the store lock: parallel drivers racing to create the registered model."""
        with store_lock(self.store):
            return register_version(self.client, model_id, name, alias, tags)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), artifact_path)
        else:
            self.client.log_artifact(self.run_id, str(path), artifact_path)

    def set_tag(self, key: str, value: str) -> None:
        self.client.set_tag(self.run_id, key, value)

    def summary(self) -> RunSummary:
        return summary_of(self.client.get_run(self.run_id))

    def finish(self, status: RunStatus) -> None:
        self.client.set_terminated(self.run_id, status=status)

    def ui_command(self) -> list[str]:
        return [] if is_server(self.store) else server_command(self.store)

    def ui_url(self) -> str:
        if is_server(self.store):
            return run_url(self.experiment_id, str(self.run_id), base=self.store)
        return run_url(self.experiment_id, str(self.run_id))


def lost_insert_race(err: Exception) -> bool:
    """Whether MLflow's store refused a row another writer had just inserted."""
    message = str(err)
    return "duplicate key value" in message or "UNIQUE constraint failed" in message


def summary_of(run: Any) -> RunSummary:
    """tntrun's summary of an MLflow ``Run``."""
    info, data = run.info, run.data
    return RunSummary(
        run_id=info.run_id,
        name=info.run_name,
        status=RunStatus(info.status),
        params=dict(data.params),
        metrics=dict(data.metrics),
        tags=dict(data.tags),
    )


def dataset_input(dataset: DatasetRecord) -> Any:
    """MLflow's ``DatasetInput`` for a run's dataset (its context as ``mlflow.data.context``)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    entity = Dataset(
        name=dataset.name,
        digest=dataset.digest,
        source_type=dataset.source_type,
        source=json.dumps(dict(dataset.source)),
        profile=json.dumps(dict(dataset.profile)),
    )
    return DatasetInput(entity, tags=[InputTag(MLFLOW_DATASET_CONTEXT, dataset.context)])
