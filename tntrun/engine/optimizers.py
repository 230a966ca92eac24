"""Keras optimizers from the ``optimizer`` config group: every Keras 3 optimizer by its
tntrun name (the schema's ``OPTIMIZER_SCHEMAS``), tntrun's own LARS (Keras has none), or the
user's own class by ``_target_``."""

from __future__ import annotations

import keras
from hydra.utils import get_class

from tntrun.config.settings import OptimizerSettings
from tntrun.engine.lars import Lars

KERAS_OPTIMIZERS: dict[str, type[keras.optimizers.Optimizer]] = {
    "adam": keras.optimizers.Adam,
    "adamw": keras.optimizers.AdamW,
    "adamax": keras.optimizers.Adamax,
    "nadam": keras.optimizers.Nadam,
    "lamb": keras.optimizers.Lamb,
    "sgd": keras.optimizers.SGD,
    "lars": Lars,
    "rmsprop": keras.optimizers.RMSprop,
    "adagrad": keras.optimizers.Adagrad,
    "adadelta": keras.optimizers.Adadelta,
    "lion": keras.optimizers.Lion,
    "adafactor": keras.optimizers.Adafactor,
    "ftrl": keras.optimizers.Ftrl,
}


def optimizer_class(optimizer: OptimizerSettings) -> type:
    """The class the section names: ``_target_`` (the user's), else tntrun's ``name``."""
    if optimizer.target:
        return get_class(optimizer.target)
    name = optimizer.name
    if name not in KERAS_OPTIMIZERS:
        raise ValueError(f"optimizer.name={name!r}: choose one of {', '.join(KERAS_OPTIMIZERS)}")
    return KERAS_OPTIMIZERS[name]


def build_optimizer(optimizer: OptimizerSettings, learning_rate) -> keras.optimizers.Optimizer:
    """The optimizer the settings name, with the plan's learning rate (or schedule) and its
    own arguments."""
    return optimizer_class(optimizer)(learning_rate=learning_rate, **optimizer.arguments)
