"""Keras optimizers from the ``optimizer`` config group."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

PLAN_KEYS = ("name", "base_lr", "base_batch_size")


def build_optimizer(section: Mapping[str, Any], learning_rate) -> keras.optimizers.Optimizer:
    """The optimizer the ``optimizer`` section names, with the plan's learning rate (or
    schedule); its other keys are the optimizer's own arguments."""
    kwargs = {k: v for k, v in section.items() if k not in PLAN_KEYS}
    name = section["name"]
    if name == "adam":
        return keras.optimizers.Adam(learning_rate=learning_rate, **kwargs)
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=learning_rate, **kwargs)
    raise ValueError(f"optimizer.name={name!r}: choose adam or sgd")
