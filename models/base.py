"""The model contract: a builder named by ``model._target_``.

A builder is any callable (tntrun's own or the user's, imported from the
working directory) that takes the dataset's ``input_shape`` and
``num_classes`` plus the config's other ``model.*`` keys as keyword arguments
and returns an uncompiled ``tf_keras.Model`` whose output is class logits.
The driver checks before launch that the builder accepts every configured key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import tf_keras

# Arguments tntrun passes itself, from the dataset's info().
SIZED_BY_DATASET = ("input_shape", "num_classes")


class ModelBuilder(Protocol):
    def __call__(
        self, *, input_shape: tuple[int, ...], num_classes: int, **config: Any
    ) -> tf_keras.Model: ...
