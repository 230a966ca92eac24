"""Hydra's standard flags on the real console script (no ranks are started)."""

from __future__ import annotations

import socket

import pytest
import yaml

from tests.helpers.asserts import assert_exit, assert_succeeded
from tntrun.config.schema import OPTIMIZER_SCHEMAS

pytestmark = pytest.mark.slow


def test_cfg_job_prints_the_composed_config(run_tntrun):
    result = run_tntrun("--cfg", "job")
    assert_succeeded(result)
    cfg = yaml.safe_load(result.stdout)
    assert cfg["global_batch_size"] == 64 and cfg["model"]["_target_"].endswith("build_mlp")


def test_info_lists_the_config_groups(run_tntrun):
    result = run_tntrun("--info", "defaults")
    assert_succeeded(result)
    for group in ("model/mlp", "dataset/digits", "optimizer/adam", "tracking/mlflow"):
        assert group in result.stdout


def test_help_lists_the_groups(run_tntrun):
    result = run_tntrun("--help")
    assert_succeeded(result)
    groups = dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)
    assert {"mlp", "cnn", "resnet50", "transformer"} <= set(groups["model"].split(", "))
    assert set(groups["optimizer"].split(", ")) == {*OPTIMIZER_SCHEMAS, "custom"}
    assert "tntrun: declarative distributed training" in result.stdout


def test_typo_names_the_key(run_tntrun):
    result = run_tntrun("global_batch_sise=32")
    assert result.returncode != 0
    assert "global_batch_sise" in result.stderr


def test_an_unusable_tracking_store_is_refused_before_any_rank_starts(run_tntrun, tmp_path):
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("a file where the store's folder should be")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # a port nobody listens on while it stays bound
    port = closed.getsockname()[1]
    with closed:
        for uri, why in (
            (f"sqlite:///{blocked}/mlflow.db", "cannot create"),
            (f"http://127.0.0.1:{port}", "no MLflow server answers"),
        ):
            result = run_tntrun("train.epochs=1", f"tracking.uri={uri}")
            assert_exit(result, 2)
            assert f"tracking.uri (else $MLFLOW_TRACKING_URI, else output_root) = {uri}" in (
                result.stderr
            )
            assert why in result.stderr
            assert "rank 0/" not in result.stdout  # no rank was started
