"""A run's model through a team's server (PostgreSQL, proxied artifacts): the logged model's
files land in the server's artifact destination, its registered version takes its alias,
and ``models:/NAME@ALIAS`` loaded through ``http://`` predicts as the run's model did."""

from __future__ import annotations

import os

import numpy as np
import pytest
from mlflow.entities import LoggedModelStatus
from mlflow.tracking import MlflowClient

from tests.helpers.commands import tntrun_cli
from tests.helpers.runs import run_dir_of
from tests.helpers.team_server import TeamServer

pytestmark = pytest.mark.slow


def test_a_runs_model_is_logged_and_registered_on_the_server(
    tmp_path, team_server: TeamServer, monkeypatch
):
    result = tntrun_cli(
        tmp_path,
        f"tracking.uri={team_server.url}",
        "tracking.experiment_name=team-models",
        "train.epochs=1",
        "tracking.system_metrics=false",
        "tracking.register_model=team-digits",
        "tracking.register_alias=candidate",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = run_dir_of(result)
    run_id = (run_dir / "run_id").read_text()
    client = MlflowClient(team_server.url)
    experiment = client.get_experiment_by_name("team-models").experiment_id
    (model,) = client.search_logged_models([experiment])
    assert model.status == LoggedModelStatus.READY and model.source_run_id == run_id
    assert model.artifact_location.startswith("mlflow-artifacts:"), model.artifact_location
    served = team_server.artifacts / experiment / "models" / model.model_id / "artifacts"
    assert (served / "MLmodel").is_file() and (served / "data" / "model.keras").is_file()

    version = client.get_model_version_by_alias("team-digits", "candidate")
    assert version.run_id == run_id and version.tags["tntrun.logged_model_id"] == model.model_id
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import mlflow.pyfunc

    monkeypatch.setenv("MLFLOW_TRACKING_URI", team_server.url)
    batch = np.random.default_rng(0).random((16, 64), dtype=np.float32)
    loaded = mlflow.pyfunc.load_model("models:/team-digits@candidate").predict(batch)
    trained = keras.saving.load_model(run_dir / "model.keras", compile=False)
    np.testing.assert_array_equal(loaded, trained.predict(batch, verbose=0))
