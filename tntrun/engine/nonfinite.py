"""The non-finite loss guard: every rank stops at the same step when the averaged loss is
NaN or infinite, and the trainer fails the run or rolls back to the last good state.

The rank-averaged loss is allreduced inside the training step, in the same
Horovod cycle as the gradients (:mod:`tntrun.engine.data_parallel`), so every
rank reads the same value after the step and decides alike, without an extra
round of communication. Reading it costs one small read per step, shared with the
preemption guard.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import horovod.tensorflow as hvd
import keras
import numpy as np

from tntrun.contract import run_files
from tntrun.engine.data_parallel import broadcast_state
from tntrun.engine.step_agreement import StepAgreement


class NonFiniteLoss(RuntimeError):
    """The rank-averaged loss became NaN or infinite (raised on every rank at the same step)."""

    data = False  # the data were bad, not the training (NonFiniteData)

    def __init__(self, loss: float, epoch: int, step: int) -> None:
        self.loss, self.epoch, self.step = loss, epoch, step
        super().__init__(f"loss became {loss} at epoch {epoch}, step {step}")


class NonFiniteData(NonFiniteLoss):
    """A training batch held NaN or infinite values (every rank raises at the same step).
    Not rolled back: the same data would come again."""

    data = True

    def __str__(self) -> str:
        return (
            f"the training data hold NaN or infinite values at epoch {self.epoch}, "
            f"step {self.step} (the batch of that step on at least one rank)"
        )


class NonFiniteGuard(keras.callbacks.Callback):
    """After every training step: raise :class:`NonFiniteLoss` when the averaged loss is
    not finite. Every rank reads the same value, so all raise at the same step, before
    any epoch-end work (no checkpoint is written from the bad state). ``agreement`` is
    a callback placed before this one (it reads the value)."""

    def __init__(self, agreement: StepAgreement) -> None:
        super().__init__()
        self.agreement = agreement
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = self.agreement.loss
        if self.agreement.bad_data or not math.isfinite(loss):
            step = int(self.model.optimizer.iterations.numpy()) - 1  # the step that computed it
            kind = NonFiniteData if self.agreement.bad_data else NonFiniteLoss
            raise kind(loss, self._epoch + 1, step)


def record(run_dir: Path, event: NonFiniteLoss, action: str, **details: Any) -> None:
    """Rank 0: append the event to ``nonfinite.jsonl`` (the driver tags the run from it)."""
    line = {
        "t": time.time(),
        "loss": str(event.loss),
        "reason": str(event),
        "epoch": event.epoch,
        "step": event.step,
        "action": action,
        **details,
    }
    with (run_dir / run_files.NONFINITE).open("a") as events:
        events.write(json.dumps(line) + "\n")


class Snapshot:
    """Every rank's copy of the model and optimizer state (the same on all ranks after the
    initial broadcast): where a rollback returns when no checkpoint exists yet."""

    def __init__(self, model: Any, optimizer: Any) -> None:
        self.variables = [*model.variables, *optimizer.variables]
        self.values = [np.array(v.numpy()) for v in self.variables]

    def restore(self) -> None:
        for variable, value in zip(self.variables, self.values, strict=True):
            variable.assign(value)


def roll_back(
    model: Any, optimizer: Any, plan: Any, run_dir: Path, snapshot: Snapshot | None
) -> tuple[int, int, str]:
    """Every rank: return to the last good state; (epoch and batch to continue from, what
    was restored).

    Rank 0 picks the newest checkpoint of this run (else the one it resumed from)
    and restores it; without one every rank restores the snapshot taken before
    the first step. All ranks then get rank 0's state.
    """
    from tntrun.contract.checkpoints import STATE_PREFIX, latest_checkpoint, read_meta

    choice: tuple[str | None, int, int] = (None, plan.initial_epoch, plan.initial_batch)
    if hvd.rank() == 0:
        found = latest_checkpoint(run_dir) or (Path(plan.resume_from) if plan.resume_from else None)
        if found is not None:
            meta = read_meta(found)
            choice = (str(found), meta.epoch, meta.batch)
    source, epoch, batch = hvd.broadcast_object(choice, root_rank=0, name="tntrun.rollback")
    if source is None:
        snapshot.restore()
    elif hvd.rank() == 0:
        from tntrun.engine.precision import read_checkpoint

        read_checkpoint(model, optimizer, str(Path(source) / STATE_PREFIX))
    broadcast_state(model, optimizer, root_rank=0)
    return epoch, batch, source or "the state before the first step"
