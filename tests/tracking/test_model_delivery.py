"""The end of a run delivers its models once: a retried delivery (the store went away
midway) neither doubles a logged model nor a registered version, and replaces one left
half-logged. A real SQLite store; the model folder is a minimal MLflow Model of files,
since the driver only uploads what rank 0 wrote (the real one: test_logged_models)."""

from __future__ import annotations

import json
import logging

import pytest
import yaml
from mlflow.entities import LoggedModelStatus
from mlflow.tracking import MlflowClient

from tests.helpers.plans import plan_for
from tntrun.tracking.logged_model import ModelPublishing, local_models
from tntrun.tracking.mlflow_tracker import MlflowTracker

EPOCHS = 3


@pytest.fixture
def finished_run(tmp_path, compose_cfg):
    """(tracker on a started run, its run directory) with a final MLflow Model folder and
    rank 0's metrics of 3 epochs."""
    run_dir = tmp_path / "run"
    (run_dir / "mlflow_model").mkdir(parents=True)
    (run_dir / "mlflow_model" / "MLmodel").write_text(yaml.safe_dump({"flavors": {}}))
    (run_dir / "mlflow_model" / "weights.bin").write_bytes(b"\0" * 64)
    plan_for(compose_cfg, f"train.epochs={EPOCHS}").save(run_dir / "plan.json")
    lines = [
        {
            "t": 1000 + epoch,
            "step": epoch,
            "metrics": {"loss": 1.0 / (epoch + 1), "val_accuracy": 0.5 + epoch / 10},
        }
        for epoch in range(EPOCHS)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    tracker = MlflowTracker.at(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)
    tracker.start("run", {})
    return tracker, run_dir


def test_a_retried_delivery_logs_and_registers_the_model_once(finished_run, caplog):
    caplog.set_level(logging.INFO, logger="tntrun")
    tracker, run_dir = finished_run
    publishing = ModelPublishing(True, "digits-mlp", "candidate", config_hash="c0ffee")
    publishing.record(tracker, run_dir, "FINISHED")
    publishing.record(tracker, run_dir, "FINISHED")  # a second attempt after an outage

    client = tracker.client
    (model,) = client.search_logged_models([tracker.experiment_id])
    assert model.status == LoggedModelStatus.READY and model.source_run_id == tracker.run_id
    linked = {(m.key, m.step): m.value for m in model.metrics}
    assert linked == {("loss", EPOCHS - 1): 1.0 / EPOCHS, ("val_accuracy", EPOCHS - 1): 0.7}
    (version,) = client.search_model_versions("name = 'digits-mlp'")
    assert client.get_model_version_by_alias("digits-mlp", "candidate").version == version.version
    assert version.tags["tntrun.config_hash"] == "c0ffee"
    assert version.tags["tntrun.run_id"] == tracker.run_id
    # The logged model names its version once (the Models tab's "Registered models").
    versions = json.loads(model.tags["mlflow.modelVersions"])
    assert versions == [{"name": "digits-mlp", "version": version.version}]
    # The folder's MLmodel names the logged model it became (MLflow reads it on loading).
    spec = yaml.safe_load((run_dir / "mlflow_model" / "MLmodel").read_text())
    assert spec["model_id"] == model.model_id and spec["run_id"] == tracker.run_id
    assert caplog.text.count(f"logged the final model: models:/{model.model_id}") == 2


def test_a_half_logged_model_is_replaced(finished_run):
    tracker, run_dir = finished_run
    client: MlflowClient = tracker.client
    half = client.create_logged_model(
        tracker.experiment_id, source_run_id=tracker.run_id, tags={"tntrun.model": "final"}
    )
    ModelPublishing(True, None, None, config_hash="c0ffee").record(tracker, run_dir, "FINISHED")
    (model,) = client.search_logged_models([tracker.experiment_id])
    assert model.model_id != half.model_id and model.status == LoggedModelStatus.READY


@pytest.mark.parametrize("status", ["FAILED", "KILLED"])
def test_only_a_finished_run_logs_its_model(finished_run, status):
    tracker, run_dir = finished_run
    publishing = ModelPublishing(True, "digits-mlp", None, config_hash="c0ffee")
    publishing.record(tracker, run_dir, status)
    assert not tracker.client.search_logged_models([tracker.experiment_id])
    assert [model.role for model in local_models(run_dir)] == ["final"]  # still on disk
