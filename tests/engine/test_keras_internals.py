"""Each private Keras name and call order tntrun.engine.keras_internals relies on, against
the installed Keras, in-process: a Keras release that renames one or changes an order fails
here, named, before any two-rank run fails obscurely."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.components import require_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["KERAS_BACKEND"] = "tensorflow"
tf = require_module("tensorflow")
keras = require_module("keras")

from tntrun.engine import keras_internals  # noqa: E402

X = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
Y = (X[:, :1] > 0).astype("float32")


def classifier() -> keras.Model:
    inputs = keras.Input((3,))
    inner = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="inner_dense")])
    hidden = inner(keras.layers.Dense(4, name="outer_dense")(inputs))
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid", name="out")(hidden))


def compiled(optimizer="sgd") -> keras.Model:
    model = classifier()
    model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
    return model


@pytest.fixture(scope="module")
def model() -> keras.Model:
    return compiled()


def test_the_installed_keras_is_the_one_the_internals_were_checked_on():
    installed = keras.__version__.split(".")[:2]
    assert installed == keras_internals.CHECKED_ON.split(".")[:2], (
        f"Keras {keras.__version__}: check every name in tntrun/engine/keras_internals.py "
        f"against it, then set CHECKED_ON (was {keras_internals.CHECKED_ON})"
    )


def test_compiled_step_wraps_a_step_as_keras_train_function(model):
    seen = []

    def step(data):
        seen.append(data)
        return {"sum": tf.reduce_sum(data[0])}

    function = keras_internals.compiled_step(model, step)
    batches = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    logs = function(iter(batches))
    assert seen and float(logs["sum"]) == pytest.approx(float(X[:4].sum()), rel=1e-5)


def test_a_train_function_replaced_in_on_train_begin_runs_every_step_of_fit_and_after():
    model, calls = compiled(), []

    class Replace(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            made = self.model.train_function
            assert made is not None, "fit no longer makes its train function before"

            def counted(iterator):
                calls.append(1)
                return made(iterator)

            keras_internals.replace_train_function(self.model, counted)

    model.fit(X, Y, batch_size=2, epochs=1, verbose=0, callbacks=[Replace()])
    assert len(calls) == 4  # 8 samples, batches of 2: every step ran the replacement
    model.train_on_batch(X[:2], Y[:2])
    assert len(calls) == 5  # train_on_batch keeps the train function that is set


def test_schedule_of_is_the_schedule_object_not_its_value():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    assert keras_internals.schedule_of(keras.optimizers.SGD(schedule)) is schedule
    variable = keras_internals.schedule_of(keras.optimizers.SGD(0.25))
    assert float(variable.numpy()) == pytest.approx(0.25)


def test_the_optimizer_slot_order_and_a_variable_index():
    variables = [keras.Variable(np.zeros(2), name=f"v{i}") for i in range(3)]
    optimizer = keras.optimizers.Adam()
    optimizer.build(variables)
    assert keras_internals.tracked_variables(optimizer) == variables
    assert [keras_internals.variable_index(optimizer, v) for v in variables] == [0, 1, 2]


def test_a_variable_overwritten_with_its_gradient_is_told_apart():
    plain = keras.Variable(np.zeros(2))
    scale = keras.Variable(np.zeros(2))
    scale.overwrite_with_gradient = True
    optimizer = keras.optimizers.SGD()
    assert not keras_internals.overwrites_with_gradient(optimizer, plain)
    assert keras_internals.overwrites_with_gradient(optimizer, scale)


def test_count_step_adds_one_iteration_and_no_update():
    variable = keras.Variable(np.ones(2))
    optimizer = keras.optimizers.SGD(0.5)
    optimizer.build([variable])
    keras_internals.count_step(optimizer)
    assert int(optimizer.iterations.numpy()) == 1
    np.testing.assert_array_equal(variable.numpy(), np.ones(2))


def test_tracing_into_xla_is_told_from_a_plain_function():
    @tf.function(jit_compile=True)
    def compiled_by_xla():
        return tf.constant(keras_internals.tracing_into_xla())

    @tf.function
    def plain():
        return tf.constant(keras_internals.tracing_into_xla())

    assert bool(compiled_by_xla()) and not bool(plain())


def test_compile_arguments_are_the_objects_given():
    loss, optimizer = keras.losses.BinaryCrossentropy(), keras.optimizers.SGD()
    model = classifier()
    assert keras_internals.compile_arguments(model) == {}
    model.compile(optimizer=optimizer, loss=loss, metrics=["accuracy"])
    given = keras_internals.compile_arguments(model)
    assert given["loss"] is loss and given["optimizer"] is optimizer
    assert given["metrics"] == ["accuracy"]


def test_keras_marks_a_sigmoid_output_with_its_logits():
    @tf.function
    def traced(x):
        output = keras.activations.sigmoid(x)
        # The private mark itself: the op-type fallback would hide its loss.
        return tf.constant(
            hasattr(output, "_keras_logits") and keras_internals.made_by_activation(output)
        )

    assert bool(traced(tf.constant(X)))
    assert not keras_internals.made_by_activation(tf.identity(tf.constant(X)))


def test_producing_layer_of_a_functional_output(model):
    assert keras_internals.producing_layer(model.outputs[0]) is model.get_layer("out")
    assert keras_internals.producing_layer(tf.constant(1.0)) is None


def test_batch_norm_takes_its_batch_statistics_from_replaced_moments():
    layer = keras.layers.BatchNormalization(momentum=0.0, epsilon=0.0, center=False, scale=False)
    batch = np.arange(12, dtype="float32").reshape(2, 2, 3)
    layer.build(batch.shape)
    assert keras_internals.reduction_axes(layer) == [0, 1]
    asked = []

    def moments(inputs, mask):
        asked.append(inputs.shape)
        return tf.fill([3], 2.0), tf.fill([3], 4.0)

    keras_internals.replace_moments(layer, moments)
    out = layer(batch, training=True)
    assert asked, "BatchNormalization no longer calls _moments in training"
    np.testing.assert_allclose(out.numpy(), (batch - 2.0) / 2.0, rtol=1e-6)
    np.testing.assert_allclose(layer.moving_mean.numpy(), [2.0] * 3)  # momentum 0: replaced


def test_all_layers_reach_into_nested_models(model):
    names = [layer.name for layer in keras_internals.all_layers(model)]
    assert {"outer_dense", "inner_dense", "out"} <= set(names)
    assert model.name not in names
    assert keras_internals.all_layers(model, include_self=True)[0] is model


def test_build_metrics_builds_the_compiled_metrics_without_a_batch():
    model = compiled()
    before = len(model.metrics_variables)
    spec = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4).element_spec
    keras_internals.build_metrics(model, spec)
    assert {"loss", "compile_metrics"} <= {metric.name for metric in model.metrics}
    assert len(model.metrics_variables) > before  # the accuracy's total and count now exist
    assert model.optimizer.built


def test_the_loss_tracker_holds_the_loss_keras_reports():
    model = compiled()
    logs = model.train_on_batch(X, Y, return_dict=True)
    tracker = keras_internals.loss_tracker(model)
    assert isinstance(tracker, keras.metrics.Mean) and tracker.name == "loss"
    assert float(tracker.result()) == pytest.approx(logs["loss"])


def test_train_step_scales_the_loss_then_updates_through_apply():
    calls = []

    class Recorded(keras.optimizers.SGD):
        def scale_loss(self, loss):
            calls.append("scale_loss")
            return super().scale_loss(loss)

        def apply(self, grads, trainable_variables=None):
            calls.append("apply")
            return super().apply(grads, trainable_variables)

    model = classifier()
    model.compile(optimizer=Recorded(0.1), loss="binary_crossentropy", run_eagerly=True)
    model.train_on_batch(X, Y)
    assert calls == ["scale_loss", "apply"]
