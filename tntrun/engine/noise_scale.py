"""The gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, "An
Empirical Model of Large-Batch Training", Appendix A), measured in the gradients' own
allreduce: each rank's gradient is an estimate at B_small samples, their average one at
B_big, and the two squared norms give unbiased estimates of |G|^2 and tr(Sigma).

Why here: the averaging optimizer already sends a small agreement vector with the gradients
(:mod:`tntrun.engine.step_agreement`); this rank's squared gradient norm rides in it as one
scalar more, so the measurement needs no collective of its own. The estimates of single
steps are very noisy (|G|^2's can be negative), so numerator and denominator are smoothed
separately, as the paper advises: an exponential moving average over update steps,
bias-corrected, whose state is a checkpoint child (``gradient_noise_scale``) so that a
resumed run, on any layout, continues it. A step is left out of the averages when its
estimates are not finite (an overflow under loss scaling, a NaN the guard handles) or when
any rank's batch held a zero-weight sample (the padding of ``train.drop_remainder=false``:
Keras' loss divides by all samples of the batch, weighted 0 or not, so such a step's
gradients are not means over B_small samples).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

CHECKPOINT_KEY = "gradient_noise_scale"  # the state's child in a run's checkpoint
METRICS = ("gradient_noise_scale", "gns_gradient_sq", "gns_trace")


def unbiased_estimates(small_sq: Any, big_sq: Any, small_batch: float, big_batch: float):
    """(|G|^2, tr(Sigma)) estimated from the squared norms of gradients averaged over
    ``small_batch`` and ``big_batch`` samples (the paper's equations A.2 and A.3); works on
    numbers and tensors alike."""
    gradient_sq = (big_batch * big_sq - small_batch * small_sq) / (big_batch - small_batch)
    trace = (small_sq - big_sq) / (1.0 / small_batch - 1.0 / big_batch)
    return gradient_sq, trace


def squared_norm(gradients: Sequence[Any]) -> tf.Tensor:
    """The squared L2 norm of all ``gradients`` together, in float32 (``None`` skipped; a
    sparse gradient's repeated rows summed first, as its dense form would hold them)."""
    total = tf.zeros([], tf.float32)
    for gradient in gradients:
        if gradient is None:
            continue
        if isinstance(gradient, tf.IndexedSlices):
            rows, position = tf.unique(gradient.indices)
            values = tf.math.unsorted_segment_sum(gradient.values, position, tf.size(rows))
        else:
            values = gradient
        total += tf.reduce_sum(tf.square(tf.cast(values, tf.float32)))
    return total


@dataclasses.dataclass(eq=False)
class _StepState:
    """Per-step values, not checkpointed: the last step's raw estimates and whether this
    rank's batches since the last update held a zero-weight sample."""

    last: tf.Variable
    zero_weight: tf.Variable


class GradientNoiseScale(tf.Module):
    """The smoothed estimates of one run: :meth:`local_vector` goes into the allreduce,
    :meth:`update` takes its rank average and the averaged gradients, :meth:`metrics`
    reads the result. ``small_batch``: samples behind one rank's gradient per update
    (micro-batch x backward passes); ``big_batch``: the global batch."""

    def __init__(self, small_batch: int, big_batch: int, decay: float) -> None:
        super().__init__(name=CHECKPOINT_KEY)
        if not 0 < small_batch < big_batch:
            raise ValueError(f"need 0 < small_batch < big_batch, got {small_batch}, {big_batch}")
        self.small_batch, self.big_batch, self.decay = small_batch, big_batch, decay
        # Decayed sums of the estimates and of the weights (dividing by it: bias correction).
        self.gradient_sq = tf.Variable(0.0, trainable=False, name="gradient_sq")
        self.trace = tf.Variable(0.0, trainable=False, name="trace")
        self.weight = tf.Variable(0.0, trainable=False, name="weight")
        self.steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps")
        self._step = _StepState(
            last=tf.Variable([float("nan")] * 2, trainable=False, name="gns_last"),
            zero_weight=tf.Variable(0.0, trainable=False, name="gns_zero_weight"),
        )

    def check_batch(self, data: Any) -> None:
        """Note whether this rank's training batch holds a zero-weight sample (sticky until
        the next update, as accumulated micro-steps all count)."""
        _, _, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        weights = [w for w in tf.nest.flatten(sample_weight) if w is not None]
        if weights:
            zero = tf.reduce_any([tf.reduce_any(tf.equal(w, 0)) for w in weights])
            flag = tf.maximum(self._step.zero_weight, tf.cast(zero, tf.float32))
            self._step.zero_weight.assign(flag)

    def local_vector(self, gradients: Sequence[Any]) -> tf.Tensor:
        """``[|g|^2]`` of this rank's gradient (NaN when its batch held a zero-weight
        sample, so that the rank average is NaN and the step is left out)."""
        padded = self._step.zero_weight.read_value() > 0
        self._step.zero_weight.assign(0.0)
        value = tf.where(padded, float("nan"), squared_norm(gradients))
        return tf.reshape(value, [1])

    def update(self, small_sq: tf.Tensor, averaged: Sequence[Any]) -> None:
        """One update step: ``small_sq`` the rank average of :meth:`local_vector`,
        ``averaged`` the rank-averaged gradients."""
        small_sq = tf.reshape(small_sq, [])
        gradient_sq, trace = unbiased_estimates(
            small_sq, squared_norm(averaged), self.small_batch, self.big_batch
        )
        self._step.last.assign(tf.stack([gradient_sq, trace]))
        finite = tf.math.logical_and(tf.math.is_finite(gradient_sq), tf.math.is_finite(trace))
        keep = tf.where(finite, self.decay, 1.0)  # a skipped step leaves the averages as they are
        take = tf.where(finite, 1.0 - self.decay, 0.0)
        self.gradient_sq.assign(keep * self.gradient_sq + take * tf.where(finite, gradient_sq, 0.0))
        self.trace.assign(keep * self.trace + take * tf.where(finite, trace, 0.0))
        self.weight.assign(keep * self.weight + take)
        self.steps.assign_add(tf.cast(finite, tf.int64))

    def last_estimates(self) -> tuple[float, float]:
        """The last update's raw (|G|^2, tr(Sigma)) estimates, before smoothing (NaN: left out)."""
        gradient_sq, trace = self._step.last.numpy()
        return float(gradient_sq), float(trace)

    def state_variables(self) -> list[tf.Variable]:
        """What a checkpoint saves and the ranks share after a restore."""
        return [self.gradient_sq, self.trace, self.weight, self.steps]

    def metrics(self) -> dict[str, float]:
        """``gns_gradient_sq``, ``gns_trace`` and ``gradient_noise_scale`` (their ratio, only
        while the |G|^2 average is positive); empty before the first step measured."""
        weight = float(self.weight.numpy())
        if weight <= 0:
            return {}
        gradient_sq = float(self.gradient_sq.numpy()) / weight
        trace = float(self.trace.numpy()) / weight
        found = {"gns_gradient_sq": gradient_sq, "gns_trace": trace}
        if gradient_sq > 0:
            found["gradient_noise_scale"] = trace / gradient_sq
        return found
