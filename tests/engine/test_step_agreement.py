"""The step agreement and the guards that read it, on one rank in-process (Horovod
started as a world of one): the averaged loss of the step, a stop request, bad data,
and the non-finite guard's stop at the step that computed a NaN loss."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.engine.one_rank import X, Y, classifier, fit, horovod_of_one_rank, keras
from tntrun.engine.data_parallel import agree_after_each_step, data_parallel
from tntrun.engine.nonfinite import NonFiniteData, NonFiniteGuard, NonFiniteLoss
from tntrun.engine.step_agreement import StepAgreement


def agreeing_classifier() -> tuple[keras.Model, StepAgreement]:
    """A classifier whose optimizer averages over the (one) rank and carries the agreement."""
    horovod_of_one_rank()
    optimizer = data_parallel(keras.optimizers.SGD(0.1))
    agreement = agree_after_each_step(optimizer)
    return classifier(optimizer), agreement


def test_after_a_step_every_rank_reads_the_steps_loss_and_no_stop():
    model, agreement = agreeing_classifier()
    expected = float(keras.losses.binary_crossentropy(Y, model(X)).numpy().mean())
    fit(model, [agreement], batch_size=len(X))  # one step on every sample
    assert agreement.loss == pytest.approx(expected, rel=1e-5)
    assert (agreement.stop, agreement.bad_data, agreement.user_stop) == (False, False, False)
    assert agreement.read() == (agreement.loss, False)


def test_a_stop_requested_before_a_step_is_read_after_it():
    model, agreement = agreeing_classifier()
    agreement.request_stop()
    fit(model, [agreement], batch_size=len(X))
    assert agreement.stop


def test_the_vector_leaves_the_compiled_step_and_the_logs_stay_keras_own():
    model, agreement = agreeing_classifier()
    seen = []

    class Logs(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(sorted(logs))

    fit(model, [agreement, Logs()], batch_size=8)
    assert seen == [["accuracy", "loss"]] * 2
    assert agreement._from_step is not None  # read from the step's output, not the variable


def test_a_nan_in_the_data_is_bad_data_and_stops_the_first_step():
    model, agreement = agreeing_classifier()
    x = X.copy()
    x[5, 1] = np.nan
    with pytest.raises(NonFiniteData, match="training data hold NaN .* epoch 1, step 0"):
        callbacks = [agreement, NonFiniteGuard(agreement)]
        model.fit(x, Y, batch_size=8, callbacks=callbacks, shuffle=False, verbose=0)
    assert agreement.bad_data


def test_a_nan_loss_stops_at_the_step_that_computed_it():
    model, agreement = agreeing_classifier()

    class PoisonAfterStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:  # the third step's loss is NaN
                weight = self.model.trainable_variables[-1]
                weight.assign(weight * float("nan"))

    callbacks = [agreement, NonFiniteGuard(agreement), PoisonAfterStep()]
    with pytest.raises(NonFiniteLoss) as stopped:
        fit(model, callbacks, epochs=2)
    assert not stopped.value.data and math.isnan(stopped.value.loss)
    assert (stopped.value.epoch, stopped.value.step) == (1, 2)


def test_the_local_vector_is_the_loss_and_this_ranks_flags():
    agreement = StepAgreement()
    agreement.request_stop()
    vector = agreement.local_vector(np.array([1.0, 3.0], "float32")).numpy()
    np.testing.assert_array_equal(vector, [2.0, 1.0, 0.0, 0.0])
    np.testing.assert_array_equal(agreement.local_vector(None).numpy(), [0.0, 1.0, 0.0, 0.0])
