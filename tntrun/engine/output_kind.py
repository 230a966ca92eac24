"""Whether a model's outputs are probabilities (a softmax or sigmoid last) or logits: the
task's default loss takes what the model gives (``from_logits``), and a loss stated with
``from_logits=True`` on probabilities is one note instead of Keras' warning on every rank."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from tntrun.engine import keras_internals

PROBABILITY_ACTIVATIONS = ("softmax", "sigmoid")
# Keras' warning when a from_logits=True loss gets a softmax's or sigmoid's output (it then
# reads the logits, so the numbers are right): tntrun says it once instead.
KERAS_LOGITS_WARNING = r".*received `from_logits=True`, but the `output` argument was produced"


def _is_probability_layer(layer: Any) -> bool:
    activation = getattr(layer, "activation", None)
    name = getattr(activation, "__name__", None)
    if isinstance(layer, keras.layers.Softmax) or name in PROBABILITY_ACTIVATIONS:
        return True
    return isinstance(layer, keras.layers.Activation) and name in PROBABILITY_ACTIVATIONS


def _traced_outputs(model: Any, input_shape: Any) -> list[bool]:
    """Trace a subclassed model once (no step runs) and read what made its outputs."""
    if isinstance(input_shape, Mapping):
        spec: Any = {k: tf.TensorSpec((None, *v), tf.float32) for k, v in input_shape.items()}
    else:
        spec = tf.TensorSpec((None, *input_shape), tf.float32)
    seen: list[bool] = []

    def trace(x):
        outputs = tf.nest.flatten(model(x, training=False))
        seen.extend(keras_internals.made_by_activation(out) for out in outputs)
        return tf.constant(0)

    tf.function(trace).get_concrete_function(spec)
    return seen


def outputs_probabilities(model: Any, input_shape: Sequence[int] | Mapping) -> bool:
    """True when every output of ``model`` is a softmax's or sigmoid's."""
    outputs = getattr(model, "outputs", None)
    if outputs:
        layers = [keras_internals.producing_layer(out) for out in tf.nest.flatten(outputs)]
        return all(_is_probability_layer(layer) for layer in layers)
    try:
        seen = _traced_outputs(model, input_shape)
    except (TypeError, ValueError, tf.errors.OpError):  # inputs it cannot trace with: ask Keras
        return False
    return bool(seen) and all(seen)


def quiet_keras_logits_warning() -> None:
    """Keras warns at each trace on each rank; rank 0's console note says it once."""
    warnings.filterwarnings("ignore", message=KERAS_LOGITS_WARNING)
