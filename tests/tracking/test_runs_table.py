"""What the runs table shows: run names, the dataset input, source tags, experiment kind and
a host's system-metric samples (builders pure; the tracker on a SQLite store)."""

from __future__ import annotations

import json
import os

from omegaconf import OmegaConf

from tntrun.config.schema import TrackingConfig
from tntrun.datasets.base import DatasetInfo
from tntrun.engine.node_sampler import NodeSampler
from tntrun.tracking import TrackerSettings
from tntrun.tracking.mlflow_tracker import (
    EXPERIMENT_KIND,
    MODEL_TRAINING,
    MlflowTracker,
    dataset_input,
)
from tntrun.tracking.mlflow_ui import run_url
from tntrun.tracking.node_metrics import NodeMetricsRelay
from tntrun.tracking.provenance import source_tags
from tntrun.tracking.runs_table import dataset_record, dataset_source, default_run_name

DIGITS = DatasetInfo(num_train=1438, num_val=359, input_shape=(64,), num_classes=10)


def test_the_default_run_name_is_model_dataset_and_layout():
    choices = {"model": "resnet50", "dataset": "imagenet"}
    assert default_run_name(choices, "x.build_resnet", "x.Imagenet", 8, 64) == (
        "resnet50-imagenet-8x64"
    )
    assert default_run_name({"model": "mlp", "dataset": "digits"}, None, None, 2, 32, job=3) == (
        "mlp-digits-2x32-job3"
    )
    custom = {"model": "custom", "dataset": "custom"}
    assert default_run_name(custom, "mymodels.build", "mydata.Blobs", 1, 16) == "build-Blobs-1x16"
    assert default_run_name({}, "pkg.mod:make", "mydata.Blobs", 4, 8) == "make-Blobs-4x8"


def test_the_dataset_record_names_sizes_and_digests_the_resolved_config(compose_cfg):
    cfg = OmegaConf.to_container(compose_cfg("dataset=digits").dataset, resolve=True)
    record = dataset_record({"dataset": "digits"}, cfg, DIGITS)
    assert record.name == "digits" and record.context == "train"
    assert (record.source_type, dict(record.source)) == (
        "code",
        {"tags": {"target": "tntrun.datasets.digits.DigitsDataset"}},
    )
    assert record.profile == {
        "num_train": 1438,
        "num_val": 359,
        "input_shape": [64],
        "num_classes": 10,
        "task": "classification",
    }
    assert len(record.digest) == 8
    assert dataset_record({"dataset": "digits"}, dict(cfg), DIGITS).digest == record.digest
    # engine keys do not change the data; its values and sizes do
    assert dataset_record({}, {**cfg, "distribute": False}, DIGITS).digest == record.digest
    assert dataset_record({}, {**cfg, "validation_fraction": 0.3}, DIGITS).digest != record.digest
    fewer = DatasetInfo(1000, 359, (64,), 10)
    assert dataset_record({}, cfg, fewer).digest != record.digest


def test_the_dataset_source_is_its_path_or_uri(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert dataset_source({"path": "data/set.npz"}) == (
        "local",
        {"uri": str(tmp_path / "data" / "set.npz")},
    )
    home = os.path.expanduser("~")
    assert dataset_source({"data_dir": "~/tensorflow_datasets", "val_dir": None}) == (
        "local",
        {"uri": f"{home}/tensorflow_datasets"},
    )
    assert dataset_source({"data_dir": "s3://bucket/imagenet"}) == (
        "s3",
        {"uri": "s3://bucket/imagenet"},
    )
    assert dataset_source({"url": "https://example.org/d.npz"}) == (
        "http",
        {"url": "https://example.org/d.npz"},
    )
    assert dataset_source({"_target_": "mydata.Blobs", "samples": 512}) == (
        "code",
        {"tags": {"target": "mydata.Blobs"}},
    )


def test_the_dataset_becomes_an_mlflow_dataset_input():
    record = dataset_record({"dataset": "npz"}, {"_target_": "x.Npz", "path": "/d/a.npz"}, DIGITS)
    entity = dataset_input(record)
    assert entity.dataset.name == "npz" and entity.dataset.digest == record.digest
    assert entity.dataset.source_type == "local"
    assert json.loads(entity.dataset.source) == {"uri": "/d/a.npz"}
    assert json.loads(entity.dataset.profile)["num_train"] == 1438
    assert [(t.key, t.value) for t in entity.tags] == [("mlflow.data.context", "train")]
    assert entity.to_proto().dataset.name == "npz"  # what the client sends


def test_source_tags_name_the_script_and_keep_the_command_line():
    tags = source_tags(["/venv/bin/tntrun", "model=cnn", "train.epochs=2"])
    assert tags["mlflow.source.name"] == "/venv/bin/tntrun"  # the Source column: "tntrun"
    assert tags["mlflow.source.type"] == "LOCAL" and tags["mlflow.user"]
    assert tags["command"] == "tntrun model=cnn train.epochs=2"
    assert source_tags(["-c"])["mlflow.source.name"] == "<console>"


def test_a_run_in_an_experiment_of_model_training_with_its_dataset_and_samples(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(
        TrackerSettings(TrackingConfig(uri=store, experiment_name="kind"), tmp_path)
    )
    tracker.start("mlp-digits-2x32", source_tags(["tntrun"]))
    client = tracker.client
    assert client.get_experiment(tracker.experiment_id).tags[EXPERIMENT_KIND] == MODEL_TRAINING
    tracker.log_dataset(dataset_record({"dataset": "digits"}, {"_target_": "x.D"}, DIGITS))
    sampler = NodeSampler(tmp_path, "localhost", 60.0)
    for _ in ("start", "end"):  # as a rank samples its host
        sampler.sample()
    sampler.stop()
    NodeMetricsRelay(tmp_path, tracker.log_metrics, lambda: tracker.run_id, False).drain()
    tracker.finish("FINISHED")

    run = client.get_run(tracker.run_id)
    assert run.info.run_name == "mlp-digits-2x32"
    (used,) = run.inputs.dataset_inputs
    assert (used.dataset.name, used.dataset.source_type) == ("digits", "code")
    cpu = client.get_metric_history(tracker.run_id, "system/cpu_utilization_percentage")
    assert [m.step for m in cpu] == [0, 1]
    assert "system/system_memory_usage_megabytes" in run.data.metrics
    assert tracker.ui_url() == run_url(tracker.experiment_id, tracker.run_id)
    assert tracker.ui_url().endswith("?workflowType=machine_learning")

    # an experiment made without a kind gets it; one with a kind keeps it
    bare = client.create_experiment("bare")
    chosen = client.create_experiment("chosen", tags={EXPERIMENT_KIND: "genai_development"})
    for name, made in (("bare", bare), ("chosen", chosen)):
        found = MlflowTracker(
            TrackerSettings(TrackingConfig(uri=store, experiment_name=name), tmp_path)
        ).experiment_id
        assert found == made
    assert client.get_experiment(bare).tags[EXPERIMENT_KIND] == MODEL_TRAINING
    assert client.get_experiment(chosen).tags[EXPERIMENT_KIND] == "genai_development"
