"""Elastic runs on the ranks: rank 0 commits the training state every few steps.

A commit is an ordinary mid-epoch checkpoint (``epoch-0002.batch-00030``), so when a host
is lost the driver restarts the surviving ranks from the newest one, at the new world
size, as a resumed run does: at most ``elastic.commit_every_steps`` steps of work are lost.
Rank 0 writes alone (the ranks' states are the same after every step); the others go on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import keras

from tntrun.contract.checkpoints import CheckpointMeta, publish


class Commits(keras.callbacks.Callback):
    """Rank 0: a checkpoint after every ``every`` training steps, but the run's last."""

    def __init__(
        self,
        run_dir: Path,
        every: int,
        keep: int,
        steps_per_epoch: int,
        epochs: int,
        meta: Callable[[int, int], CheckpointMeta],
    ) -> None:
        super().__init__()
        self.run_dir, self.every, self.keep = run_dir, every, keep
        self.steps_per_epoch, self.epochs, self.meta = steps_per_epoch, epochs, meta
        self._epoch = 0
        self._first_batch = 0  # a resumed epoch's fit starts past the batches trained before

    def start_at_batch(self, batch: int) -> None:
        self._first_batch = batch

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        self._first_batch = 0

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every:
            return
        epoch, done = self._epoch, self._first_batch + batch + 1
        if done >= self.steps_per_epoch:
            epoch, done = epoch + 1, 0
        if epoch >= self.epochs:  # the run's last step: its end writes the final state
            return
        from tntrun.engine.precision import state_checkpoint

        state = state_checkpoint(self.model, self.model.optimizer)
        meta = replace(self.meta(epoch, step), batch=done)
        publish(self.run_dir, meta, lambda prefix: state.write(prefix), self.keep)
