"""A rollback after a non-finite loss, on one rank in-process: back to the run's newest
checkpoint (its epoch and batch to go on from), else to the snapshot taken before the
first step; and rank 0's record of each event for the driver."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.engine.one_rank import classifier, fit, horovod_of_one_rank
from tests.helpers.plans import plan_for
from tntrun.contract.checkpoints import CheckpointMeta, publish
from tntrun.contract.run_files import NONFINITE
from tntrun.engine.nonfinite import NonFiniteData, NonFiniteLoss, Snapshot, record, roll_back
from tntrun.engine.precision import state_checkpoint


@pytest.fixture
def plan(compose_cfg):
    return plan_for(compose_cfg, "faults.on_nonfinite=rollback")


def values(model) -> list[np.ndarray]:
    return [np.array(v.numpy()) for v in [*model.variables, *model.optimizer.variables]]


def assert_same(ours: list[np.ndarray], theirs: list[np.ndarray]) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


def trained_classifier():
    horovod_of_one_rank()
    model = classifier("adam")
    fit(model, [], batch_size=8)  # the optimizer built, its state not zero
    return model


def test_without_a_checkpoint_every_variable_returns_to_the_snapshot(plan, tmp_path):
    model = trained_classifier()
    snapshot, before = Snapshot(model, model.optimizer), values(model)
    fit(model, [], batch_size=8)
    epoch, batch, restored = roll_back(model, model.optimizer, plan, tmp_path, snapshot)
    assert (epoch, batch, restored) == (0, 0, "the state before the first step")
    assert_same(values(model), before)


def test_the_newest_checkpoint_is_restored_with_its_epoch_and_batch(plan, tmp_path):
    model = trained_classifier()
    snapshot = Snapshot(model, model.optimizer)
    fit(model, [], batch_size=8)
    saved, state = values(model), state_checkpoint(model, model.optimizer)
    meta = CheckpointMeta(2, 6, 1, 8, "abc", batch=3)
    path = publish(tmp_path, meta, lambda prefix: state.write(prefix), keep=2)
    fit(model, [], batch_size=8)
    assert roll_back(model, model.optimizer, plan, tmp_path, snapshot) == (2, 3, str(path))
    assert_same(values(model), saved)


def test_each_event_is_one_line_of_the_record(tmp_path):
    record(tmp_path, NonFiniteLoss(float("nan"), 2, 17), "rollback", rollback=1, lr_scale=0.5)
    record(tmp_path, NonFiniteData(float("inf"), 3, 40), "fail", rollbacks=1)
    lines = [json.loads(line) for line in (tmp_path / NONFINITE).read_text().splitlines()]
    assert [(e["loss"], e["epoch"], e["step"], e["action"]) for e in lines] == [
        ("nan", 2, 17, "rollback"),
        ("inf", 3, 40, "fail"),
    ]
    assert (lines[0]["rollback"], lines[0]["lr_scale"], lines[1]["rollbacks"]) == (1, 0.5, 1)
    assert "training data hold NaN" in lines[1]["reason"]
