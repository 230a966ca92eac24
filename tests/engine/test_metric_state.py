"""The pure parts of exact metrics and one model on every rank, in-process: which variables
are summed or averaged, the float64 vector, the refusal of a state that cannot be summed,
and the BatchNormalization layers that sync_batch_norm changes (real Keras, no ranks)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.components import require_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["KERAS_BACKEND"] = "tensorflow"
require_module("tensorflow")
keras = require_module("keras")

from tntrun.engine.metric_state import (  # noqa: E402
    UnsummableMetric,
    pack,
    scalar_results,
    state_variables,
    unpack_into,
)
from tntrun.engine.model_average import averaged_weights, synced_weights  # noqa: E402
from tntrun.engine.sync_batch_norm import synchronise_batch_norm  # noqa: E402


def bn_classifier(dropout: bool = False) -> keras.Model:
    inputs = keras.Input((4,))
    hidden = keras.layers.BatchNormalization()(keras.layers.Dense(3)(inputs))
    if dropout:
        hidden = keras.layers.Dropout(0.5, seed=1)(hidden)
    inner = keras.Sequential([keras.Input((3,)), keras.layers.BatchNormalization()])
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(inner(hidden)))


def evaluated(model: keras.Model) -> keras.Model:
    """``model`` compiled with state metrics and evaluated once (its metrics built)."""
    model.compile(
        optimizer="sgd",
        loss="binary_crossentropy",
        metrics=[keras.metrics.AUC(num_thresholds=7), keras.metrics.Precision()],
    )
    x = np.random.default_rng(0).normal(size=(10, 4)).astype("float32")
    model.evaluate(x, (x[:, :1] > 0).astype("float32"), verbose=0)
    return model


def test_state_variables_are_the_loss_trackers_and_every_compiled_metrics_in_order():
    model = evaluated(bn_classifier())
    variables = state_variables(model)
    names = [v.path.split("/")[0] for v in variables]
    assert names[:2] == ["loss", "loss"]  # the loss tracker's total and count first
    sizes = [int(np.prod(v.shape)) for v in variables]
    # loss: total, count; AUC: 4 x 7 thresholds; Precision: true and false positives
    assert sizes == [1, 1, 7, 7, 7, 7, 1, 1]
    assert len({id(v) for v in variables}) == len(variables)


def test_pack_and_unpack_round_trip_through_one_float64_vector():
    model = evaluated(bn_classifier())
    variables = state_variables(model)
    before = [np.array(v.numpy()) for v in variables]
    vector = pack(variables)
    assert vector.dtype == np.float64 and vector.size == 32
    unpack_into(variables, 2 * vector)  # what two equal ranks would sum
    for variable, old in zip(variables, before, strict=True):
        np.testing.assert_array_equal(variable.numpy(), 2 * old)
    with pytest.raises(ValueError, match="33 state values for variables of 32"):
        unpack_into(variables, np.zeros(33))


def test_integer_state_is_assigned_back_as_integers():
    counter = keras.Variable(np.array([3, 4], "int64"), trainable=False)
    unpack_into([counter], np.array([7.0, 9.0]))
    assert counter.numpy().tolist() == [7, 9] and str(counter.dtype) == "int64"


class Labels(keras.metrics.Metric):
    """A metric whose state is a boolean: it cannot be summed."""

    def __init__(self, name="labels_seen"):
        super().__init__(name=name)
        self.seen = self.add_variable(shape=(), initializer="zeros", dtype="bool", name="seen")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.seen.assign(True)

    def result(self):
        return keras.ops.cast(self.seen, "float32")


def test_a_metric_whose_state_cannot_be_summed_is_refused_in_one_line():
    model = bn_classifier()
    model.compile(optimizer="sgd", loss="binary_crossentropy", metrics=[Labels()])
    model.evaluate(np.zeros((2, 4), "float32"), np.zeros((2, 1), "float32"), verbose=0)
    with pytest.raises(UnsummableMetric) as refused:
        state_variables(model)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("metric 'labels_seen': its state variable 'seen' of dtype bool")


def test_a_vector_result_is_logged_one_number_per_element():
    results = {"loss": np.float32(0.5), "f1": np.array([0.25, 0.75])}
    assert scalar_results(results) == {"loss": 0.5, "f1_0": 0.25, "f1_1": 0.75}


def test_averaged_weights_are_the_moving_statistics_not_seeds_or_trainable_weights():
    model = bn_classifier(dropout=True)
    averaged = averaged_weights(model)
    assert sorted(v.name for v in averaged) == ["moving_mean"] * 2 + ["moving_variance"] * 2
    assert all(not v.trainable for v in averaged)
    synced = synced_weights(model)
    assert len(synced) == len(model.trainable_weights) + 4
    assert all("seed" not in v.path for v in synced)


def test_sync_batch_norm_replaces_the_statistics_of_every_batch_norm_nested_too():
    model = bn_classifier()
    layers = [layer for layer in model._flatten_layers() if "batch_norm" in layer.name]
    assert synchronise_batch_norm(model) == 2 == len(layers)
    assert all("_moments" in vars(layer) for layer in layers)  # the instance's own
    # Inference (no allreduce: the moving statistics) runs eagerly and traced alike; the
    # two may round differently in the last bit.
    x = np.ones((2, 4), "float32")
    np.testing.assert_allclose(model(x, training=False), model.predict(x, verbose=0), atol=1e-6)
