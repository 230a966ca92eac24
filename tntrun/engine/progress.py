"""Rank 0's progress lines inside an epoch: a long epoch is not silent in a batch job's log
or a terminal."""

from __future__ import annotations

import time
from typing import Any

import keras

from tntrun.contract import run_files
from tntrun.engine.step_agreement import StepAgreement


def duration(seconds: float) -> str:
    """``95`` -> ``1m35s``; ``4000`` -> ``1h06m``: a time left, to the unit that matters."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class EpochProgress(keras.callbacks.Callback):
    """A line every ``interval_s`` inside an epoch (rank 0): a long epoch is not silent in a
    batch job's log or a terminal. Between lines it costs one clock read per step; the loss
    is the last update's rank-averaged one (the step agreement: no collective of its own).

    With ``live`` (the driver's console is a terminal) it also prints the line every
    :data:`LIVE_EVERY_S` marked as live, which the driver redraws in place."""

    LIVE_EVERY_S = 1.0

    def __init__(
        self, interval_s: float, plan: Any, agreement: StepAgreement, live: bool = False
    ) -> None:
        super().__init__()
        self.interval_s, self.agreement, self.live = interval_s, agreement, live
        self.steps, self.epochs, self.batch = (
            plan.steps_per_epoch,
            plan.epochs,
            plan.global_batch_size,
        )
        self._epoch, self._start, self._next, self._next_live, self._skipped = 0, 0.0, 0.0, 0.0, 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._start = epoch, time.monotonic()
        self._next = self._start + self.interval_s
        self._next_live = self._start + self.LIVE_EVERY_S
        # A preempted run resumes mid-epoch: its first fit runs the epoch's remaining steps.
        self._skipped = self.steps - (self.params or {}).get("steps", self.steps)

    def on_train_batch_end(self, batch, logs=None):
        now = time.monotonic()
        if batch == 0:  # the speed from here: the first step traces and compiles
            self._start = now
            return
        if now >= self._next:
            self._next = self._next_live = now + self.interval_s
            print(self.progress(now, batch), flush=True)
        elif self.live and now >= self._next_live:
            self._next_live = now + self.LIVE_EVERY_S
            print(f"{run_files.LIVE_PREFIX}{self.progress(now, batch)}", flush=True)

    def progress(self, now: float, batch: int) -> str:
        per_step = (now - self._start) / batch
        step = self._skipped + batch + 1
        epoch_left = (self.steps - step) * per_step
        run_left = epoch_left + (self.epochs - self._epoch - 1) * self.steps * per_step
        return (
            f"epoch {self._epoch + 1}/{self.epochs}: step {step}/{self.steps} "
            f"({100 * step // self.steps}%), {self.batch / per_step:,.0f} samples/s, "
            f"loss {self.agreement.loss:.4g}; epoch ends in {duration(epoch_left)}, "
            f"the run in {duration(run_left)}"
        )
