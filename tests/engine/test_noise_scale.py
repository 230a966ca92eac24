"""The gradient noise scale's maths and state, in-process (Horovod as a world of one rank,
whose allreduce returns this rank's own values; tests/engine/test_noise_scale_ranks.py
measures it on real ranks)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.engine.one_rank import X, Y, classifier, fit, horovod_of_one_rank, keras, tf
from tests.helpers.plans import plan_for
from tntrun.engine.averaging_optimizer import noise_scale_of
from tntrun.engine.data_parallel import (
    agree_after_each_step,
    broadcast_state,
    data_parallel,
    measure_gradient_noise,
)
from tntrun.engine.model_set import measure_noise_scale
from tntrun.engine.noise_scale import GradientNoiseScale, squared_norm, unbiased_estimates
from tntrun.engine.precision import read_checkpoint, state_checkpoint


def test_the_estimates_of_the_expected_norms_are_the_true_values():
    # E|G_B|^2 = |G|^2 + tr(Sigma) / B for a mean of B independent samples.
    gradient_sq, trace, small, big = 3.0, 40.0, 8, 32
    small_sq, big_sq = gradient_sq + trace / small, gradient_sq + trace / big
    assert unbiased_estimates(small_sq, big_sq, small, big) == pytest.approx((3.0, 40.0))


def test_one_steps_estimates_can_be_negative_and_are_left_for_the_average():
    gradient_sq, trace = unbiased_estimates(5.0, 4.0, 8, 16)
    assert gradient_sq == pytest.approx(3.0) and trace == pytest.approx(16.0)
    gradient_sq, _ = unbiased_estimates(5.0, 2.0, 8, 16)
    assert gradient_sq < 0  # the average over steps makes sense of it, not one step


def test_the_squared_norm_sums_a_sparse_gradients_repeated_rows_first():
    dense = tf.constant([[1.0, 2.0], [0.0, 3.0]])
    sparse = tf.IndexedSlices(tf.constant([[1.0, 1.0], [2.0, 0.0]]), tf.constant([1, 1]), [4, 2])
    # The sparse one is [[0,0],[3,1],[0,0],[0,0]] densely: 10, not 1+1+4 = 6.
    assert float(squared_norm([dense, None, sparse])) == pytest.approx(14.0 + 10.0)
    half = tf.constant([3.0, 4.0], tf.float16)
    assert squared_norm([half]).dtype == tf.float32 and float(squared_norm([half])) == 25.0


def test_the_average_is_bias_corrected_and_skips_steps_that_are_not_finite():
    noise = GradientNoiseScale(small_batch=8, big_batch=16, decay=0.9)
    assert noise.metrics() == {}  # nothing measured yet: no metric
    noise.update(tf.constant([5.0]), [tf.constant([2.0])])  # |G_small|^2 5, |G_big|^2 4
    assert noise.metrics() == pytest.approx(
        {"gns_gradient_sq": 3.0, "gns_trace": 16.0, "gradient_noise_scale": 16.0 / 3.0}
    )
    noise.update(tf.constant([float("nan")]), [tf.constant([2.0])])  # a padded or bad step
    assert noise.last_estimates()[0] != noise.last_estimates()[0]  # NaN: left out
    assert int(noise.steps.numpy()) == 1 and noise.metrics()["gns_trace"] == pytest.approx(16.0)
    noise.update(tf.constant([8.0]), [tf.constant([2.0])])  # 0.0 and 64.0
    # Weights 0.1 * 0.9 and 0.1 over their sum 0.19.
    expected_trace = (0.09 * 16.0 + 0.1 * 64.0) / 0.19
    assert noise.metrics()["gns_trace"] == pytest.approx(expected_trace)
    assert noise.metrics()["gns_gradient_sq"] == pytest.approx(0.09 * 3.0 / 0.19)
    assert int(noise.steps.numpy()) == 2


def test_a_negative_gradient_average_gives_no_noise_scale():
    noise = GradientNoiseScale(small_batch=8, big_batch=16, decay=0.5)
    noise.update(tf.constant([5.0]), [tf.constant([math.sqrt(2.0)])])
    assert set(noise.metrics()) == {"gns_gradient_sq", "gns_trace"}


def test_the_layout_must_have_a_bigger_global_batch():
    with pytest.raises(ValueError, match="small_batch < big_batch"):
        GradientNoiseScale(small_batch=16, big_batch=16, decay=0.9)


def measuring_classifier(decay: float = 0.0):
    """A classifier whose one rank pretends to hold half of a global batch of 2x its own:
    its average is then its own gradient, so |G|^2 = |g|^2 and tr(Sigma) = 0 exactly."""
    horovod_of_one_rank()
    optimizer = data_parallel(keras.optimizers.SGD(0.0))
    agreement = agree_after_each_step(optimizer)
    noise = measure_gradient_noise(optimizer, small_batch=16, big_batch=32, decay=decay)
    return classifier(optimizer), agreement, noise


def test_the_optimizer_measures_the_norm_of_the_gradient_it_averages():
    model, agreement, noise = measuring_classifier()
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(keras.losses.binary_crossentropy(Y, model(X)))
    expected = float(squared_norm(tape.gradient(loss, model.trainable_variables)))
    fit(model, [agreement], batch_size=len(X))  # one step, learning rate 0
    gradient_sq, trace = noise.last_estimates()
    assert gradient_sq == pytest.approx(expected, rel=1e-4)
    assert trace == pytest.approx(0.0, abs=1e-4 * expected)
    assert noise.metrics()["gns_gradient_sq"] == pytest.approx(expected, rel=1e-4)


def test_a_batch_with_a_zero_weight_sample_is_left_out():
    model, agreement, noise = measuring_classifier()
    weights = np.ones(len(X), "float32")
    fit(model, [agreement], batch_size=len(X), sample_weight=weights)
    assert int(noise.steps.numpy()) == 1
    weights[-1] = 0.0  # the padding of drop_remainder=false
    model.train_on_batch(X, Y, sample_weight=weights)
    assert int(noise.steps.numpy()) == 1 and math.isnan(noise.last_estimates()[1])
    model.train_on_batch(X, Y, sample_weight=np.ones(len(X), "float32"))  # the flag resets
    assert int(noise.steps.numpy()) == 2


def test_accumulated_micro_steps_are_measured_once_per_update():
    horovod_of_one_rank()
    optimizer = data_parallel(keras.optimizers.SGD(0.0), backward_passes_per_step=2)
    agreement = agree_after_each_step(optimizer)
    noise = measure_gradient_noise(optimizer, small_batch=16, big_batch=32, decay=0.5)
    model = classifier(optimizer)
    fit(model, [agreement], batch_size=4)  # 4 micro-steps: 2 updates
    assert int(noise.steps.numpy()) == 2


def test_the_checkpoint_keeps_the_averages_and_an_older_one_leaves_them_at_start(tmp_path):
    model, agreement, noise = measuring_classifier(decay=0.9)
    fit(model, [agreement], batch_size=4)
    saved = [v.numpy() for v in noise.state_variables()]
    assert saved[-1] == 4  # steps measured
    prefix = state_checkpoint(model, model.optimizer).write(str(tmp_path / "with" / "state"))
    plain = classifier(data_parallel(keras.optimizers.SGD(0.0)))
    plain.optimizer.build(plain.trainable_variables)
    older = state_checkpoint(plain, plain.optimizer).write(str(tmp_path / "older" / "state"))

    restored, _, again = measuring_classifier(decay=0.9)
    restored.optimizer.build(restored.trainable_variables)
    read_checkpoint(restored, restored.optimizer, prefix)
    broadcast_state(restored, restored.optimizer)
    assert [v.numpy() for v in again.state_variables()] == saved
    fresh, _, untouched = measuring_classifier(decay=0.9)
    fresh.optimizer.build(fresh.trainable_variables)
    read_checkpoint(fresh, fresh.optimizer, older)
    assert untouched.metrics() == {} and int(untouched.steps.numpy()) == 0


def test_under_loss_scaling_the_norm_is_of_the_unscaled_gradient():
    horovod_of_one_rank()
    scaled = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.0))
    optimizer = data_parallel(scaled)
    agreement = agree_after_each_step(optimizer)
    noise = measure_gradient_noise(optimizer, small_batch=16, big_batch=32, decay=0.0)
    model = classifier(optimizer)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(keras.losses.binary_crossentropy(Y, model(X)))
    expected = float(squared_norm(tape.gradient(loss, model.trainable_variables)))
    fit(model, [agreement], batch_size=len(X))
    assert float(optimizer.dynamic_scale.numpy()) > 1000  # the loss was scaled ...
    assert noise.last_estimates()[0] == pytest.approx(expected, rel=1e-3)  # ... the norm not


def test_a_plan_of_two_ranks_measures_and_one_of_one_rank_says_why_not(compose_cfg, capsys):
    horovod_of_one_rank()
    two = plan_for(compose_cfg, "ranks_per_node=2", "global_batch_size=64")
    optimizer = data_parallel(keras.optimizers.SGD(0.0), backward_passes_per_step=1)
    measure_noise_scale(optimizer, two)
    noise = noise_scale_of(optimizer)
    assert (noise.small_batch, noise.big_batch, noise.decay) == (32, 64, 0.95)
    one = plan_for(compose_cfg, "ranks_per_node=1")
    optimizer = data_parallel(keras.optimizers.SGD(0.0))
    measure_noise_scale(optimizer, one)
    assert noise_scale_of(optimizer) is None
    assert "gradient noise scale: not measured with 1 rank" in capsys.readouterr().out
    off = plan_for(compose_cfg, "ranks_per_node=2", "train.gradient_noise_scale=false")
    optimizer = data_parallel(keras.optimizers.SGD(0.0))
    measure_noise_scale(optimizer, off)
    assert noise_scale_of(optimizer) is None and capsys.readouterr().out == ""


def test_a_sparse_gradient_is_measured_as_its_dense_form():
    horovod_of_one_rank()
    optimizer = data_parallel(keras.optimizers.SGD(0.0))
    agreement = agree_after_each_step(optimizer)
    noise = measure_gradient_noise(optimizer, small_batch=8, big_batch=16, decay=0.0)
    model = keras.Sequential(
        [keras.Input((3,), dtype="int32"), keras.layers.Embedding(10, 4), keras.layers.Flatten()]
    )
    model.add(keras.layers.Dense(1))
    model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
    tokens = np.array([[1, 1, 2]] * 4 + [[3, 1, 2]] * 4, "int32")  # repeated rows
    target = np.ones((8, 1), "float32")
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(tokens) - target))
    gradients = tape.gradient(loss, model.trainable_variables)
    assert any(isinstance(g, tf.IndexedSlices) for g in gradients)  # the path under test
    expected = sum(float(tf.reduce_sum(tf.square(tf.convert_to_tensor(g)))) for g in gradients)
    model.fit(tokens, target, batch_size=8, callbacks=[agreement], shuffle=False, verbose=0)
    assert noise.last_estimates()[0] == pytest.approx(expected, rel=1e-4)
