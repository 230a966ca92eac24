"""A training label outside the classes in a dataset tntrun cannot scan before launch:
TensorFlow's own error at that step (a real Keras fit here, in-process) becomes one line."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tntrun.engine.loss_check import label_range_line


def fit_error(labels: list[int]) -> Exception:
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(4)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.zeros((len(labels), 3), "float32")
    data = tf.data.Dataset.from_tensor_slices((x, np.array(labels))).batch(4)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        model.fit(data, epochs=1, verbose=0)
    return raised.value


def test_a_label_outside_the_classes_at_a_later_step_is_one_line():
    line = label_range_line(fit_error([0, 1, 2, 3, 0, -1, 1, 2]))  # the second batch's
    assert line == (
        "a training label is -1, outside the model's 4 classes (0..3): fix the dataset's "
        "labels, or build the model with one output per class"
    )
    assert "outside the model's 4 classes" in label_range_line(fit_error([0, 7, 1, 2]))


def test_other_errors_are_left_alone():
    assert label_range_line(ValueError("Input 0 of layer dense is incompatible")) is None
