"""Non-finite loss guard and checkpoint policies, with real ranks.

A NaN is injected into one rank's loss at a given step (tntrun.engine.faults,
kind nan_loss): every rank must stop at that same step; the run fails with the
reason, or rolls back to the last good checkpoint and finishes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_exit
from tests.helpers.runs import run_dir_of, store_uri
from tntrun import api
from tntrun.contract.checkpoints import STATE_PREFIX

pytestmark = pytest.mark.slow
# What no test here examines: MLflow's system metrics, the metrics of every 20 steps, and a
# finished run's model logged as an MLflow Model (rank 0 imports MLflow to write it: about
# 2 CPU-s a finished run; the best checkpoint and its artifacts are written without it).
QUIET = (
    "tracking.system_metrics=false",
    "tracking.log_every_steps=0",
    "tracking.log_model=false",
)
# A claim about the run's record, files or message, not about ranks agreeing, is proven on
# one rank (a third less CPU than two); the NaN-loss and rollback tests keep two ranks.
ONE_RANK = ("ranks_per_node=1",)
# A user callback module (wipe.py in the working directory): from epoch ``epoch`` (0-based)
# on, each rank zeroes its trainable weights after every step, so those epochs end with
# all-zero logits that predict class 0 (about 1 in 10 digits): val_accuracy peaks before
# that epoch however the training goes, and the later states differ from the best one.
WIPE = """
import tensorflow as tf
import keras


class Wipe(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch, self.wiping = epoch, False

    def on_epoch_begin(self, epoch, logs=None):
        self.wiping = epoch >= self.epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.wiping:
            for variable in self.model.trainable_variables:
                variable.assign(tf.zeros_like(variable))
"""


def nan_at(step: int, rank: int = 1) -> tuple[str, ...]:
    return (
        "+callbacks.fault._target_=tntrun.engine.faults.InjectFault",
        "+callbacks.fault.ranks=all_ranks",
        f"+callbacks.fault.rank={rank}",
        f"+callbacks.fault.at_step={step}",
        "+callbacks.fault.kind=nan_loss",
    )


def tracked(tmp_path, run_dir):
    client = MlflowClient(store_uri(tmp_path))
    return client.get_run((run_dir / "run_id").read_text())


def test_a_nan_loss_fails_the_run_at_that_step_on_every_rank(run_tntrun, tmp_path):
    # 22 steps per epoch: step 30 is in epoch 2, after epoch 1's checkpoint.
    result = run_tntrun(
        "train.epochs=4", "checkpoint.min_interval_s=0", "checkpoint.keep=1", *QUIET, *nan_at(30)
    )
    assert_exit(result, 1)
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
    rollback = ("faults.on_nonfinite=rollback", "faults.rollback_lr_factor=0.5")
    result = api.run(
        ["train.epochs=4", *rollback, "checkpoint.min_interval_s=0", *QUIET, *nan_at(30)]
    )
    assert result.status == "FINISHED", result
    run = tracked(in_tmp, result.run_dir)
    assert run.data.tags["rollbacks"] == "1"
    assert run.data.tags["rollback.1"].startswith("loss became nan at epoch 2, step 30: restored ")
    assert run.data.tags["rollback.1"].endswith("epoch-0001, LR x0.5")
    assert run.data.metrics["rollbacks"] == 1 and result.metrics["val_accuracy"] > 0.8
    assert run.data.metrics["lr"] == pytest.approx(0.001)  # the planned 0.002 x 0.5


def test_a_diverging_run_fails_instead_of_finishing_with_nan(run_tntrun, tmp_path):
    """The run's record names the non-finite loss (one rank: every rank stopping at the same
    step is test_a_nan_loss_fails_the_run_at_that_step_on_every_rank's claim)."""
    result = run_tntrun(
        *ONE_RANK,
        "optimizer=sgd",
        "optimizer.base_lr=1e8",
        "train.epochs=3",
        "checkpoint.min_interval_s=0",
        *QUIET,
    )
    assert_exit(result, 1)
    run = tracked(tmp_path, run_dir_of(result))
    assert run.info.status == "FAILED"
    reason = run.data.tags["failure.nonfinite"]
    assert reason.startswith("loss became ") and " at epoch 1, step " in reason
    print(f"diverging run: {reason}")


def test_keep_the_best_and_write_checkpoints_by_time(in_tmp):
    """Rank 0 writes every checkpoint: the files and the record are proven on one rank."""
    result = api.run(
        ["train.epochs=4", "checkpoint.monitor=val_accuracy", "checkpoint.keep=1", *QUIET]
        + list(ONE_RANK)
    )
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


def checkpoint_state(checkpoint: Path) -> dict[str, np.ndarray]:
    """Every saved variable (model and optimizer) of a checkpoint folder, by its key."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(checkpoint / STATE_PREFIX))
    keys = set(reader.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
    return {key: reader.get_tensor(key) for key in keys}


def test_the_best_checkpoint_is_the_state_of_the_best_epoch_not_the_newest(in_tmp):
    """val_accuracy peaks before the last epoch (the weights are zeroed in epochs 3 and 4):
    checkpoints/best must hold the state the best epoch's own checkpoint holds, in its
    TensorFlow checkpoint and in its model.keras, and not the newest state. Rank 0 writes
    them all: one rank proves it."""
    wiped = 2  # 0-based: epochs 1 and 2 train, 3 and 4 end with zero weights
    (in_tmp / "wipe.py").write_text(WIPE)
    wipe = ["+callbacks.wipe._target_=wipe.Wipe", "+callbacks.wipe.ranks=all_ranks"]
    every_epoch = ["checkpoint.min_interval_s=0", "checkpoint.keep=10"]
    result = api.run(
        [
            "train.epochs=4",
            "checkpoint.monitor=val_accuracy",
            *every_epoch,
            *QUIET,
            *wipe,
            f"+callbacks.wipe.epoch={wiped}",
            *ONE_RANK,
        ]
    )
    assert result.status == "FINISHED", result
    history = MlflowClient(store_uri(in_tmp)).get_metric_history(result.run_id, "val_accuracy")
    accuracy = [m.value for m in sorted(history, key=lambda m: m.step)]
    assert len(accuracy) == 4 and min(accuracy[:wiped]) > 2 * max(accuracy[wiped:]), accuracy
    best_epoch = 1 + accuracy.index(max(accuracy))  # the first of equals: only better replaces
    checkpoints = result.run_dir / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("epoch-*")) == [
        f"epoch-{epoch:04d}" for epoch in range(1, 5)
    ]
    best = json.loads((checkpoints / "best" / "best.json").read_text())
    assert (best["monitor"], best["epoch"]) == ("val_accuracy", best_epoch), (best, accuracy)
    assert best["value"] == pytest.approx(accuracy[best_epoch - 1])

    kept = checkpoint_state(checkpoints / "best")
    written = checkpoint_state(checkpoints / f"epoch-{best_epoch:04d}")
    assert kept.keys() == written.keys()
    # A variable is saved once, under its first path: Keras 3's trainable weights under
    # the optimizer's references to them, the others under the model.
    weights = [key for key in kept if key.startswith("model/") or "/_trainable_variables/" in key]
    for key in sorted(kept, key=lambda k: (k not in weights, k)):  # weights first
        np.testing.assert_array_equal(kept[key], written[key], err_msg=key)
    newest = checkpoint_state(checkpoints / "epoch-0004")
    assert weights and any(not np.array_equal(kept[k], newest[k]) for k in weights)

    import keras
    import tensorflow as tf

    saved = keras.models.load_model(checkpoints / "best" / "model.keras", compile=False)
    restored = keras.models.clone_model(saved)  # fresh weights, then the best epoch's
    prefix = str(checkpoints / f"epoch-{best_epoch:04d}" / STATE_PREFIX)
    tf.train.Checkpoint(model=restored).read(prefix).assert_existing_objects_matched()
    for ours, theirs in zip(saved.get_weights(), restored.get_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_an_unknown_monitor_metric_fails_with_the_metrics_logged(run_tntrun):
    """The driver's message names the metrics; rank 0 alone checks the monitor: one rank."""
    result = run_tntrun("train.epochs=2", "checkpoint.monitor=val_acc", *QUIET, *ONE_RANK)
    assert_exit(result, 1)
    assert "checkpoint.monitor=val_acc: no such metric; this run logs " in result.stdout


# A user's dataset (blobs.py in the working directory) whose training features hold NaN
# from sample ``nan_from`` on; its model's ReLU turns a NaN input into 0, so the loss stays
# finite while the gradients poison the weights: only a look at the data catches it.
NAN_BLOBS = """
import numpy as np
from tntrun.datasets.base import DatasetInfo


class Blobs:
    def __init__(self, nan_from=0):
        rng = np.random.default_rng(0)
        self.y = rng.integers(0, 2, 512).astype("int64")
        self.x = (rng.normal(size=(512, 4)) + 3.0 * self.y[:, None]).astype("float32")
        self.x[nan_from:384, 0] = np.nan

    def info(self):
        return DatasetInfo(num_train=384, num_val=128, input_shape=(4,), num_classes=2)

    def load(self):
        import tensorflow as tf

        return (
            tf.data.Dataset.from_tensor_slices((self.x[:384], self.y[:384])),
            tf.data.Dataset.from_tensor_slices((self.x[384:], self.y[384:])),
        )
"""
RELU_MODEL = """
import keras


def build(input_shape, num_classes):
    return keras.Sequential(
        [keras.Input(shape=input_shape), keras.layers.Dense(8, activation="relu"),
         keras.layers.Dense(num_classes)]
    )
"""


def test_nan_training_data_fail_at_the_first_step_in_one_line(run_tntrun, tmp_path):
    """The driver's one line and the run's record: proven on one rank."""
    (tmp_path / "blobs.py").write_text(NAN_BLOBS)
    (tmp_path / "relu_model.py").write_text(RELU_MODEL)
    result = run_tntrun(
        "model=custom",
        "model._target_=relu_model.build",
        "dataset=custom",
        "dataset._target_=blobs.Blobs",
        "train.epochs=1",
        "faults.on_nonfinite=rollback",  # bad data are not rolled back: the same would come
        *QUIET,
        *ONE_RANK,
    )
    assert_exit(result, 1)
    reason = "the training data hold NaN or infinite values at epoch 1, step 0"
    assert f"\ntntrun: run FAILED: {reason}" in result.stdout, result.stdout[-3000:]
    assert "Traceback" not in result.stdout, result.stdout[-3000:]
    run = tracked(tmp_path, run_dir_of(result))
    assert run.info.status == "FAILED"
    assert run.data.tags["failure.nonfinite"].startswith(reason)
    assert run.data.tags["rollbacks"] == "0"
