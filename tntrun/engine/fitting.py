"""``model.fit`` over the plan's epochs: from a mid-epoch checkpoint, and again from the last
good state after a non-finite loss (``faults.on_nonfinite=rollback``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tntrun.config.schema import OnNonFinite
from tntrun.engine import nonfinite
from tntrun.engine.callback_set import RankCallbacks
from tntrun.engine.lr_schedule import learning_rate_of
from tntrun.engine.model_set import RankModel
from tntrun.engine.nonfinite import NonFiniteLoss, Snapshot
from tntrun.engine.stop_agreement import stopped_early
from tntrun.planning.plan import Plan

Stream = Callable[[int], Any]  # the training stream from an epoch


def fit_with_rollbacks(
    plan: Plan,
    run_dir: Path,
    net: RankModel,
    hooks: RankCallbacks,
    train_ds: Any,
    stream: Stream,
) -> Any:
    """``model.fit`` from the plan's epoch and batch (``train_ds``: the stream from there);
    after a non-finite loss, fail (faults.on_nonfinite=fail) or roll back to the last good
    state with a lower LR, up to faults.max_rollbacks times."""
    model, optimizer, metrics_log = net.model, net.optimizer, hooks.metrics_log
    faults = plan.settings.faults
    rollback = faults.on_nonfinite is OnNonFinite.rollback
    snapshot = Snapshot(model, optimizer) if rollback else None  # the state before step 1
    epoch, batch, rollbacks = plan.initial_epoch, plan.initial_batch, 0
    while True:
        try:
            return fit_from(model, plan, epoch, batch, train_ds, stream, hooks)
        except NonFiniteLoss as event:
            # Bad data are not rolled back: the same batch would come again.
            if event.data or not rollback or rollbacks >= faults.max_rollbacks:
                if metrics_log is not None:
                    nonfinite.record(run_dir, event, "fail", rollbacks=rollbacks)
                raise
            rollbacks += 1
            epoch, batch, restored = nonfinite.roll_back(model, optimizer, plan, run_dir, snapshot)
            _, schedule = learning_rate_of(optimizer)  # the PlannedSchedule
            schedule.scale.assign(schedule.scale * faults.rollback_lr_factor)
            lr_scale = float(schedule.scale.numpy())
            if metrics_log is not None:
                nonfinite.record(
                    run_dir,
                    event,
                    "rollback",
                    rollback=rollbacks,
                    restored=restored,
                    lr_scale=lr_scale,
                )
                metrics_log.log({"rollbacks": rollbacks}, step=event.step)
                print(
                    f"{event}: rollback {rollbacks}/{faults.max_rollbacks} to {restored} "
                    f"(epoch {epoch}), LR x{lr_scale:g}",
                    flush=True,
                )
            train_ds = stream(epoch)


def fit_from(
    model: Any,
    plan: Plan,
    epoch: int,
    batch: int,
    train_ds: Any,
    stream: Stream,
    hooks: RankCallbacks,
) -> Any:
    """Train epochs ``epoch``.. of the plan, the first from its ``batch``-th batch (a
    preempted run's checkpoint is mid-epoch): that epoch alone first, then the rest. The
    streams come shuffled by tntrun's input pipeline (``shuffle=False``: Keras cannot)."""
    spe, history, callbacks = plan.steps_per_epoch, None, hooks.callbacks
    if batch:
        hooks.start_at_batch(batch)
        history = model.fit(
            train_ds.skip(batch),
            epochs=epoch + 1,
            initial_epoch=epoch,
            steps_per_epoch=spe - batch,
            callbacks=callbacks,
            verbose=0,
            shuffle=False,
        )
        epoch += 1
        train_ds = stream(epoch) if epoch < plan.epochs else None
    if epoch < plan.epochs and not stopped_early(callbacks):
        history = model.fit(
            train_ds,
            epochs=plan.epochs,
            initial_epoch=epoch,
            steps_per_epoch=spe,
            callbacks=callbacks,
            verbose=0,
            shuffle=False,
        )
    return history
