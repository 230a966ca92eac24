"""MLflow on the driver: the store, the run, its params, metrics and final status.

Only the driver touches MLflow: the ranks start at once, the driver creates the
run while they import TensorFlow and relays rank 0's metrics into it
(:mod:`tntrun.metrics_stream`). It always ends the run (FINISHED, FAILED or
KILLED), so a store never keeps a run RUNNING after tntrun exits.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

MAX_PARAM_VALUE = 6000  # MLflow truncates longer values.
PARAMS_PER_BATCH = 100  # MLflow's log_batch limits.
METRICS_PER_BATCH = 1000


def tracking_uri(configured: str | None, output_root: Path) -> str:
    """Config value, else ``$MLFLOW_TRACKING_URI``, else the SQLite store under output_root."""
    if configured:
        return configured
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(output_root / 'mlflow.db').resolve()}"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI (None for other stores)."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def store_problems(uri: str, timeout_s: float = 3.0) -> list[str]:
    """Why the tracking store at ``uri`` cannot be used, checked without importing MLflow
    (so before any rank starts): a SQLite file that cannot be created or written, or an
    HTTP server that does not accept connections. Other stores are not checked."""
    where = "tracking.uri (else $MLFLOW_TRACKING_URI, else output_root)"
    database = sqlite_path(uri)
    if database is not None:
        try:
            database.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            return [f"{where} = {uri}: cannot create {database.parent} ({err.strerror}); "
                    "point it at a writable folder"]  # fmt: skip
        target = database if database.exists() else database.parent
        if not os.access(target, os.W_OK):
            return [f"{where} = {uri}: {target} is not writable; point it at a writable folder"]
        return []
    parsed = urlparse(uri)
    if parsed.scheme in ("http", "https") and parsed.hostname:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            socket.create_connection((parsed.hostname, port), timeout=timeout_s).close()
        except OSError as err:
            return [f"{where} = {uri}: no MLflow server answers at {parsed.hostname}:{port} "
                    f"({err.strerror or err}); start the server or fix the URI"]  # fmt: skip
    return []


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Serialise first use of a SQLite store across processes.

    MLflow creates the schema on first access; concurrent drivers racing on a
    fresh file fail half-way through the migrations. A file lock beside the
    database lets one create it while the others wait.
    """
    database = sqlite_path(uri)
    if database is None:
        yield
        return
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{database}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted ``key.sub`` pairs of a nested mapping (lists stay values)."""
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, f"{name}.")
        else:
            yield name, value


class RunTracker:
    """One MLflow run, created or attached to by id; rank 0 logs into it by id."""

    def __init__(self, uri: str, experiment_id: str, run_id: str | None = None) -> None:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        from mlflow.tracking import MlflowClient

        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self.experiment_id = experiment_id
        self.run_id = run_id

    @classmethod
    def for_experiment(cls, uri: str, name: str, artifact_root: Path) -> RunTracker:
        """A tracker for a new run in experiment ``name``, created if missing (under a lock)."""
        with store_lock(uri):
            tracker = cls(uri, "")
            experiment = tracker.client.get_experiment_by_name(name)
            if experiment is None:
                location = (artifact_root / name).resolve().as_uri()
                tracker.experiment_id = tracker.client.create_experiment(name, location)
            else:
                tracker.experiment_id = experiment.experiment_id
        return tracker

    @classmethod
    def for_run(cls, uri: str, run_id: str) -> RunTracker:
        """A tracker attached to an existing run (raises MlflowException if unknown)."""
        tracker = cls(uri, "", run_id)
        tracker.experiment_id = tracker.client.get_run(run_id).info.experiment_id
        return tracker

    def start(
        self, run_name: str | None, tags: Mapping[str, str], parent_run_id: str | None = None
    ) -> str:
        tags = dict(tags)
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags)
        self.run_id = run.info.run_id
        return self.run_id

    def children(self) -> list:
        """The runs nested under this one."""
        return self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{self.run_id}'"
        )

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

    def log_metrics(self, points: Sequence[tuple[str, float, int, int]]) -> None:
        """Log (key, value, timestamp ms, step) points in as few requests as MLflow allows."""
        from mlflow.entities import Metric

        metrics = [Metric(key, value, t, step) for key, value, t, step in points]
        for start in range(0, len(metrics), METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + METRICS_PER_BATCH])

    @contextmanager
    def system_metrics(self, enabled: bool, interval_s: float, node_id: str | None):
        """MLflow's system metrics (psutil) of this node while the job runs."""
        if not enabled:
            yield
            return
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        monitor = SystemMetricsMonitor(self.run_id, sampling_interval=interval_s,
                                       node_id=node_id, tracking_uri=self.uri)  # fmt: skip
        monitor.start()
        try:
            yield
        finally:
            monitor.finish()

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
