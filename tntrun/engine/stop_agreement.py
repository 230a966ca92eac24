"""A callback's ``stop_training`` on one rank stops every rank at the same step: one rank
leaving ``fit`` alone would leave the others waiting in the next allreduce."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import horovod.tensorflow as hvd
import keras
import tensorflow as tf

from tntrun.contract import run_files
from tntrun.engine.step_agreement import StepAgreement


class StopAgreement:
    """Every rank stops at the same point when any callback asks (``stop_training``).

    A callback that stops training (EarlyStopping after an epoch, a user's own reading
    local state after any step) may decide on one rank only; that rank would leave ``fit``
    while the others wait in the next step's allreduce. ``before`` goes ahead of the users'
    callbacks and notes what is already agreed (preemption and the NaN guard stop at an
    agreed step); ``after`` follows them:

    - inside an epoch, a stop asked on this rank alone is held back and sent with the next
      step's allreduce (the step agreement's ``user_stop``), so every rank stops after that
      step;
    - at an epoch's end, one allgather agrees on the epoch's decisions.

    Rank 0 records an early stop in ``stopped_early.json`` and says so on the console.
    """

    def __init__(self, run_dir: Path, rank: int, epochs: int, agreement: StepAgreement) -> None:
        self.run_dir, self.rank, self.epochs, self.agreement = run_dir, rank, epochs, agreement
        self.stopped_at: int | None = None  # the epoch (0-based) a callback stopped in
        self._stopped_by_steps = False
        self._agreed = False  # stop_training, as agreed before the users' callbacks ran
        self._asked = False  # a callback of this rank asked to stop in this epoch
        self._stopped_after_step: int | None = None  # the step (of the epoch) stopped after
        self.before = _Around(self._note_steps, self._note_step, self)
        self.after = _Around(self._agree, self._hold_back, self)

    def _note_step(self, model, step: int) -> None:
        if self.agreement.user_stop:  # some rank's callback asked at the previous step
            model.stop_training = True
            self._stopped_after_step = step
        self._agreed = bool(model.stop_training)

    def _hold_back(self, model, step: int) -> None:
        if model.stop_training and not self._agreed:  # asked here alone: tell the others
            self._asked = True
            self.agreement.local_user_stop.assign(1.0)
            model.stop_training = False  # stop with them, after the next step

    def _note_steps(self, model, epoch: int) -> None:
        self._stopped_by_steps = bool(model.stop_training) and not self.agreement.user_stop

    def _agree(self, model, epoch: int) -> None:
        # This rank's callbacks asked: inside the epoch, or now (not by an agreed stop).
        mid_epoch = self._stopped_after_step is not None
        asked = self._asked or (bool(model.stop_training) and not mid_epoch)
        self._asked = False
        flag = tf.constant([int(asked and not self._stopped_by_steps)], tf.int32)
        by_rank = hvd.allgather(flag, name=f"stop_agreement.{epoch}").numpy().tolist()
        if not any(by_rank):
            return
        model.stop_training = True
        if epoch + 1 >= self.epochs:
            return
        self.stopped_at, step = epoch, self._stopped_after_step
        if self.rank == 0:
            ranks = [rank for rank, flag in enumerate(by_rank) if flag]
            record = {"epoch": epoch + 1, "epochs": self.epochs, "ranks": ranks}
            where = f"after epoch {epoch + 1} of {self.epochs}"
            if step is not None:  # the step of the epoch (from 1) that every rank ran last
                record["step"] = step + 1
                where = f"in epoch {epoch + 1} of {self.epochs}, after its step {step + 1}"
            (self.run_dir / run_files.STOPPED_EARLY).write_text(json.dumps(record))
            print(
                f"training stopped early {where}: a callback set stop_training on rank(s) "
                f"{ranks}; every rank stops here",
                flush=True,
            )


def stopped_early(callbacks: list[keras.callbacks.Callback]) -> bool:
    """Whether a :class:`StopAgreement` among ``callbacks`` saw a callback stop training."""
    return any(isinstance(c, _Around) and c.owner.stopped_at is not None for c in callbacks)


class _Around(keras.callbacks.Callback):
    """One side of a :class:`StopAgreement`: its actions after each step and each epoch."""

    def __init__(
        self,
        at_epoch_end: Callable[[Any, int], None],
        at_step_end: Callable[[Any, int], None],
        owner: StopAgreement,
    ) -> None:
        super().__init__()
        self._at_epoch_end, self._at_step_end, self.owner = at_epoch_end, at_step_end, owner

    def on_train_batch_end(self, batch, logs=None):
        self._at_step_end(self.model, batch)

    def on_epoch_end(self, epoch, logs=None):
        self._at_epoch_end(self.model, epoch)
