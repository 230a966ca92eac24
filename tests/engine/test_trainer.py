"""A rank's whole training (:class:`RankTraining`) in-process, as the only rank of a plan:
the digits MLP for one epoch, its final metrics, summary and saved model; a NaN loss
rolled back to the state before the first step with a lower LR, or failing the run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.engine.one_rank import horovod_of_one_rank, keras
from tests.helpers.plans import plan_for
from tntrun.contract.metrics import last_values
from tntrun.contract.run_files import FINAL_MODEL, FINAL_WEIGHTS, METRICS, NONFINITE
from tntrun.engine.flops import cache_key, write_cached
from tntrun.engine.lr_schedule import learning_rate_of
from tntrun.engine.nonfinite import NonFiniteLoss
from tntrun.engine.trainer import RankTraining

ONE_RANK = ("ranks_per_node=1", "train.epochs=1", "tracking.log_model=false")
NAN_AT_STEP_5 = (
    "+callbacks.fault._target_=tntrun.engine.faults.InjectFault",
    "+callbacks.fault.ranks=all_ranks",
    "+callbacks.fault.rank=0",
    "+callbacks.fault.at_step=5",
    "+callbacks.fault.kind=nan_loss",
)


@pytest.fixture
def planned(compose_cfg, tmp_path, monkeypatch):
    """The plan of ``overrides`` on one rank, writing into ``tmp_path``; its finish's MFU
    reads a known matmul peak instead of measuring one."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    horovod_of_one_rank()

    def plan(*overrides: str):
        made = plan_for(compose_cfg, *ONE_RANK, *overrides, run_dir=tmp_path)
        write_cached(cache_key(made.threads_per_rank, made.ranks_per_node), 1e12)
        return made

    return plan


def metrics_of(run_dir) -> dict[str, float]:
    return last_values(run_dir / METRICS)


def test_one_epoch_on_one_rank_returns_its_metrics_and_saves_the_model(planned, tmp_path):
    plan = planned()
    training = RankTraining(plan, tmp_path)
    final = training.run()
    assert final["val_accuracy"] > 0.5 and np.isfinite(final["loss"])
    assert int(training.net.optimizer.iterations.numpy()) == plan.steps_per_epoch
    logged = metrics_of(tmp_path)
    assert logged["val_accuracy"] == pytest.approx(final["val_accuracy"])
    assert logged["peak_flops_per_s"] == 1e12 and 0 < logged["mfu"] < 1
    assert logged["weights_rank_spread"] == 0.0
    saved = keras.saving.load_model(tmp_path / FINAL_MODEL, compile=False)
    weights = np.load(tmp_path / FINAL_WEIGHTS)
    for ours, theirs, stored in zip(
        saved.get_weights(), training.net.model.get_weights(), weights.values(), strict=True
    ):
        np.testing.assert_array_equal(ours, theirs)
        np.testing.assert_array_equal(stored, theirs)


def test_a_nan_loss_is_rolled_back_with_a_lower_lr_and_the_run_finishes(planned, tmp_path, capsys):
    plan = planned("faults.on_nonfinite=rollback", *NAN_AT_STEP_5)
    training = RankTraining(plan, tmp_path)
    final = training.run()
    assert np.isfinite(final["loss"]) and training.rollbacks == 1
    (event,) = [json.loads(line) for line in (tmp_path / NONFINITE).read_text().splitlines()]
    factor = plan.settings.faults.rollback_lr_factor
    assert (event["action"], event["step"], event["lr_scale"]) == ("rollback", 5, factor)
    assert event["restored"] == "the state before the first step"
    _, schedule = learning_rate_of(training.net.optimizer)
    assert float(schedule.scale.numpy()) == pytest.approx(factor)
    assert metrics_of(tmp_path)["rollbacks"] == 1
    assert "rollback 1/" in capsys.readouterr().out


def test_a_nan_loss_fails_the_run_by_default_and_is_recorded(planned, tmp_path):
    plan = planned(*NAN_AT_STEP_5)
    with pytest.raises(NonFiniteLoss, match="at epoch 1, step 5"):
        RankTraining(plan, tmp_path).run()
    (event,) = [json.loads(line) for line in (tmp_path / NONFINITE).read_text().splitlines()]
    assert (event["action"], event["rollbacks"]) == ("fail", 0)


def test_under_xla_the_steps_loss_still_reaches_the_logs(planned, tmp_path):
    plan = planned("train.jit_compile=true")
    training = RankTraining(plan, tmp_path)
    final = training.run()
    assert np.isfinite(final["loss"]) and 0 < final["loss"] < 5
    assert training.net.agreement.loss > 0  # the agreement saw the step's loss too
