"""The step agreement: what every rank must decide alike after each training step (the
rank-averaged loss, a stop request, bad data, a callback's stop), carried in the
gradients' own allreduce rather than a collective of its own (see
:mod:`tntrun.engine.data_parallel`, which adds its vector to the allreduce)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from tntrun.engine import keras_internals

_AGREEMENT_LOG = "_tntrun_step_agreement"  # the agreement's entry in the compiled step's logs
_AGREEMENT_MARK = "_tntrun_step_agreement"  # on a train function made by an agreement


class StepAgreement(keras.callbacks.Callback):
    """The last update's rank-averaged loss and stop request, the same on every rank, and
    whether any rank's training batch held NaN or infinite values.

    As a callback placed before the guards that use it, it reads them after each training
    step into :attr:`loss`, :attr:`stop` and :attr:`bad_data`. Under
    ``backward_passes_per_step`` > 1 they are refreshed on update steps (the loss is then the
    mean over the micro-steps). The data check is there because a NaN input can leave the
    loss finite (a ReLU maps it to 0) while its gradient poisons the weights.

    In ``fit`` the vector leaves the compiled step as one more output: reading the variable
    after the step is an eager op, which cost about 0.25 ms of a 4 ms step (py-spy, 2 ranks).
    Outside ``fit`` (``train_on_batch`` of a model never fitted, a loop of one's own)
    :meth:`read` reads the variable.
    """

    def __init__(self) -> None:
        super().__init__()
        self.local_stop = tf.Variable(0.0, trainable=False, name="tntrun_local_stop")
        # Sticky: a bad batch in a micro-step without an update is still reported.
        self.local_bad_data = tf.Variable(0.0, trainable=False, name="tntrun_local_bad_data")
        # A callback of this rank set stop_training inside an epoch (stop_agreement.StopAgreement).
        self.local_user_stop = tf.Variable(0.0, trainable=False, name="tntrun_local_user_stop")
        self.averaged = tf.Variable([0.0] * 4, trainable=False, name="tntrun_step_agreement")
        self.loss, self.stop, self.bad_data, self.user_stop = 0.0, False, False, False
        self._from_step: tf.Tensor | None = None  # the output of the last step run by fit
        # More checks of each training batch inside the step (the noise scale's padding check).
        self.batch_checks: list[Callable[[Any], None]] = []

    def request_stop(self) -> None:
        """This rank asks to stop; the ranks learn it together at the next update."""
        self.local_stop.assign(1.0)

    def read(self) -> tuple[float, bool]:
        """(rank-averaged loss, whether any rank asked to stop); also sets :attr:`bad_data`."""
        source = self.averaged if self._from_step is None else self._from_step
        loss, stop, bad_data, user_stop = source.numpy()
        self.loss, self.stop, self.bad_data = float(loss), bool(stop > 0), bool(bad_data > 0)
        self.user_stop = bool(user_stop > 0)
        return self.loss, self.stop

    def check_batch(self, data: Any) -> None:
        """Note whether this rank's batch (its floating-point tensors) is finite."""
        floats = [
            t for t in tf.nest.flatten(data) if isinstance(t, tf.Tensor) and t.dtype.is_floating
        ]
        if floats:
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in floats])
            bad = 1.0 - tf.cast(finite, tf.float32)
            self.local_bad_data.assign(tf.maximum(self.local_bad_data, bad))

    def on_train_begin(self, logs=None):
        self._from_step = None
        self.local_user_stop.assign(0.0)  # a new fit (after a rollback) starts undecided
        if getattr(self.model.train_function, _AGREEMENT_MARK, None) is not self:
            # Keras' fit has made its train function and runs whichever is set from here on.
            keras_internals.replace_train_function(self.model, self._train_function(self.model))

    def on_train_batch_end(self, batch, logs=None):
        self.read()

    def _train_function(self, model: Any) -> Any:
        """Keras' train function for ``model``'s own ``train_step``, which also returns the
        agreement vector; it takes the vector out of the logs, so that Keras and the other
        callbacks see the step's logs unchanged."""
        step = model.train_step

        def step_with_agreement(data):
            self.check_batch(data)
            for check in self.batch_checks:
                check(data)
            logs = step(data)
            if isinstance(logs, dict):  # read after the update: automatic control dependencies
                logs = {**logs, _AGREEMENT_LOG: self.averaged.read_value()}
            return logs

        compiled = keras_internals.compiled_step(model, step_with_agreement)

        def train_function(iterator):
            logs = compiled(iterator)
            if isinstance(logs, dict):
                self._from_step = logs.pop(_AGREEMENT_LOG, None)
            return logs

        setattr(train_function, _AGREEMENT_MARK, self)
        return train_function

    def local_vector(self, loss: tf.Tensor | None) -> tf.Tensor:
        """``[loss, local_stop, local_bad_data, local_user_stop]`` of this rank (loss 0 when
        none was noted)."""
        value = tf.zeros([]) if loss is None else tf.reduce_mean(tf.cast(loss, tf.float32))
        flags = (self.local_stop, self.local_bad_data, self.local_user_stop)
        return tf.stack([value, *(flag.read_value() for flag in flags)])
