"""MLflow on the driver: the store, the run, its params and its final status.

Only the driver and rank 0 touch MLflow. The driver creates the run before any
rank starts and always ends it (FINISHED, FAILED or KILLED), so a store never
keeps a run RUNNING after tntrun exits.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

MAX_PARAM_VALUE = 6000  # MLflow truncates longer values.
PARAMS_PER_BATCH = 100  # MLflow's log_batch limit.


def tracking_uri(configured: str | None, output_root: Path) -> str:
    """Config value, else ``$MLFLOW_TRACKING_URI``, else the SQLite store under output_root."""
    if configured:
        return configured
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(output_root / 'mlflow.db').resolve()}"


def flatten(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted ``key.sub`` pairs of a nested mapping (lists stay values)."""
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, f"{name}.")
        else:
            yield name, value


def ui_command(uri: str) -> str:
    """The shell command that serves the MLflow UI over ``uri`` on localhost."""
    return f"mlflow server --backend-store-uri {uri} --host 127.0.0.1 --port 5000 --workers 1"


class RunTracker:
    """Creates one MLflow run and ends it; rank 0 logs into it by id."""

    def __init__(self, uri: str, experiment_name: str, artifact_root: Path) -> None:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        from mlflow.tracking import MlflowClient

        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(experiment_name)
        if experiment is None:
            location = (artifact_root / experiment_name).resolve().as_uri()
            self.experiment_id = self.client.create_experiment(
                experiment_name, artifact_location=location
            )
        else:
            self.experiment_id = experiment.experiment_id
        self.run_id: str | None = None

    def start(self, run_name: str | None, tags: Mapping[str, str]) -> str:
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=dict(tags))
        self.run_id = run.info.run_id
        return self.run_id

    def reopen(self, run_id: str, tags: Mapping[str, str]) -> str:
        """Mark an existing run RUNNING again (a resumed run logs into it)."""
        self.run_id = run_id
        self.client.update_run(run_id, status="RUNNING")
        for key, value in tags.items():
            self.client.set_tag(run_id, key, value)
        return run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:MAX_PARAM_VALUE]) for k, v in params.items()]
        for start in range(0, len(items), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[start : start + PARAMS_PER_BATCH])

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), artifact_path)
        else:
            self.client.log_artifact(self.run_id, str(path), artifact_path)

    def set_tag(self, key: str, value: str) -> None:
        self.client.set_tag(self.run_id, key, value)

    def finish(self, status: str) -> None:
        """End the run with FINISHED, FAILED or KILLED."""
        self.client.set_terminated(self.run_id, status=status)

    def metrics(self) -> dict[str, float]:
        return dict(self.client.get_run(self.run_id).data.metrics)
