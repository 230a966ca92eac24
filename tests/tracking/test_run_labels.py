"""What a user says about a run's record reaches MLflow: the labels (``tracking.tags``,
``tracking.description``, MLflow's note, and ``MLFLOW_EXPERIMENT_NAME`` /
``MLFLOW_RUN_NAME`` when the config names none), and ``tracking.log_model=false``: no model
logged or registered (the models a run logs: tests/tracking/test_logged_models.py).

One run says both, one launch instead of two; one rank: the record is the driver's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import clean_env, tntrun_command
from tests.helpers.runs import run_dir_of, store_uri

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def labelled_run_without_model(tmp_path_factory) -> tuple[MlflowClient, str, Path]:
    """A run labelled by its config and its environment, with tracking.log_model=false and
    a registered model named (which it must then leave alone): its store's client, its run
    id and its run directory."""
    workdir = tmp_path_factory.mktemp("labels")
    command = tntrun_command(
        workdir,
        "train.epochs=1",
        "tracking.system_metrics=false",
        "ranks_per_node=1",
        "+tracking.tags.team=vision",
        "+tracking.tags.ticket=ML-42",
        "tracking.description=baseline before the augmentation change",
        "tracking.log_model=false",
        "tracking.register_model=unused",
    )
    env = {**clean_env(), "MLFLOW_EXPERIMENT_NAME": "myexp", "MLFLOW_RUN_NAME": "baseline"}
    result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
    assert_succeeded(result)
    run_dir = run_dir_of(result)
    return MlflowClient(store_uri(workdir)), (run_dir / "run_id").read_text(), run_dir


def test_tags_description_and_the_experiment_from_the_environment(labelled_run_without_model):
    client, run_id, _ = labelled_run_without_model
    run = client.get_run(run_id)
    assert client.get_experiment(run.info.experiment_id).name == "myexp"
    assert run.info.run_name == "baseline"
    tags = run.data.tags
    assert tags["team"] == "vision" and tags["ticket"] == "ML-42"
    assert tags["mlflow.note.content"] == "baseline before the augmentation change"


def test_log_model_false_logs_no_model(labelled_run_without_model):
    client, run_id, run_dir = labelled_run_without_model
    run = client.get_run(run_id)
    logged = client.search_logged_models(
        [run.info.experiment_id], filter_string=f"source_run_id = '{run_id}'"
    )
    assert logged == []
    assert not run.outputs.model_outputs
    assert not (run_dir / "mlflow_model").exists() and (run_dir / "model.keras").is_file()
    assert client.search_registered_models() == []
