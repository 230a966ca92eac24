"""Non-finite loss guard and checkpoint policies, with real ranks.

A NaN is injected into one rank's loss at a given step (tntrun.engine.faults,
kind nan_loss): every rank must stop at that same step; the run fails with the
reason, or rolls back to the last good checkpoint and finishes.
"""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import run_dir_of, store_uri
from tntrun import api

pytestmark = pytest.mark.slow
QUIET = ("tracking.system_metrics=false", "tracking.log_every_steps=0")


def nan_at(step: int, rank: int = 1) -> tuple[str, ...]:
    return (
        "+callbacks.fault._target_=tntrun.engine.faults.InjectFault",
        "+callbacks.fault.ranks=all_ranks", f"+callbacks.fault.rank={rank}",
        f"+callbacks.fault.at_step={step}", "+callbacks.fault.kind=nan_loss",
    )  # fmt: skip


def tracked(tmp_path, run_dir):
    client = MlflowClient(store_uri(tmp_path))
    return client.get_run((run_dir / "mlflow_run_id").read_text())


def test_a_nan_loss_fails_the_run_at_that_step_on_every_rank(run_tntrun, tmp_path):
    # 22 steps per epoch: step 30 is in epoch 2, after epoch 1's checkpoint.
    result = run_tntrun("train.epochs=4", "checkpoint.min_interval_s=0", "checkpoint.keep=1",
                        *QUIET, *nan_at(30))  # fmt: skip
    assert result.returncode == 1, result.stdout[-3000:]
    run_dir = run_dir_of(result)
    run = tracked(tmp_path, run_dir)
    assert run.info.status == "FAILED"
    assert run.data.tags["failure.nonfinite"] == "loss became nan at epoch 2, step 30"
    for rank in (0, 1):  # both ranks stopped at the same step
        log = (run_dir / "logs" / f"rank.{rank}.log").read_text()
        assert f"rank {rank}: stopped: loss became nan at epoch 2, step 30" in log
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["epoch-0001"]  # nothing written from the bad state; the good one kept


def test_rollback_restores_the_last_good_checkpoint_and_finishes(in_tmp):
    rollback = ("train.on_nonfinite=rollback", "train.rollback_lr_factor=0.5")
    result = api.run(["train.epochs=4", *rollback, "checkpoint.min_interval_s=0", *QUIET,
                      *nan_at(30)])  # fmt: skip
    assert result.status == "FINISHED", result
    run = tracked(in_tmp, result.run_dir)
    assert run.data.tags["rollbacks"] == "1"
    assert run.data.tags["rollback.1"].startswith("loss became nan at epoch 2, step 30: restored ")
    assert run.data.tags["rollback.1"].endswith("epoch-0001, LR x0.5")
    assert run.data.metrics["rollbacks"] == 1 and result.metrics["val_accuracy"] > 0.8
    assert run.data.metrics["lr"] == pytest.approx(0.001)  # the planned 0.002 x 0.5


def test_a_diverging_run_fails_instead_of_finishing_with_nan(run_tntrun, tmp_path):
    result = run_tntrun("optimizer=sgd", "optimizer.base_lr=1e8", "train.epochs=3",
                        "checkpoint.min_interval_s=0", *QUIET)  # fmt: skip
    assert result.returncode == 1
    run = tracked(tmp_path, run_dir_of(result))
    assert run.info.status == "FAILED"
    reason = run.data.tags["failure.nonfinite"]
    assert reason.startswith("loss became ") and " at epoch 1, step " in reason
    print(f"diverging run: {reason}")


def test_keep_the_best_and_write_checkpoints_by_time(in_tmp):
    result = api.run(["train.epochs=4", "checkpoint.monitor=val_accuracy", "checkpoint.keep=1",
                      *QUIET])  # fmt: skip
    assert result.status == "FINISHED"
    checkpoints = result.run_dir / "checkpoints"
    # 4 short epochs within checkpoint.min_interval_s (60 s): only the last epoch writes one.
    assert sorted(p.name for p in checkpoints.glob("epoch-*")) == ["epoch-0004"]
    best = json.loads((checkpoints / "best" / "best.json").read_text())
    history = MlflowClient(store_uri(in_tmp)).get_metric_history(result.run_id, "val_accuracy")
    top = max(history, key=lambda m: (m.value, -m.step))
    assert (best["monitor"], best["epoch"]) == ("val_accuracy", top.step + 1)
    assert best["value"] == pytest.approx(top.value)
    assert (checkpoints / "best" / "model.keras").is_file()
    run = tracked(in_tmp, result.run_dir)
    assert run.data.tags["best.epoch"] == str(best["epoch"])
    artifacts = {
        a.path for a in MlflowClient(store_uri(in_tmp)).list_artifacts(result.run_id, "best")
    }
    assert "best/best.json" in artifacts and "best/model.keras" in artifacts


def test_an_unknown_monitor_metric_fails_with_the_metrics_logged(run_tntrun):
    result = run_tntrun("train.epochs=2", "checkpoint.monitor=val_acc", *QUIET)
    assert result.returncode == 1
    assert "checkpoint.monitor=val_acc: no such metric; this run logs " in result.stdout
