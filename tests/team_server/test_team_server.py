"""Runs through a team's server: ``mlflow server`` over a real PostgreSQL, proxying artifacts.

The driver talks only ``http://``: what it logs lands in the server's store and its
artifact destination, never under the driver's working directory, and concurrent
drivers lose no metric point.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import numpy as np
import pytest
from mlflow.artifacts import download_artifacts
from mlflow.entities import LoggedModelStatus
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import concurrent_drivers, tntrun_cli
from tests.helpers.runs import run_dir_of
from tests.helpers.team_server import TeamServer
from tntrun.contract import run_files
from tntrun.contract.metrics import parse_lines

pytestmark = pytest.mark.slow

TINY = ("train.epochs=1", "tracking.system_metrics=false")


def through(server: TeamServer, experiment: str) -> tuple[str, ...]:
    return (f"tracking.uri={server.url}", f"tracking.experiment_name={experiment}")


def runs_of(client: MlflowClient, experiment: str) -> list:
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment}"
    assert found.artifact_location.startswith("mlflow-artifacts:"), found.artifact_location
    return client.search_runs([found.experiment_id])


def served_artifacts(server: TeamServer, run) -> Path:
    """The folder the server wrote ``run``'s artifacts to."""
    folder = server.artifacts / run.info.experiment_id / run.info.run_id / "artifacts"
    assert run.info.artifact_uri.startswith("mlflow-artifacts:"), run.info.artifact_uri
    assert folder.is_dir(), f"nothing in {server.artifacts} for run {run.info.run_id}"
    return folder


def test_a_runs_artifacts_and_model_land_on_the_server_not_on_the_drivers_disk(
    tmp_path, team_server, monkeypatch
):
    result = tntrun_cli(
        tmp_path,
        *through(team_server, "team-run"),
        *TINY,
        "tracking.register_model=team-digits",
        "tracking.register_alias=candidate",
    )
    assert_succeeded(result)
    run_dir = run_dir_of(result)
    client = MlflowClient(team_server.url)
    (run,) = runs_of(client, "team-run")
    assert run.info.status == "FINISHED"
    assert run.info.run_id == (run_dir / run_files.RUN_ID).read_text().strip()
    # The server is the UI: the run's page on it, no command to start another.
    page = f"{team_server.url}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    assert f"tntrun: the run in it: {page}" in result.stdout
    assert "open the MLflow UI with" not in result.stdout

    served = served_artifacts(team_server, run)
    for name in ("config.yaml", "plan.json", "logs/rank.0.log", "logs/rank.1.log", "model.keras"):
        assert (served / name).is_file(), f"{name} not in {served}"
    (checkpoint,) = (served / "checkpoint").iterdir()
    assert (checkpoint / "meta.json").is_file()
    assert (served / "model.keras").read_bytes() == (run_dir / "model.keras").read_bytes()
    # The driver's working directory holds the run directory only: no local artifact store
    # (rank 0's MLflow model folder, mlflow_model/, is in the run directory).
    assert [p for p in tmp_path.rglob("model.keras") if run_dir not in p.parents] == []
    assert not (tmp_path / "outputs" / "mlartifacts").exists()

    # A teammate reads them through the server alone.
    fetched = download_artifacts(
        run_id=run.info.run_id,
        artifact_path="config.yaml",
        dst_path=str(tmp_path / "teammate"),
        tracking_uri=team_server.url,
    )
    assert Path(fetched).read_text() == (run_dir / "config.yaml").read_text()

    # Its model: logged READY with its files in the server's destination, registered with
    # the alias, and models:/NAME@ALIAS through http:// predicts as the run's model.keras.
    (model,) = client.search_logged_models([run.info.experiment_id])
    assert model.status == LoggedModelStatus.READY and model.source_run_id == run.info.run_id
    assert model.artifact_location.startswith("mlflow-artifacts:"), model.artifact_location
    stored = team_server.artifacts / run.info.experiment_id / "models" / model.model_id
    assert (stored / "artifacts" / "MLmodel").is_file()
    assert (stored / "artifacts" / "data" / "model.keras").is_file()
    version = client.get_model_version_by_alias("team-digits", "candidate")
    assert version.run_id == run.info.run_id
    assert version.tags["tntrun.logged_model_id"] == model.model_id
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import mlflow.pyfunc

    monkeypatch.setenv("MLFLOW_TRACKING_URI", team_server.url)
    batch = np.random.default_rng(0).random((16, 64), dtype=np.float32)
    loaded = mlflow.pyfunc.load_model("models:/team-digits@candidate").predict(batch)
    trained = keras.saving.load_model(run_dir / "model.keras", compile=False)
    np.testing.assert_array_equal(loaded, trained.predict(batch, verbose=0))


def test_a_sweep_through_the_team_server_nests_its_jobs_and_registers_its_best_once(
    tmp_path, team_server
):
    result = tntrun_cli(
        tmp_path,
        "-m",
        "optimizer.base_lr=0.0001,0.002",  # the second job learns, the first barely does
        *through(team_server, "team-sweep"),
        "train.epochs=2",
        "tracking.system_metrics=false",
        "checkpoint.every_epochs=0",
        "tracking.register_model=sweep-digits",
        "tracking.register_alias=candidate",
    )
    assert_succeeded(result)
    client = MlflowClient(team_server.url)
    runs = runs_of(client, "team-sweep")
    (parent,) = [r for r in runs if r.data.tags.get("tntrun.tracking.sweep") == "parent"]
    jobs = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 3 and len(jobs) == 2
    assert all(r.info.status == "FINISHED" for r in runs)
    for job in jobs:
        assert job.outputs.model_outputs  # each job logged its model
        assert (served_artifacts(team_server, job) / "model.keras").is_file()
    assert (served_artifacts(team_server, parent) / "report" / "report.csv").is_file()
    assert not (tmp_path / "outputs" / "mlartifacts").exists()

    # Only the parent registers: the best job by tracking.objective (val_accuracy), once.
    best = max(jobs, key=lambda job: job.data.metrics["val_accuracy"])
    (version,) = client.search_model_versions("name = 'sweep-digits'")
    assert version.run_id == best.info.run_id
    assert version.tags["tntrun.config_hash"] == best.data.tags["config_hash"]
    assert str(client.get_model_version_by_alias("sweep-digits", "candidate").version) == "1"
    assert client.get_run(parent.info.run_id).data.tags["registered_model"] == "sweep-digits/1"
    assert result.stdout.count("tntrun: registered sweep-digits version") == 1


def stream_points(run_dir: Path) -> dict[str, list[tuple[int, int, float]]]:
    """What rank 0 wrote: per key, its (step, time ms, value) points."""
    lines = (run_dir / run_files.METRICS).read_text().splitlines()
    points: dict[str, list[tuple[int, int, float]]] = collections.defaultdict(list)
    for key, value, t, step in parse_lines(lines):
        points[key].append((step, t, value))
    return {key: sorted(found) for key, found in points.items()}


def test_four_concurrent_drivers_lose_no_metric(tmp_path, team_server):
    concurrent_drivers(
        tmp_path,
        *through(team_server, "team-concurrent"),
        "ranks_per_node=1",
        "train.epochs=2",
        "tracking.system_metrics=false",
        "tracking.log_every_steps=1",
        "checkpoint.every_epochs=0",
    )
    client = MlflowClient(team_server.url)
    runs = runs_of(client, "team-concurrent")
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    total = 0
    for run in runs:
        written = stream_points(Path(run.data.tags["run_dir"]))
        assert {"loss", "val_accuracy"} <= written.keys()
        for key, points in written.items():
            history = client.get_metric_history(run.info.run_id, key)
            recorded = sorted((m.step, m.timestamp, m.value) for m in history)
            assert recorded == points, (run.info.run_id, key)
            total += len(points)
    print(f"4 drivers through the team server: {total} metric points, none lost")
