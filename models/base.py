"""The model contract: a builder named by ``model._target_``, and the Keras it builds with.

A builder is any callable (tntrun's own or the user's, imported from the
working directory) that takes the dataset's ``input_shape`` and
``num_classes`` plus the config's other ``model.*`` keys as keyword arguments
and returns an uncompiled Keras 3 model whose output is class logits.
The driver checks before launch that the builder accepts every configured key.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import keras

# Arguments tntrun passes itself, from the dataset's info().
SIZED_BY_DATASET = ("input_shape", "num_classes")


class ModelBuilder(Protocol):
    def __call__(
        self, *, input_shape: tuple[int, ...], num_classes: int, **config: Any
    ) -> keras.Model: ...


def keras_module() -> ModuleType:
    """Keras 3, imported on first use (the driver plans without importing it)."""
    import keras

    return keras
