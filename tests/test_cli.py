"""Hydra's standard flags on the real console script (no ranks are started)."""

from __future__ import annotations

import yaml


def test_cfg_job_prints_the_composed_config(run_tntrun):
    result = run_tntrun("--cfg", "job")
    assert result.returncode == 0, result.stderr
    cfg = yaml.safe_load(result.stdout)
    assert cfg["global_batch_size"] == 64 and cfg["model"]["_target_"].endswith("build_mlp")


def test_info_lists_the_config_groups(run_tntrun):
    result = run_tntrun("--info", "defaults")
    assert result.returncode == 0, result.stderr
    for group in ("model/mlp", "dataset/digits", "optimizer/adam", "tracking/mlflow"):
        assert group in result.stdout


def test_help_lists_the_groups(run_tntrun):
    result = run_tntrun("--help")
    assert result.returncode == 0
    groups = dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)
    assert {"mlp", "cnn", "resnet50", "transformer"} <= set(groups["model"].split(", "))
    assert groups["optimizer"] == "adam, sgd"
    assert "tntrun: declarative distributed training" in result.stdout


def test_typo_names_the_key(run_tntrun):
    result = run_tntrun("global_batch_sise=32")
    assert result.returncode != 0
    assert "global_batch_sise" in result.stderr
