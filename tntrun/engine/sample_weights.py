"""Per-sample weights in tntrun's pipeline: the padding's zero weight and class weights.

Both are applied to unbatched elements before sharding, as Keras weighs a sample: the
weight a dataset yields (``(x, y, sample_weight)``, any structure) is multiplied, never
replaced, so padding, class weights and the dataset's own weights compose. Keras' own
``fit(class_weight=...)`` cannot be used: tntrun feeds ``fit`` a stream it built itself,
and Keras refuses class weights beside sample weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tensorflow as tf


class ClassWeightError(ValueError):
    """Class weights the dataset's labels cannot take (several outputs, sequence labels)."""


def scaled_by(weight: float):
    """A map of dataset elements: ``(x, y)`` -> ``(x, y, weight)``; ``(x, y, w)`` ->
    ``(x, y, w * weight)`` for ``w`` of any structure (a dict of weights per output)."""

    def scale(features: Any, label: Any, *sample_weight: Any):
        return features, label, _times(sample_weight, tf.constant(weight, tf.float32))

    return scale


def check_one_class(label: tf.TensorSpec) -> None:
    """Refuse labels that hold more than one class per sample (sequences), before the map
    is traced (an error raised while tracing reaches the user wrapped in autograph's)."""
    rank = label.shape.rank
    if rank is None or rank > 1:
        raise ClassWeightError(
            f"train.class_weight needs one class per sample, but the labels have shape "
            f"{label.shape.as_list() if rank is not None else 'unknown'}: remove "
            "train.class_weight (or give per-sample weights from the dataset as "
            "(x, y, sample_weight))"
        )


def class_index(label: tf.Tensor) -> tf.Tensor:
    """A sample's class as Keras reads it for ``class_weight``: a scalar id (rounded), a
    one-element vector, or a one-hot / probability vector (its argmax)."""
    if label.shape.rank == 0:
        return tf.cast(tf.round(tf.cast(label, tf.float32)), tf.int64)
    if label.shape[0] == 1:
        return tf.cast(tf.round(tf.cast(label[0], tf.float32)), tf.int64)
    return tf.argmax(label, output_type=tf.int64)


def with_class_weights(
    dataset: tf.data.Dataset, class_weight: Mapping[int, float], num_classes: int
) -> tf.data.Dataset:
    """Each sample weighted by ``class_weight[its class]`` (1 for classes not listed),
    times the weight the dataset gives it."""
    label_spec = dataset.element_spec[1]
    if not isinstance(label_spec, tf.TensorSpec):
        raise ClassWeightError(
            "train.class_weight applies to a model with one output, but the dataset's labels "
            "are a dict or tuple of outputs: remove train.class_weight and give per-sample "
            "weights from the dataset as (x, y, sample_weight)"
        )
    check_one_class(label_spec)
    given = {int(c): float(w) for c, w in class_weight.items()}  # keys are text in plan.json
    table = tf.constant([given.get(c, 1.0) for c in range(num_classes)], tf.float32)

    def weigh(features: Any, label: tf.Tensor, *sample_weight: Any):
        return features, label, _times(sample_weight, tf.gather(table, class_index(label)))

    return dataset.map(weigh, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _times(sample_weight: tuple[Any, ...], weight: tf.Tensor) -> Any:
    """``weight`` alone, or multiplied into the dataset's own weight(s)."""
    if not sample_weight:
        return weight
    return tf.nest.map_structure(lambda w: w * tf.cast(weight, w.dtype), sample_weight[0])
