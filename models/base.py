"""The model contract: a builder named by ``model._target_``, and the Keras it builds with.

A builder is any callable (tntrun's own or the user's, imported from the
working directory) that takes the dataset's ``input_shape`` and
``num_classes`` plus the config's other ``model.*`` keys as keyword arguments
and returns an uncompiled Keras model whose output is class logits.
The driver checks before launch that the builder accepts every configured key.

The zoo builds with the Keras that :func:`keras_module` names: Keras 3, as the
ranks train, or the legacy ``tf_keras`` under ``TF_USE_LEGACY_KERAS=1`` (kept to
compare the zoo's numbers with its tf_keras days: tests/test_zoo_keras3.py).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import keras
    import tf_keras

# Arguments tntrun passes itself, from the dataset's info().
SIZED_BY_DATASET = ("input_shape", "num_classes")

# The values with which TensorFlow routes tf.keras to tf_keras (tensorflow/__init__.py).
LEGACY_KERAS_VALUES = ("true", "True", "1")


class ModelBuilder(Protocol):
    def __call__(
        self, *, input_shape: tuple[int, ...], num_classes: int, **config: Any
    ) -> tf_keras.Model | keras.Model: ...


def uses_legacy_keras() -> bool:
    """Whether the environment asks for tf_keras, read as TensorFlow reads it."""
    return os.environ.get("TF_USE_LEGACY_KERAS") in LEGACY_KERAS_VALUES


def keras_module() -> ModuleType:
    """``tf_keras`` under ``TF_USE_LEGACY_KERAS=1``, else Keras 3: the one place the zoo picks.

    Read on every build rather than at import, so a process that sets the
    variable before building builds with the Keras it asked for; a model must
    not mix the two.
    """
    if uses_legacy_keras():
        import tf_keras

        return tf_keras
    import keras

    return keras
