"""The rank entry point's own logic, in-process as the only rank: its usage, how a
training's end becomes the rank's exit code and one console line (a NaN loss, a user's
config error, bad labels, a full disk), and its refusal of MLflow imported early."""

from __future__ import annotations

import errno

import pytest

from tests.engine.one_rank import horovod_of_one_rank
from tests.helpers.plans import plan_for
from tntrun.contract.disk import DISK_MARK
from tntrun.contract.exit_codes import EXIT_CONFIG_ERROR, EXIT_NONFINITE
from tntrun.contract.stop_requests import StopRequests
from tntrun.engine import mlflow_model, worker

NAN_AT_STEP_2 = (
    "+callbacks.fault._target_=tntrun.engine.faults.InjectFault",
    "+callbacks.fault.ranks=all_ranks",
    "+callbacks.fault.rank=0",
    "+callbacks.fault.at_step=2",
    "+callbacks.fault.kind=nan_loss",
)
LABELS = "Received a label value of 12 which is outside the valid range of [0, 10).  Label values"


def test_a_wrong_command_line_prints_the_usage(capsys):
    assert worker.main(["worker"]) == 2
    assert "usage: python -m tntrun.engine.worker <run_dir>" in capsys.readouterr().err


def test_a_nan_loss_is_the_nonfinite_exit_code_and_one_line(compose_cfg, tmp_path, capsys):
    horovod_of_one_rank()
    plan = plan_for(compose_cfg, "ranks_per_node=1", "train.epochs=1", *NAN_AT_STEP_2)
    code = worker.train_or_exit_code(plan, tmp_path, StopRequests([], tmp_path), rank=0)
    assert code == EXIT_NONFINITE
    out = capsys.readouterr().out
    assert "rank 0: stopped: loss became nan at epoch 1, step 2 (faults.on_nonfinite=fail)" in out


def test_a_model_that_is_not_a_keras_model_is_a_config_error(compose_cfg, tmp_path, capsys):
    horovod_of_one_rank()
    plan = plan_for(compose_cfg, "ranks_per_node=1", "model._target_=builtins.dict")
    code = worker.train_or_exit_code(plan, tmp_path, StopRequests([], tmp_path), rank=0)
    assert code == EXIT_CONFIG_ERROR
    assert "tntrun: config error: model._target_=builtins.dict" in capsys.readouterr().out


def test_a_plan_for_more_ranks_is_an_error_with_its_traceback(compose_cfg, tmp_path):
    horovod_of_one_rank()
    plan = plan_for(compose_cfg)  # two ranks on this machine
    with pytest.raises(RuntimeError, match="launched 1 ranks but the plan expects 2"):
        worker.train_or_exit_code(plan, tmp_path, StopRequests([], tmp_path), rank=0)


def test_bad_labels_and_a_full_disk_are_one_line_each(tmp_path, capsys):
    assert worker.exit_code_of_error(ValueError(LABELS), tmp_path, rank=1) == EXIT_CONFIG_ERROR
    assert "config error: rank 1: a training label is 12, outside" in capsys.readouterr().out
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "model.keras"))
    assert worker.exit_code_of_error(full, tmp_path, rank=0) == 1
    assert capsys.readouterr().err.startswith(f"{DISK_MARK}rank 0: ")
    assert worker.exit_code_of_error(KeyError("other"), tmp_path, rank=0) is None


def test_mlflow_imported_before_the_model_is_saved_is_refused(monkeypatch):
    import mlflow  # noqa: F401  (as a user's module might, on a rank)

    monkeypatch.setattr(mlflow_model, "_imported", False)
    with pytest.raises(RuntimeError, match="rank 3 imported mlflow"):
        worker.refuse_mlflow_import(rank=3)
    monkeypatch.setattr(mlflow_model, "_imported", True)  # rank 0 saved its model
    worker.refuse_mlflow_import(rank=0)
