"""Loss and metric for sequence logits whose padding positions (label id 0) do not count.

Both work in ``model.compile``::

    model.compile(optimizer, loss=masked_sparse_crossentropy(0.1),
                  metrics=[masked_token_accuracy()])

The loss is the mean over the real target tokens of the batch (not over
sentences); sample weights (for example the engine's zero-weight padding
sentences) weight each sentence's tokens. TensorFlow is imported on first use.
"""

from __future__ import annotations

import functools

PAD_ID = 0


def masked_sparse_crossentropy(label_smoothing: float = 0.1, name: str = "masked_crossentropy"):
    """Cross-entropy of logits (batch, length, vocab) against ids (batch, length), padding ignored.

    With smoothing ``e`` the target distribution is ``(1 - e) * one_hot + e / vocab``.
    """
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing}: choose a value in [0, 1)")
    return _loss_class()(label_smoothing=label_smoothing, name=name)


def masked_token_accuracy(name: str = "masked_token_accuracy"):
    """Share of real (non-padding) target tokens whose arg-max logit is the label."""
    return _metric_class()(name=name)


def token_weights(labels, sample_weight):
    """1 for each real target token, 0 for padding, times its sentence's sample weight."""
    import tensorflow as tf

    weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
    if sample_weight is not None:
        sample_weight = tf.cast(sample_weight, tf.float32)
        weights *= tf.reshape(sample_weight, [-1, *[1] * (labels.shape.rank - 1)])
    return weights


@functools.cache
def _loss_class() -> type:
    """The loss class, defined once, at first use (it subclasses Keras')."""
    import keras
    import tensorflow as tf

    class MaskedSparseCrossentropy(keras.losses.Loss):
        def __init__(self, label_smoothing: float = 0.1, name: str = "masked_crossentropy"):
            super().__init__(name=name)
            self.label_smoothing = label_smoothing

        def call(self, y_true, y_pred):
            """Per-token smoothed cross-entropy (batch, length)."""
            labels = tf.cast(y_true, tf.int32)
            logits = tf.cast(y_pred, tf.float32)
            loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            if self.label_smoothing:
                uniform = -tf.reduce_mean(tf.nn.log_softmax(logits), axis=-1)
                loss = (1.0 - self.label_smoothing) * loss + self.label_smoothing * uniform
            return loss

        def __call__(self, y_true, y_pred, sample_weight=None):
            with tf.name_scope(self.name):
                weights = token_weights(tf.cast(y_true, tf.int32), sample_weight)
                total = tf.reduce_sum(self.call(y_true, y_pred) * weights)
                return tf.math.divide_no_nan(total, tf.reduce_sum(weights))

        def get_config(self):
            return {"label_smoothing": self.label_smoothing, "name": self.name}

    return MaskedSparseCrossentropy


@functools.cache
def _metric_class() -> type:
    """The metric class, defined once, at first use (it subclasses Keras')."""
    import keras
    import tensorflow as tf

    class MaskedTokenAccuracy(keras.metrics.Metric):
        def __init__(self, name: str = "masked_token_accuracy", **kwargs):
            super().__init__(name=name, **kwargs)
            self.correct = self.add_weight(name="correct", initializer="zeros")
            self.count = self.add_weight(name="count", initializer="zeros")

        def update_state(self, y_true, y_pred, sample_weight=None):
            labels = tf.cast(y_true, tf.int32)
            weights = token_weights(labels, sample_weight)
            hits = tf.cast(
                tf.equal(tf.argmax(y_pred, -1, output_type=tf.int32), labels), tf.float32
            )
            self.correct.assign_add(tf.reduce_sum(hits * weights))
            self.count.assign_add(tf.reduce_sum(weights))

        def result(self):
            return tf.math.divide_no_nan(self.correct, self.count)

        def reset_state(self):
            self.correct.assign(0.0)
            self.count.assign(0.0)

    return MaskedTokenAccuracy
