"""Data-parallel Keras training of one planned run, as one rank: :class:`RankTraining`.

Shaped as the TF Model Garden's ``base_trainer`` and Keras' own ``Trainer``: one object
holds what every stage reads (the plan, the run directory, the data, the model and its
optimizer, the callbacks), built once (:mod:`~tntrun.engine.pipelines`,
:mod:`~tntrun.engine.model_set`, :mod:`~tntrun.engine.callback_set`); its stages are small
methods: fit the plan's epochs, from a mid-epoch checkpoint and again from the last good
state after a non-finite loss; finish: the final metrics, the saved model
(:mod:`~tntrun.engine.final_model`), the scaling prediction.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import horovod.tensorflow as hvd

from tntrun.config.schema import OnNonFinite
from tntrun.contract.stop_requests import StopRequests
from tntrun.engine import nonfinite, precision
from tntrun.engine.averaging_optimizer import UnscaledLoss
from tntrun.engine.callback_set import build_callbacks, checkpoint_meta
from tntrun.engine.final_model import predict_scaling, save_clean_model, save_final
from tntrun.engine.loss_check import LossSetupError, check_loss_setup
from tntrun.engine.lr_schedule import learning_rate_of
from tntrun.engine.mfu import model_flop_utilisation
from tntrun.engine.model_average import average_non_trainable
from tntrun.engine.model_set import UserModelError, build_model_and_optimizer
from tntrun.engine.nonfinite import NonFiniteLoss, Snapshot
from tntrun.engine.pipelines import build_data, stream_from
from tntrun.engine.preemption import Preempted, checkpoint_and_record
from tntrun.engine.stop_agreement import stopped_early
from tntrun.planning.plan import Plan

# The user's code or config cannot train: one line, as a config error.
USER_ERRORS = (UserModelError, LossSetupError, UnscaledLoss)

__all__ = ["USER_ERRORS", "RankTraining", "train"]


def train(plan: Plan, run_dir: Path, requests: StopRequests | None = None) -> dict[str, float]:
    """Train as one rank of ``plan``; return the final metrics (over all ranks, the same on each).

    Raises :class:`Preempted` on every rank, after the checkpoint of the step they agreed
    on, once any rank was asked to stop (``requests``).
    """
    return RankTraining(plan, run_dir, requests).run()


class RankTraining:
    """One rank's training of ``plan``: its data, model and callbacks, built on creation
    (on every rank alike: the ranks' collectives pair up in this order)."""

    def __init__(self, plan: Plan, run_dir: Path, requests: StopRequests | None = None) -> None:
        self.plan, self.run_dir = plan, run_dir
        self.rank, self.size = hvd.rank(), hvd.size()
        if self.size != plan.world_size:
            raise RuntimeError(f"launched {self.size} ranks but the plan expects {plan.world_size}")
        self.data = build_data(plan, self.rank, self.size)
        self.net = build_model_and_optimizer(plan, self.data.info)
        check_loss_setup(self.net.model, self.data.val, run_dir)
        self.hooks = build_callbacks(
            plan, run_dir, self.data, self.net.agreement, self.save_model, requests
        )
        self.metrics_log = self.hooks.metrics_log  # rank 0's; None on the others
        self.rollbacks = 0

    def run(self) -> dict[str, float]:
        """Fit, then finish; the final metrics."""
        if self.metrics_log is not None and self.plan.elastic_nodes is not None:
            # Each start of an elastic run's ranks: the UI's world_size chart shows every resize.
            self.metrics_log.log({"world_size": self.size}, step=self.plan.initial_step)
        return self.finish(self.fit())

    def save_model(self, path: Path) -> Any:
        """Write the model without tntrun's training wrappers (the best checkpoint's)."""
        return save_clean_model(self.net.model, self.plan.settings.model, self.data.info, path)

    def stream(self, first_epoch: int) -> Any:
        """The training stream from ``first_epoch``."""
        return stream_from(self.plan, self.data, first_epoch)

    def fit(self) -> Any:
        """The plan's epochs; a preemption is checkpointed at the step the ranks agreed on."""
        try:
            return self.fit_with_rollbacks()
        except Preempted as stop:
            model, plan = self.net.model, self.plan
            average_non_trainable(model, name="non_trainable.preempted")  # one model saved
            meta = replace(checkpoint_meta(plan)(stop.epoch, stop.step), batch=stop.batch)
            checkpoint_and_record(model, stop, meta, self.run_dir, plan.settings.checkpoint.keep)
            raise

    def fit_with_rollbacks(self) -> Any:
        """``model.fit`` from the plan's epoch and batch; after a non-finite loss, fail
        (faults.on_nonfinite=fail) or roll back to the last good state with a lower LR, up
        to faults.max_rollbacks times."""
        rollback = self.plan.settings.faults.on_nonfinite is OnNonFinite.rollback
        # The state before step 1: where a rollback returns when no checkpoint exists yet.
        snapshot = Snapshot(self.net.model, self.net.optimizer) if rollback else None
        epoch, batch, train_ds = self.plan.initial_epoch, self.plan.initial_batch, self.data.train
        while True:
            try:
                return self.fit_from(epoch, batch, train_ds)
            except NonFiniteLoss as event:
                if not self.may_roll_back(event, rollback):
                    self.record_nonfinite(event, "fail", rollbacks=self.rollbacks)
                    raise
                epoch, batch = self.roll_back(event, snapshot)
                train_ds = self.stream(epoch)

    def may_roll_back(self, event: NonFiniteLoss, rollback: bool) -> bool:
        """Bad data are not rolled back: the same batch would come again."""
        limit = self.plan.settings.faults.max_rollbacks
        return not event.data and rollback and self.rollbacks < limit

    def roll_back(self, event: NonFiniteLoss, snapshot: Snapshot | None) -> tuple[int, int]:
        """Every rank: the last good state, its LR lowered; (epoch, batch) to go on from."""
        self.rollbacks += 1
        model, optimizer, faults = self.net.model, self.net.optimizer, self.plan.settings.faults
        epoch, batch, restored = nonfinite.roll_back(
            model, optimizer, self.plan, self.run_dir, snapshot
        )
        _, schedule = learning_rate_of(optimizer)  # the PlannedSchedule
        schedule.scale.assign(schedule.scale * faults.rollback_lr_factor)
        lr_scale = float(schedule.scale.numpy())
        details = {"rollback": self.rollbacks, "restored": restored, "lr_scale": lr_scale}
        self.record_nonfinite(event, "rollback", **details)
        if self.metrics_log is not None:
            self.metrics_log.log({"rollbacks": self.rollbacks}, step=event.step)
            print(
                f"{event}: rollback {self.rollbacks}/{faults.max_rollbacks} to {restored} "
                f"(epoch {epoch}), LR x{lr_scale:g}",
                flush=True,
            )
        return epoch, batch

    def record_nonfinite(self, event: NonFiniteLoss, action: str, **details: Any) -> None:
        """Rank 0 records the event for the driver (which tags the run)."""
        if self.metrics_log is not None:
            nonfinite.record(self.run_dir, event, action, **details)

    def fit_from(self, epoch: int, batch: int, train_ds: Any) -> Any:
        """Train epochs ``epoch``.. of the plan, the first from its ``batch``-th batch (a
        preempted run's checkpoint is mid-epoch): that epoch alone first, then the rest."""
        history, epochs = None, self.plan.epochs
        if batch:
            self.hooks.start_at_batch(batch)
            history = self.fit_epochs(train_ds.skip(batch), epoch, epoch + 1, batch)
            epoch += 1
            train_ds = self.stream(epoch) if epoch < epochs else None
        if epoch < epochs and not stopped_early(self.hooks.callbacks):
            history = self.fit_epochs(train_ds, epoch, epochs)
        return history

    def fit_epochs(self, train_ds: Any, first: int, end: int, skipped: int = 0) -> Any:
        """One ``model.fit`` over epochs ``first``..``end - 1``, its first past ``skipped``
        batches. The streams come shuffled by tntrun's input pipeline (``shuffle=False``:
        Keras cannot)."""
        return self.net.model.fit(
            train_ds,
            epochs=end,
            initial_epoch=first,
            steps_per_epoch=self.plan.steps_per_epoch - skipped,
            callbacks=self.hooks.callbacks,
            verbose=0,
            shuffle=False,
        )

    def finish(self, history: Any) -> dict[str, float]:
        """The final metrics (rank 0 logs the run's summary and saves the model), then the
        scaling prediction if asked."""
        final = {k: float(v[-1]) for k, v in history.history.items()}
        # All ranks: they measure the matmul peak together; rank 0 gets the metrics.
        steady = self.hooks.throughput.steady_state()
        utilisation = model_flop_utilisation(self.net.model, self.data.info, self.plan, steady)
        if self.metrics_log is not None:
            self.log_summary(steady, utilisation)
            save_final(self.net.model, self.plan, self.data.info, self.run_dir, self.data.val)
        if self.plan.settings.predict_scaling:  # last: it recompiles the model (weights saved)
            self.predict_scaling()
        if self.metrics_log is not None:
            self.metrics_log.close()
        return final

    def log_summary(self, steady: dict[str, float], utilisation: dict[str, float]) -> None:
        """Rank 0: the run's summary metrics, logged at its last epoch."""
        summary = {
            **steady,
            "weights_rank_spread": self.hooks.sync_guard.final_spread,
            **utilisation,
            **precision.loss_scale_metrics(self.net.optimizer),
        }
        self.metrics_log.log(summary, step=self.plan.epochs - 1)

    def predict_scaling(self) -> None:
        """Time the model's step on this run's batches and predict other world sizes."""
        batches = stream_from(self.plan, self.data)
        task, throughput = self.data.info.task, self.hooks.throughput
        predict_scaling(
            self.net.model, self.plan, task, throughput, self.run_dir, self.metrics_log, batches
        )
