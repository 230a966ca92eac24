"""The scaling profile's step clock: wall-time cycles from one step's begin to the next's."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.components import require_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require_module("tensorflow")
keras = require_module("keras")
require_module("horovod.tensorflow")

from tntrun.engine.scaling_profile import _StepClock  # noqa: E402


def test_cycles_span_the_steps_and_include_the_gaps_between_them():
    clock = _StepClock()
    clock.begins, clock.ends = [0.0, 1.5, 4.0], [1.0, 3.0, 4.5]
    np.testing.assert_allclose(clock.cycles(), [1.5, 2.5, 0.5])  # next begin; the last: its end


def test_a_real_fit_is_timed_step_by_step():
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(3,))])
    model.compile(optimizer="sgd", loss="mse")
    data = tf.data.Dataset.from_tensors((tf.ones([4, 3]), tf.ones([4, 1]))).repeat(7)
    clock = _StepClock()
    model.fit(data, epochs=1, callbacks=[clock], verbose=0)
    assert len(clock.begins) == len(clock.ends) == 7
    steps = np.asarray(clock.ends) - np.asarray(clock.begins)
    assert (steps > 0).all() and (clock.cycles() >= steps).all()
    assert clock.cycles().sum() == pytest.approx(clock.ends[-1] - clock.begins[0])
