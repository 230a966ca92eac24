"""Where a step falls in the run: (epoch, batches done of it), for a mid-epoch checkpoint.

A resumed epoch's ``fit`` starts past the batches trained before (Keras counts its
batches from 0 again), and the epoch's last batch belongs to the next epoch's start:
its end-of-epoch work (validation, the epoch checkpoint) is what a resume would redo.
"""

from __future__ import annotations

import keras


class EpochPosition(keras.callbacks.Callback):
    """Follows the epoch and its batches across a resumed epoch (:meth:`start_at_batch`)."""

    def __init__(self, steps_per_epoch: int, epochs: int) -> None:
        super().__init__()
        self.steps_per_epoch, self.epochs = steps_per_epoch, epochs
        self._epoch = 0
        self._first_batch = 0  # a resumed epoch's fit starts past the batches trained before

    def start_at_batch(self, batch: int) -> None:
        self._first_batch = batch

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        self._first_batch = 0

    def position(self, batch: int) -> tuple[int, int] | None:
        """(epoch, batches done of it) after Keras' ``batch`` of this fit; None after the
        run's last step (finishing beats a checkpoint of it)."""
        epoch, done = self._epoch, self._first_batch + batch + 1
        if done >= self.steps_per_epoch:
            epoch, done = epoch + 1, 0
        return None if epoch >= self.epochs else (epoch, done)
