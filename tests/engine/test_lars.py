"""tntrun's LARS (tntrun.engine.lars) in-process: its updates against a NumPy writing of You
et al.'s Algorithm 1 on a small model, biases and batch-norm parameters left to plain
momentum SGD, its config round trip, and gradient accumulation under the averaging optimizer
(Horovod as a world of one rank)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.one_rank import X, Y, horovod_of_one_rank, keras, tf
from tntrun.engine.data_parallel import data_parallel
from tntrun.engine.lars import Lars

LR, MOMENTUM, TRUST, DECAY = 0.5, 0.9, 0.02, 1e-3


def small_model(seed: int = 0) -> keras.Model:
    """Dense with bias, batch norm, dense: kernels (adapted) and vectors (excluded)."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, activation="relu", name="hidden")(inputs)
    normed = keras.layers.BatchNormalization(name="norm")(hidden)
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid", name="out")(normed))


def gradients(model: keras.Model, x=X, y=Y) -> list[np.ndarray]:
    with tf.GradientTape() as tape:
        loss = keras.losses.binary_crossentropy(y, model(x, training=True))
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


def reference_step(w, g, v, adapt: bool):
    """Algorithm 1 of You et al. 2017 in NumPy float32: (new weight, new velocity)."""
    lr, m, eta, beta = (np.float32(x) for x in (LR, MOMENTUM, TRUST, DECAY))
    if adapt:
        w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
        local = eta * w_norm / (g_norm + beta * w_norm) if w_norm > 0 and g_norm > 0 else 1.0
        v = m * v + lr * np.float32(local) * (g + beta * w)
    else:
        v = m * v + lr * g
    return w - v, v


def lars(**keys) -> Lars:
    return Lars(LR, momentum=MOMENTUM, trust_coefficient=TRUST, weight_decay=DECAY, **keys)


@pytest.mark.parametrize("exclude", [True, False])
def test_three_steps_equal_the_papers_algorithm_in_numpy(exclude):
    model, optimizer = small_model(), lars(exclude_bias_and_norm=exclude)
    weights = [v.numpy() for v in model.trainable_variables]
    initial = list(weights)
    velocities = [np.zeros_like(w) for w in weights]
    for _ in range(3):
        grads = gradients(model)
        optimizer.apply([tf.constant(g) for g in grads], model.trainable_variables)
        for i, (w, g) in enumerate(zip(weights, grads, strict=True)):
            adapt = not exclude or w.ndim > 1
            weights[i], velocities[i] = reference_step(w, g, velocities[i], adapt)
        for variable, want in zip(model.trainable_variables, weights, strict=True):
            np.testing.assert_allclose(variable.numpy(), want, rtol=2e-6, atol=1e-7)
    moved = [np.abs(w - w0).max() for w, w0 in zip(weights, initial, strict=True)]
    assert min(moved) > 1e-4  # every variable trained: the comparison has work


def test_biases_and_batch_norm_move_by_plain_sgd_and_kernels_by_the_trust_ratio():
    model = small_model()
    before = {v.path: v.numpy() for v in model.trainable_variables}
    grads = gradients(model)
    lars().apply([tf.constant(g) for g in grads], model.trainable_variables)
    for variable, g in zip(model.trainable_variables, grads, strict=True):
        step = before[variable.path] - variable.numpy()
        if variable.path.endswith(("bias", "gamma", "beta")):
            np.testing.assert_allclose(step, LR * g, rtol=1e-6, atol=1e-9)
        else:  # a kernel: scaled by its trust ratio, far from the plain SGD step
            assert not np.allclose(step, LR * g, rtol=1e-2), variable.path
    assert {"norm/gamma", "norm/beta", "hidden/bias", "hidden/kernel"} <= set(before)


def test_the_config_round_trips_and_names_the_registered_class():
    optimizer = lars(exclude_bias_and_norm=False, epsilon=1e-9)
    config = optimizer.get_config()
    assert config["weight_decay"] == DECAY and config["trust_coefficient"] == TRUST
    again = Lars.from_config(config)
    assert again.get_config() == config
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is Lars and restored.get_config() == config


def test_two_accumulated_micro_steps_make_one_step_on_their_mean_gradient():
    horovod_of_one_rank()
    accumulating, plain = small_model(), small_model()
    optimizer = data_parallel(lars(), backward_passes_per_step=2)
    halves = [(X[:8], Y[:8]), (X[8:], Y[8:])]
    for x, y in halves:
        grads = gradients(accumulating, x, y)
        optimizer.apply([tf.constant(g) for g in grads], accumulating.trainable_variables)
    mean = [(a + b) / 2 for a, b in zip(*(gradients(plain, x, y) for x, y in halves), strict=True)]
    lars().apply([tf.constant(g) for g in mean], plain.trainable_variables)
    for ours, want in zip(accumulating.trainable_variables, plain.trainable_variables, strict=True):
        np.testing.assert_allclose(ours.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
    assert int(optimizer.iterations) == 2
