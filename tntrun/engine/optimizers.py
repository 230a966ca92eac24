"""Keras optimizers from the ``optimizer`` config group: every Keras 3 optimizer by its
tntrun name (the schema's ``OPTIMIZER_SCHEMAS``), or the user's own class by ``_target_``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
from hydra.utils import get_class

# Keys that plan the learning rate (or name the optimizer) rather than being its arguments.
PLAN_KEYS = ("name", "_target_", "base_lr", "base_batch_size")

KERAS_OPTIMIZERS: dict[str, type[keras.optimizers.Optimizer]] = {
    "adam": keras.optimizers.Adam,
    "adamw": keras.optimizers.AdamW,
    "adamax": keras.optimizers.Adamax,
    "nadam": keras.optimizers.Nadam,
    "lamb": keras.optimizers.Lamb,
    "sgd": keras.optimizers.SGD,
    "rmsprop": keras.optimizers.RMSprop,
    "adagrad": keras.optimizers.Adagrad,
    "adadelta": keras.optimizers.Adadelta,
    "lion": keras.optimizers.Lion,
    "adafactor": keras.optimizers.Adafactor,
    "ftrl": keras.optimizers.Ftrl,
}


def optimizer_class(section: Mapping[str, Any]) -> type:
    """The class the section names: ``_target_`` (the user's), else tntrun's ``name``."""
    if section.get("_target_"):
        return get_class(section["_target_"])
    name = section["name"]
    if name not in KERAS_OPTIMIZERS:
        raise ValueError(f"optimizer.name={name!r}: choose one of {', '.join(KERAS_OPTIMIZERS)}")
    return KERAS_OPTIMIZERS[name]


def build_optimizer(section: Mapping[str, Any], learning_rate) -> keras.optimizers.Optimizer:
    """The optimizer the ``optimizer`` section names, with the plan's learning rate (or
    schedule); its other keys are the optimizer's own arguments."""
    kwargs = {k: v for k, v in section.items() if k not in PLAN_KEYS}
    return optimizer_class(section)(learning_rate=learning_rate, **kwargs)
