"""The plan's learning-rate schedule as a Keras ``LearningRateSchedule`` (step-based)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import keras
import tensorflow as tf

from tntrun.engine import keras_internals
from tntrun.planning.schedules import ScheduleParams, learning_rate

TF_OPS = SimpleNamespace(
    where=tf.where,
    minimum=tf.minimum,
    maximum=tf.maximum,
    cos=tf.cos,
    sqrt=tf.sqrt,
    power=tf.pow,
    float=lambda x: tf.cast(x, tf.float32),
)


@keras.saving.register_keras_serializable(package="tntrun")
class PlannedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Evaluates :func:`tntrun.planning.schedules.learning_rate` at the optimizer's step.

    The step is the optimizer's own iteration counter, saved with its state, so
    a restored optimizer continues the schedule instead of restarting it.
    Registered with Keras because Horovod rebuilds the optimizer from its config.
    """

    def __init__(self, params: ScheduleParams) -> None:
        self.params = params
        # A factor on the planned LR: a rollback after a non-finite loss lowers it.
        self.scale = tf.Variable(1.0, trainable=False, dtype=tf.float32, name="tntrun_lr_scale")

    def __call__(self, step):
        return self.scale * learning_rate(step, self.params, TF_OPS)

    def rescale_to(self, lr: float, step) -> None:
        """Scale the plan so that its LR at ``step`` is ``lr`` (a callback set the learning
        rate, e.g. ReduceLROnPlateau): warmup and decay go on from there, scaled."""
        planned = float(learning_rate(step, self.params, TF_OPS))
        if planned <= 0.0:
            raise ValueError(
                f"the schedule's learning rate at step {int(step)} is {planned}: a callback "
                f"cannot set it to {lr}"
            )
        self.scale.assign(lr / planned)

    def get_config(self) -> dict:
        return dataclasses.asdict(self.params)

    @classmethod
    def from_config(cls, config: dict) -> PlannedSchedule:
        return cls(ScheduleParams(**{**config, "boundaries": tuple(config["boundaries"])}))


def learning_rate_of(optimizer) -> tuple:
    """(the optimizer that holds the learning rate, its learning rate or schedule): a loss
    scale optimizer's inner one. Keras' ``learning_rate`` would evaluate the schedule."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return inner, keras_internals.schedule_of(inner)
