"""What a user labels a run with reaches MLflow: ``tracking.tags``, ``tracking.description``
(MLflow's note), and ``MLFLOW_EXPERIMENT_NAME`` / ``MLFLOW_RUN_NAME`` when the config names
none."""

from __future__ import annotations

import subprocess

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import clean_env, tntrun_command
from tests.helpers.runs import run_dir_of, store_uri

pytestmark = pytest.mark.slow


def test_tags_description_and_the_experiment_from_the_environment(tmp_path):
    """One rank: the labels are the driver's, in the store."""
    command = tntrun_command(
        tmp_path,
        "train.epochs=1",
        "tracking.system_metrics=false",
        "ranks_per_node=1",
        "+tracking.tags.team=vision",
        "+tracking.tags.ticket=ML-42",
        "tracking.description=baseline before the augmentation change",
    )
    env = {**clean_env(), "MLFLOW_EXPERIMENT_NAME": "myexp", "MLFLOW_RUN_NAME": "baseline"}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert_succeeded(result)
    client = MlflowClient(store_uri(tmp_path))
    run = client.get_run((run_dir_of(result) / "run_id").read_text())
    assert client.get_experiment(run.info.experiment_id).name == "myexp"
    assert run.info.run_name == "baseline"
    tags = run.data.tags
    assert tags["team"] == "vision" and tags["ticket"] == "ML-42"
    assert tags["mlflow.note.content"] == "baseline before the augmentation change"
