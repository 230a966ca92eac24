"""LARS (You, Gitman & Ginsburg 2017, "Large Batch Training of Convolutional Networks"): SGD
with momentum whose step for each layer is scaled by a trust ratio, as a Keras 3 optimizer.

Keras 3 has no LARS, and large-batch SGD recipes (past the ~8k global batch the linear LR
rule holds for) need it. Each variable is a layer: its local LR is
``trust_coefficient * |w| / (|g| + weight_decay * |w| + epsilon)``, so a layer's step no
longer depends on the scale of its gradient. Biases and normalisation scales and offsets
(variables of rank 0 or 1) are usually left out of both the adaptation and the decay
(``exclude_bias_and_norm``): they train by plain momentum SGD.
"""

from __future__ import annotations

import keras
from keras import ops

from tntrun.engine import keras_internals


@keras.saving.register_keras_serializable(package="tntrun")
class Lars(keras.optimizers.Optimizer):
    """Algorithm 1 of You et al. 2017: for each variable ``w`` with gradient ``g``,
    ``v = momentum * v + lr * local_lr * (g + weight_decay * w)`` and ``w = w - v``.

    ``weight_decay`` is LARS' own (inside the trust ratio and the step), not Keras'
    decoupled decay, which this class leaves off."""

    def __init__(
        self,
        learning_rate=0.01,
        momentum=0.9,
        trust_coefficient=0.001,
        epsilon=0.0,
        exclude_bias_and_norm=True,
        weight_decay=0.0,
        clipnorm=None,
        clipvalue=None,
        global_clipnorm=None,
        use_ema=False,
        ema_momentum=0.99,
        ema_overwrite_frequency=None,
        name="lars",
        **kwargs,
    ):
        super().__init__(
            learning_rate=learning_rate,
            name=name,
            weight_decay=None,
            clipnorm=clipnorm,
            clipvalue=clipvalue,
            global_clipnorm=global_clipnorm,
            use_ema=use_ema,
            ema_momentum=ema_momentum,
            ema_overwrite_frequency=ema_overwrite_frequency,
            **kwargs,
        )
        if not 0.0 <= float(momentum) <= 1.0:
            raise ValueError(f"Lars: momentum={momentum} must be in [0, 1]")
        self.momentum = float(momentum)
        self.trust_coefficient = float(trust_coefficient)
        self.epsilon = float(epsilon)
        self.exclude_bias_and_norm = bool(exclude_bias_and_norm)
        self.lars_weight_decay = float(weight_decay or 0.0)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.velocities = self.add_optimizer_variables(variables, "velocity")

    def adapts(self, variable) -> bool:
        """Whether ``variable`` gets the trust ratio and the decay (not a bias or a norm's
        scale or offset, when those are excluded)."""
        return not (self.exclude_bias_and_norm and len(variable.shape) <= 1)

    def local_learning_rate(self, gradient, variable):
        """The trust ratio of ``variable``: 1 where either norm is 0 (a fresh zero layer,
        a layer without gradient), so such a layer still moves by the global LR."""
        weight_norm = ops.sqrt(ops.sum(ops.square(variable)))
        grad_norm = ops.sqrt(ops.sum(ops.square(gradient)))
        decay = ops.cast(self.lars_weight_decay, variable.dtype)
        ratio = ops.divide(
            ops.multiply(ops.cast(self.trust_coefficient, variable.dtype), weight_norm),
            grad_norm + decay * weight_norm + ops.cast(self.epsilon, variable.dtype),
        )
        both = ops.logical_and(ops.greater(weight_norm, 0.0), ops.greater(grad_norm, 0.0))
        return ops.where(both, ratio, ops.ones_like(ratio))

    def update_step(self, gradient, variable, learning_rate):
        learning_rate = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        step = ops.multiply(gradient, learning_rate)
        if self.adapts(variable):
            local = self.local_learning_rate(gradient, variable)
            decayed = gradient + ops.cast(self.lars_weight_decay, variable.dtype) * variable
            step = ops.multiply(decayed, learning_rate * local)
        velocity = self.velocities[keras_internals.variable_index(self, variable)]
        momentum = ops.cast(self.momentum, variable.dtype)
        self.assign(velocity, ops.add(ops.multiply(velocity, momentum), step))
        self.assign_sub(variable, velocity)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "momentum": self.momentum,
                "trust_coefficient": self.trust_coefficient,
                "epsilon": self.epsilon,
                "exclude_bias_and_norm": self.exclude_bias_and_norm,
                "weight_decay": self.lars_weight_decay,
            }
        )
        return config
