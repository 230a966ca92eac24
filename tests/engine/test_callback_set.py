"""A rank's callbacks built from a real plan, in-process: their order (the guards first,
the users' between the two sides of the stop agreement, the heartbeat last), rank 0's
writers on rank 0 alone, user callbacks by scope, and the epoch's progress line."""

from __future__ import annotations

from dataclasses import replace

import pytest

import tests.engine.one_rank  # noqa: F401  (Keras 3 on TensorFlow)
from tests.helpers.plans import plan_for
from tntrun.contract.checkpoints import CheckpointMeta
from tntrun.engine.callback_set import (
    _progress_line,
    build_callbacks,
    checkpoint_meta,
    elastic_commits,
    user_callbacks,
)
from tntrun.engine.checkpointing import Checkpointer
from tntrun.engine.heartbeat import Heartbeat
from tntrun.engine.metric_callbacks import EpochMetricsLogger, StepMetrics, Throughput
from tntrun.engine.nonfinite import NonFiniteGuard
from tntrun.engine.pipelines import build_data
from tntrun.engine.progress import EpochProgress
from tntrun.engine.step_agreement import StepAgreement

CSV = {"_target_": "keras.callbacks.CSVLogger", "filename": "log.csv"}
EARLY = {"_target_": "keras.callbacks.EarlyStopping", "patience": 2}


@pytest.fixture
def plan(compose_cfg):
    overrides = ("ranks_per_node=1", "tracking.log_every_steps=5", "checkpoint.every_epochs=1")
    return plan_for(
        compose_cfg, *overrides, "+callbacks.early._target_=keras.callbacks.EarlyStopping"
    )


@pytest.fixture
def data(compose_cfg):
    return build_data(plan_for(compose_cfg, "ranks_per_node=1"), 0, 1)


def kinds(callbacks) -> list[str]:
    return [type(callback).__name__ for callback in callbacks]


def test_rank_0_has_the_guards_first_its_writers_and_the_heartbeat_last(plan, data, tmp_path):
    agreement = StepAgreement()
    hooks = build_callbacks(plan, tmp_path, data, agreement, save_model=lambda path: None)
    callbacks = hooks.callbacks
    assert isinstance(callbacks[0], Throughput) and callbacks[1] is agreement
    assert isinstance(callbacks[2], NonFiniteGuard) and callbacks[3] is hooks.preemption
    assert isinstance(callbacks[-1], Heartbeat) and hooks.metrics_log is not None
    names = kinds(callbacks)
    early = names.index("EarlyStopping")
    assert names[early - 1] == names[early + 1] == "_Around"  # the stop agreement's sides
    assert names.index("StepMetrics") < early < names.index("EpochMetricsLogger")
    assert {Checkpointer, EpochProgress} <= {type(c) for c in callbacks}
    assert hooks.commits is None  # not an elastic run
    hooks.metrics_log.close()


def test_another_rank_has_no_writers_but_the_same_guards(plan, data, tmp_path):
    hooks = build_callbacks(plan, tmp_path, replace(data, rank=1), StepAgreement(), print)
    types = {type(callback) for callback in hooks.callbacks}
    assert hooks.metrics_log is None and StepMetrics in types and NonFiniteGuard in types
    assert not types & {EpochMetricsLogger, Checkpointer, EpochProgress}
    assert "EarlyStopping" in kinds(hooks.callbacks)


def test_user_callbacks_by_their_scope():
    specs = {"csv": CSV, "early": EARLY, "both": {**CSV, "ranks": "all_ranks"}}
    assert kinds(user_callbacks(specs, is_master=True)) == [
        "CSVLogger",
        "EarlyStopping",
        "CSVLogger",
    ]
    assert kinds(user_callbacks(specs, is_master=False)) == ["EarlyStopping", "CSVLogger"]
    only_master = {"early": {**EARLY, "ranks": "master_only"}}
    assert user_callbacks(only_master, is_master=False) == []
    with pytest.raises(ValueError, match="callbacks.csv.ranks='some'"):
        user_callbacks({"csv": {**CSV, "ranks": "some"}}, is_master=True)


def test_checkpoint_meta_and_elastic_commits_follow_the_plan(plan, tmp_path):
    meta = checkpoint_meta(plan)(3, 40)
    assert meta == CheckpointMeta(3, 40, 1, plan.global_batch_size, plan.config_hash)
    assert elastic_commits(plan, tmp_path) is None


def test_the_progress_line_shows_losses_accuracies_lr_and_speed():
    metrics = {"loss": 0.51234, "val_accuracy": 0.9, "lr": 0.001, "samples_per_s": 12345.6}
    line = _progress_line({**metrics, "epoch_time_s": 3.0}, 1, 5)
    assert line == "epoch 2/5: loss=0.5123 val_accuracy=0.9 lr=0.001 (12,346 samples/s)"
