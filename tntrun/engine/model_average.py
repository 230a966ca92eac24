"""One model on every rank: the model's non-trainable float weights averaged over ranks.

Why: trainable weights stay equal through the averaged gradients, but non-trainable ones
(BatchNormalization's moving mean and variance) follow each rank's own batches and drift
apart. Averaged at each epoch's end, before validation and checkpoints, the validated,
saved and logged model is the one every rank holds. The moving statistics' average is the
mean of the ranks' estimates, each of the same (momentum-weighted) batches' length.
"""

from __future__ import annotations

from typing import Any

import horovod.tensorflow as hvd
import keras
import tensorflow as tf


def averaged_weights(model: Any) -> list[Any]:
    """The non-trainable float weights of ``model`` (not metric state, not seeds)."""
    return [w for w in model.non_trainable_weights if tf.as_dtype(w.dtype).is_floating]


def synced_weights(model: Any) -> list[Any]:
    """The weights equal on every rank after an epoch's end: trainable and averaged ones."""
    return [*model.trainable_weights, *averaged_weights(model)]


def average_non_trainable(model: Any, name: str) -> int:
    """Average ``model``'s non-trainable float weights over ranks (one grouped allreduce per
    dtype, usually one); returns how many weights were averaged."""
    weights = averaged_weights(model)
    by_dtype: dict[str, list[Any]] = {}
    for weight in weights:
        by_dtype.setdefault(str(weight.dtype), []).append(weight)
    for dtype, group in by_dtype.items():
        values = [tf.convert_to_tensor(w.value) for w in group]
        means = hvd.grouped_allreduce(values, op=hvd.Average, name=f"{name}.{dtype}")
        for weight, mean in zip(group, means, strict=True):
            weight.assign(mean)
    return len(weights)


class AverageNonTrainable(keras.callbacks.Callback):
    """At each epoch's end, first among the callbacks that read the model (the weight guard,
    validation, checkpoints): the ranks' non-trainable weights averaged."""

    def on_epoch_end(self, epoch, logs=None):
        average_non_trainable(self.model, name=f"non_trainable.{epoch}")
