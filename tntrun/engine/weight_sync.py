"""The guard that the ranks' weights stay equal: a rank whose gradients are not averaged
would otherwise train on silently."""

from __future__ import annotations

import keras
import numpy as np

from tntrun.engine.collectives import checksums_across_ranks
from tntrun.engine.model_average import synced_weights

NON_TRAINABLE_HINT = (
    "; or the non-trainable weights (BatchNorm's moving statistics) were not averaged at the "
    "epoch's end: AverageNonTrainable (tntrun.engine.model_average) comes before this guard"
)


class WeightSyncGuard(keras.callbacks.Callback):
    """Stop with a clear error when ranks' weights diverge (gradients not averaged).

    Horovod under the wrong Keras silently skips the allreduce; comparing a
    weight checksum after the first step and every ``every_epochs`` catches it. At an
    epoch's end and the end of training it covers the non-trainable float weights too
    (BatchNorm's moving statistics): place it after :class:`AverageNonTrainable`.
    """

    def __init__(self, every_epochs: int = 1) -> None:
        super().__init__()
        self.every_epochs = every_epochs
        self._checked_first_step = False

    final_spread: float = float("nan")

    def _check(self, when: str, trainable_only: bool = False) -> None:
        model = self.model
        variables = model.trainable_weights if trainable_only else synced_weights(model)
        sums = checksums_across_ranks(variables, name=f"weight_sync.{when}")
        spread = self.final_spread = float(sums.max() - sums.min())
        if not np.isfinite(sums).all():
            bad = [rank for rank, value in enumerate(sums.tolist()) if not np.isfinite(value)]
            raise RuntimeError(
                f"weights of rank(s) {bad} are not finite {when} "
                f"(checksums by rank: {sums.tolist()})"
            )
        if spread > 1e-6 * max(1.0, float(abs(sums).max())):
            raise RuntimeError(
                f"ranks' weights diverged {when} (checksums by rank: {sums.tolist()}): gradients "
                "are not being averaged: every update must go through the data-parallel "
                "optimizer (see tntrun.engine.data_parallel)"
                + ("" if trainable_only else NON_TRAINABLE_HINT)
            )

    def on_train_batch_end(self, batch, logs=None):
        if not self._checked_first_step:
            self._checked_first_step = True
            # Trainable weights only: the non-trainable ones (BatchNorm's moving statistics)
            # follow each rank's batches until they are averaged at the epoch's end.
            self._check("after the first step", trainable_only=True)

    def on_epoch_end(self, epoch, logs=None):
        if self.every_epochs > 0 and (epoch + 1) % self.every_epochs == 0:
            self._check(f"after epoch {epoch + 1}")

    def on_train_end(self, logs=None):
        self._check("at the end of training")
