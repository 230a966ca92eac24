"""Rank 0's checkpoints from a real ``fit`` (one process, files in tmp_path): by epochs,
the best by a monitored metric, an unknown monitor refused, and an elastic run's commits
every few steps, mid-epoch, but not at the run's last step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.engine.one_rank import classifier, fit
from tntrun.contract.checkpoints import (
    BEST,
    BEST_META,
    CHECKPOINTS,
    STATE_PREFIX,
    CheckpointMeta,
    list_checkpoints,
    read_meta,
)
from tntrun.engine.checkpointing import Checkpointer
from tntrun.engine.commits import Commits
from tntrun.engine.precision import read_checkpoint


def describe(epoch: int, step: int) -> CheckpointMeta:
    return CheckpointMeta(epoch, step, world_size=1, global_batch_size=4, config_hash="abc")


def test_every_epochs_keeps_the_newest_and_the_last_epoch_always_writes(tmp_path, capsys):
    checkpointer = Checkpointer(
        tmp_path, every_epochs=2, keep=1, describe=describe, min_interval_s=0
    )
    model = classifier()
    fit(model, [checkpointer], epochs=3)
    found = list_checkpoints(tmp_path)
    assert [path.name for path in found] == ["epoch-0003"]  # epoch 2's pruned (keep=1)
    assert read_meta(found[0]) == describe(3, 12)
    assert "checkpoint saved: epoch 2" in capsys.readouterr().out
    restored = classifier()
    restored.optimizer.build(restored.trainable_variables)
    read_checkpoint(restored, restored.optimizer, str(found[0] / STATE_PREFIX))
    for ours, theirs in zip(restored.weights, model.weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_a_checkpoint_waits_for_min_interval_but_not_at_the_last_epoch(tmp_path):
    checkpointer = Checkpointer(tmp_path, 1, keep=5, describe=describe, min_interval_s=3600)
    fit(classifier(), [checkpointer], epochs=2)
    assert [path.name for path in list_checkpoints(tmp_path)] == ["epoch-0002"]


def test_the_best_checkpoint_follows_the_monitor_and_saves_a_clean_model(tmp_path):
    saved = []
    checkpointer = Checkpointer(
        tmp_path,
        0,
        keep=1,
        describe=describe,
        min_interval_s=0,
        monitor="val_loss",
        save_model=saved.append,
    )
    model = classifier()
    checkpointer.set_model(model)
    checkpointer.set_params({"epochs": 4})
    model.optimizer.build(model.trainable_variables)
    for epoch, loss in enumerate([0.5, 0.7, 0.3, float("nan")]):
        checkpointer.on_epoch_end(epoch, {"loss": 1.0, "val_loss": loss})
    best = json.loads((tmp_path / CHECKPOINTS / BEST / BEST_META).read_text())
    assert (best["monitor"], best["value"], best["epoch"]) == ("val_loss", 0.3, 3)
    assert [path.parent.name for path in saved] == [BEST, BEST]  # 0.5, then 0.3
    assert list_checkpoints(tmp_path) == []  # every_epochs=0: only the best


def test_an_unknown_monitor_fails_once_an_epoch_was_evaluated(tmp_path):
    checkpointer = Checkpointer(tmp_path, 0, 1, describe, 0, monitor="val_acc")
    model = classifier()
    checkpointer.set_model(model)
    checkpointer.set_params({"epochs": 2})
    checkpointer.on_epoch_end(0, {"loss": 1.0})  # not evaluated: nothing to compare
    with pytest.raises(ValueError, match="checkpoint.monitor=val_acc: no such metric.*val_loss"):
        checkpointer.on_epoch_end(1, {"loss": 1.0, "val_loss": 0.5})


def test_commits_every_few_steps_mid_epoch_but_not_the_runs_last_step(tmp_path):
    commits = Commits(tmp_path, every=3, keep=10, steps_per_epoch=4, epochs=2, meta=describe)
    fit(classifier(), [commits], epochs=2)
    found = list_checkpoints(tmp_path)
    assert [path.name for path in found] == ["epoch-0000.batch-00003", "epoch-0001.batch-00002"]
    assert [(read_meta(p).step, read_meta(p).batch) for p in found] == [(3, 3), (6, 2)]
