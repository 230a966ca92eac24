"""Devices as asked: a run that asks for GPUs never falls back to the CPU silently."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.helpers.asserts import assert_exit, assert_succeeded
from tntrun.planning.machine import (
    MachineFacts,
    count_gpus,
    device_problems,
    tensorboard_problems,
)


@pytest.mark.slow
def test_asking_for_gpus_on_a_node_without_them_is_refused_before_launch(run_tntrun, tmp_path):
    found, how = count_gpus()
    assert found == 0, f"this test expects a machine without GPUs ({how})"
    result = run_tntrun("gpus=1", "train.epochs=1")
    assert_exit(result, 2)
    errors = [line for line in result.stderr.splitlines() if line.startswith("tntrun: ")]
    assert len(errors) == 1 and errors[0].startswith("tntrun: config error: gpus=1: this node (")
    assert f"shows 0 GPU(s) ({how}): run on a node with 1 GPUs or set gpus=0" in errors[0]
    assert "rank 0/" not in result.stdout and not (tmp_path / "outputs" / "mlflow.db").exists()


@pytest.mark.slow
def test_a_dry_run_may_plan_for_gpus_elsewhere(run_tntrun):
    result = run_tntrun("gpus=4", "dry_run=true")
    assert_succeeded(result)
    assert "4 GPU(s) per node" in result.stdout and "CUDA_VISIBLE_DEVICES" not in result.stdout


def test_only_ranks_on_this_node_are_checked_here():
    facts = MachineFacts(cores_per_node=2, hostname="login1", gpus=0, gpu_probe="none")
    assert device_problems((("a", 4), ("b", 4)), 4, facts) == []  # remote: their ranks check
    assert device_problems((("login1", 4),), 4, facts)
    assert device_problems((("localhost", 2),), 0, facts) == []


@pytest.mark.slow
def test_a_rank_planned_with_a_gpu_that_sees_none_stops_with_one_line():
    code = "from tntrun.engine import runtime; runtime.init(1, 0, False, gpus=1)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode != 0
    assert "MissingDevice: gpus=1: TensorFlow on rank 0 (" in result.stderr
    assert "sees no GPU" in result.stderr and "or set gpus=0" in result.stderr


def test_tensorboard_asked_without_tensorboard_installed_is_one_line(monkeypatch):
    assert tensorboard_problems(False) == []
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "tensorboard" else real(name)
    )
    (problem,) = tensorboard_problems(True)
    assert problem.startswith("train.tensorboard=true:") and "pip install tensorboard" in problem
    assert tensorboard_problems(False) == []
