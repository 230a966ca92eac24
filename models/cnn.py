"""A small LeNet-style convolutional classifier (conv-pool blocks, then dense layers)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tntrun.models.base import keras_module


@dataclass
class CnnConfig:
    _target_: str = "tntrun.models.cnn.build_cnn"
    # One 'same'-padded ReLU convolution followed by a 2x2 max-pool per entry.
    filters: list[int] = field(default_factory=lambda: [32, 64])
    kernel_size: int = 3
    dense_units: int = 128
    dropout: float = 0.0


SCHEMAS = {"cnn": CnnConfig}


def image_shape(input_shape: Sequence[int]) -> tuple[int, int, int]:
    """``input_shape`` as (height, width, channels).

    (H, W) gains one channel; a flat vector whose length is a perfect square
    (digits' 64 features) becomes a square single-channel image.
    """
    shape = tuple(int(d) for d in input_shape)
    if len(shape) == 3:
        return shape[0], shape[1], shape[2]
    if len(shape) == 2:
        return (shape[0], shape[1], 1)
    if len(shape) == 1 and math.isqrt(shape[0]) ** 2 == shape[0]:
        side = math.isqrt(shape[0])
        return (side, side, 1)
    raise ValueError(
        f"input_shape={shape}: image models need (height, width[, channels]) inputs "
        "or flat features whose count is a perfect square"
    )


def image_input(input_shape: Sequence[int]):
    """(Keras input of ``input_shape``, the same tensor viewed as an HxWxC image)."""
    keras = keras_module()
    inputs = keras.Input(shape=tuple(int(d) for d in input_shape), name="features")
    shape = image_shape(input_shape)
    if tuple(inputs.shape[1:]) == shape:
        return inputs, inputs
    return inputs, keras.layers.Reshape(shape, name="to_image")(inputs)


def build_cnn(
    input_shape: Sequence[int],
    num_classes: int,
    filters: Sequence[int] = (32, 64),
    kernel_size: int = 3,
    dense_units: int = 128,
    dropout: float = 0.0,
):
    """Conv-pool blocks, a dense ReLU layer and ``num_classes`` logits.

    Convolutions and pools pad 'same', so inputs as small as 1x1 still work.
    """
    keras = keras_module()
    inputs, x = image_input(input_shape)
    for i, width in enumerate(filters):
        x = keras.layers.Conv2D(
            width, kernel_size, padding="same", activation="relu", name=f"conv_{i}"
        )(x)
        x = keras.layers.MaxPooling2D(2, padding="same", name=f"pool_{i}")(x)
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(dense_units, activation="relu", name="dense")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, logits, name="cnn")
