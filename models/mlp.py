"""A small fully connected classifier."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tntrun.models.base import keras_module


@dataclass
class MlpConfig:
    _target_: str = "tntrun.models.mlp.build_mlp"
    hidden_units: list[int] = field(default_factory=lambda: [128, 64])
    # After each hidden layer (0: none); 0.1 is what the default digits run has trained with.
    dropout: float = 0.1


SCHEMAS = {"mlp": MlpConfig}


def build_mlp(
    input_shape: Sequence[int],
    num_classes: int,
    hidden_units: Sequence[int] = (128, 64),
    dropout: float = MlpConfig.dropout,
):
    """Dense ReLU layers with optional dropout, ending in ``num_classes`` logits."""
    keras = keras_module()
    inputs = keras.Input(shape=tuple(input_shape), name="features")
    x = keras.layers.Flatten()(inputs)
    for i, units in enumerate(hidden_units):
        x = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(x)
        if dropout:
            x = keras.layers.Dropout(dropout, name=f"dropout_{i}")(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, logits, name="mlp")
