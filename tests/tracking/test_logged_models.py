"""A finished run's model in MLflow: logged (final, and best with checkpoint.monitor), with
signature, metrics and dataset; registered with an alias (a sweep registers its best job
once: tests/team_server/test_team_server.py, through a team's server). A run with
``tracking.log_model=false`` logs none: tests/tracking/test_run_labels.py, on its run.

The comparisons are exact (``assert_array_equal``): the MLflow model and ``model.keras``
hold the same weights and MLflow's pyfunc calls Keras' ``predict``, so any difference
would mean a different model, not rounding.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from mlflow.entities import LoggedModelStatus
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import tntrun_cli
from tests.helpers.runs import run_dir_of, store_uri
from tests.helpers.stack import installed, tensorflow_requirement

pytestmark = pytest.mark.slow


def validation_batch(run_dir: Path) -> np.ndarray:
    """32 samples of the run's validation split, as the ranks read it."""
    from tntrun.config.zoo import build_dataset

    config = OmegaConf.load(run_dir / "config.yaml")
    _, val = build_dataset(config.dataset).load()
    features, _ = next(iter(val.batch(32)))
    return features.numpy()


def keras_predict(path: Path, batch: np.ndarray) -> np.ndarray:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    return keras.saving.load_model(path, compile=False).predict(batch, verbose=0)


def pyfunc_predict(uri: str, batch: np.ndarray) -> np.ndarray:
    """``mlflow.pyfunc.load_model(uri).predict(batch)`` (a ``models:/`` URI resolves through
    $MLFLOW_TRACKING_URI: the test sets it to its store)."""
    import mlflow.pyfunc

    return np.asarray(mlflow.pyfunc.load_model(uri).predict(batch))


def run_models(client: MlflowClient, run_id: str) -> dict[str, object]:
    """The run's logged models by their role (tntrun.model tag)."""
    run = client.get_run(run_id)
    models = client.search_logged_models(
        [run.info.experiment_id], filter_string=f"source_run_id = '{run_id}'"
    )
    return {model.tags["tntrun.model"]: model for model in models}


@pytest.fixture(scope="module")
def best_and_final(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One run that logs its final model and registers its best (checkpoint.monitor): both
    tests below read it, one launch instead of two. One rank: the claims are the driver's
    record in the store and the files, not the ranks'."""
    workdir = tmp_path_factory.mktemp("best_and_final")
    result = tntrun_cli(
        workdir,
        "train.epochs=3",
        "tracking.system_metrics=false",
        "ranks_per_node=1",
        "checkpoint.monitor=val_accuracy",
        "tracking.register_model=digits-mlp",
        "tracking.register_alias=candidate",
    )
    assert_succeeded(result)
    return result, workdir


def test_a_finished_run_logs_its_model_which_predicts_as_the_rank_did(best_and_final, monkeypatch):
    result, workdir = best_and_final
    run_dir, store = run_dir_of(result), store_uri(workdir)
    client = MlflowClient(store)
    run_id = (run_dir / "run_id").read_text()
    run = client.get_run(run_id)
    models = run_models(client, run_id)
    model = models["final"]  # its best one too: test_the_best_model_is_logged_and_registered
    assert model.status == LoggedModelStatus.READY
    assert model.source_run_id == run_id and model.tags["tntrun.model"] == "final"
    outputs = sorted(output.model_id for output in run.outputs.model_outputs)
    assert outputs == sorted(logged.model_id for logged in models.values())
    assert f"tntrun: logged the final model: models:/{model.model_id}" in result.stdout

    # The run's final metrics, the evaluation ones on the run's dataset.
    (dataset,) = [entry.dataset for entry in run.inputs.dataset_inputs]
    linked = {metric.key: metric for metric in model.metrics}
    assert linked["val_accuracy"].value == run.data.metrics["val_accuracy"]
    assert linked["val_accuracy"].dataset_name == dataset.name == "digits"
    assert linked["val_accuracy"].dataset_digest == dataset.digest
    assert linked["loss"].value == run.data.metrics["loss"] and linked["loss"].dataset_name is None

    batch = validation_batch(run_dir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    loaded = pyfunc_predict(f"models:/{model.model_id}", batch)
    np.testing.assert_array_equal(loaded, keras_predict(run_dir / "model.keras", batch))
    import mlflow.models

    info = mlflow.models.get_model_info(str(run_dir / "mlflow_model"))
    (inputs,), (outputs,) = info.signature.inputs.inputs, info.signature.outputs.inputs
    assert (inputs.type, inputs.shape) == (np.dtype("float32"), (-1, 64))  # digits' 8x8
    assert (outputs.type, outputs.shape) == (np.dtype("float32"), (-1, 10))
    assert info.model_id == model.model_id and info.run_id == run_id
    example = json.loads((run_dir / "mlflow_model" / "input_example.json").read_text())
    assert np.asarray(example).shape == (5, 64)  # five validation samples
    requirements = (run_dir / "mlflow_model" / "requirements.txt").read_text().split()
    assert f"keras=={installed('keras')}" in requirements
    assert tensorflow_requirement() in requirements


def test_the_best_model_is_logged_and_registered_with_its_alias(best_and_final, monkeypatch):
    result, workdir = best_and_final
    run_dir, store = run_dir_of(result), store_uri(workdir)
    client = MlflowClient(store)
    run_id = (run_dir / "run_id").read_text()
    models = run_models(client, run_id)
    assert sorted(models) == ["best", "final"]
    best, found = models["best"], json.loads((run_dir / "checkpoints/best/best.json").read_text())
    assert best.tags["tntrun.best"] == "true"
    assert best.tags["tntrun.best.epoch"] == str(found["epoch"])
    assert best.tags["tntrun.best.monitor"] == "val_accuracy"
    assert float(best.tags["tntrun.best.value"]) == pytest.approx(found["value"], rel=1e-5)
    (accuracy,) = [m for m in best.metrics if m.key == "val_accuracy"]
    assert accuracy.value == found["value"] and accuracy.step == found["epoch"] - 1

    # The run's model is its best one: registered, aliased, tied to the run and its config.
    version = client.get_model_version_by_alias("digits-mlp", "candidate")
    assert str(version.version) == "1" and version.run_id == run_id
    tags = client.get_run(run_id).data.tags
    assert version.tags["tntrun.run_id"] == run_id
    assert version.tags["tntrun.config_hash"] == tags["config_hash"]
    assert version.tags["tntrun.logged_model_id"] == best.model_id
    assert version.tags["tntrun.model"] == "best" and tags["registered_model"] == "digits-mlp/1"
    batch = validation_batch(run_dir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    np.testing.assert_array_equal(
        pyfunc_predict("models:/digits-mlp@candidate", batch),
        keras_predict(run_dir / "checkpoints/best/model.keras", batch),
    )
