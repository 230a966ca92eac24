"""``train.sync_batch_norm``: BatchNormalization's batch statistics over the global batch.

Why: with small micro-batches a rank's own batch mean and variance are noisy estimates;
synchronised, every rank normalises with the global batch's statistics, as one process
training on the global batch would. Each layer allreduces (sum) its local sum, sum of
squares and count in one tensor per step; Horovod's allreduce has a gradient (the
allreduce of the incoming gradients), so the statistics stay differentiable and the
averaged gradients equal those of the single-process model.
"""

from __future__ import annotations

from typing import Any

import horovod.tensorflow as hvd
import keras
import tensorflow as tf

from tntrun.engine.keras_internals import all_layers, reduction_axes, replace_moments


def synchronise_batch_norm(model: Any) -> int:
    """Make every ``keras.layers.BatchNormalization`` in ``model`` compute its training
    statistics over all ranks; returns how many layers it changed. Call before ``fit``."""
    layers = [
        layer for layer in all_layers(model) if isinstance(layer, keras.layers.BatchNormalization)
    ]
    for layer in layers:
        replace_moments(layer, global_moments(layer))
    return len(layers)


def global_moments(layer: Any):
    """The ``_moments(inputs, mask)`` of ``layer`` over every rank's batch."""

    def moments(inputs: tf.Tensor, mask: tf.Tensor | None) -> tuple[tf.Tensor, tf.Tensor]:
        axes = reduction_axes(layer)
        weights = tf.ones_like(inputs)
        if mask is not None:  # masked steps count for nothing, as in Keras' own _moments
            weights = tf.broadcast_to(tf.cast(mask[..., None], inputs.dtype), tf.shape(inputs))
        local = tf.concat(
            [
                tf.reduce_sum(weights * inputs, axes),
                tf.reduce_sum(weights * tf.square(inputs), axes),
                tf.reduce_sum(weights, axes),
            ],
            axis=0,
        )
        total = hvd.allreduce(local, op=hvd.Sum)
        sums, squares, counts = tf.split(total, 3)
        counts = tf.maximum(counts, keras.backend.epsilon())
        mean = sums / counts
        variance = tf.maximum(squares / counts - tf.square(mean), 0.0)
        return mean, variance

    return moments
