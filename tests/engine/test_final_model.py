"""What rank 0 leaves once trained, in-process with real files: the clean model (the
builder's, with the trained weights; a note instead when Keras cannot serialise it), the
final weights, the MLflow Model folder and its load-back check, and the pieces the check
uses to name a class that does not rebuild from its config."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.engine.one_rank import keras
from tests.helpers.plans import plan_for
from tntrun.contract.run_files import FINAL_MODEL, FINAL_WEIGHTS, MLFLOW_MODEL, MODEL_LOADS
from tntrun.engine import load_check
from tntrun.engine.final_model import save_clean_model, save_final
from tntrun.engine.mlflow_model import example_inputs, requirements, write_mlflow_model
from tntrun.planning.plan import DatasetInfo

INFO = DatasetInfo(num_train=16, num_val=8, input_shape=(3,), num_classes=2)
MLP = {"_target_": "tntrun.models.mlp.build_mlp", "hidden_units": [4], "dropout": 0.0}
X = np.random.default_rng(1).normal(size=(6, 3)).astype("float32")


class NoConfig(keras.Model):
    """A subclassed model Keras cannot serialise (no get_config)."""

    def __init__(self, input_shape, num_classes) -> None:
        super().__init__()
        self.dense = keras.layers.Dense(num_classes)

    def call(self, inputs):
        return self.dense(inputs)


class Scaled(keras.layers.Layer):
    """A layer whose config misses an argument its __init__ needs."""

    def __init__(self, factor, **kwargs) -> None:
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, inputs):
        return inputs * self.factor

    def get_config(self):
        return {"name": self.name}  # without factor: from_config cannot rebuild it


def build_no_config(input_shape, num_classes):
    return NoConfig(input_shape, num_classes)


def trained_mlp():
    from tntrun.config.zoo import build_model

    model = build_model(MLP, INFO)
    model.set_weights([w + 0.5 for w in model.get_weights()])  # not the builder's
    return model


def test_the_clean_model_holds_the_trained_weights_and_loads(tmp_path):
    model = trained_mlp()
    clean = save_clean_model(model, MLP, INFO, tmp_path / FINAL_MODEL)
    loaded = keras.saving.load_model(tmp_path / FINAL_MODEL)
    assert clean is not model and getattr(loaded, "optimizer", None) is None  # uncompiled
    np.testing.assert_allclose(loaded.predict(X, verbose=0), model.predict(X, verbose=0))


def test_a_model_keras_cannot_serialise_leaves_a_note_and_no_file(tmp_path, capsys):
    section = {"_target_": f"{__name__}.build_no_config"}
    model = build_no_config(INFO.input_shape, INFO.num_classes)
    model(X)
    assert save_clean_model(model, section, INFO, tmp_path / FINAL_MODEL) is None
    assert not (tmp_path / FINAL_MODEL).exists()
    assert f"no {FINAL_MODEL}: Keras cannot serialise NoConfig" in capsys.readouterr().out


def test_save_final_writes_the_weights_and_the_model_without_mlflow(compose_cfg, tmp_path):
    plan = plan_for(compose_cfg, "tracking.log_model=false", "model.hidden_units=[4]")
    info = DatasetInfo(num_train=16, num_val=8, input_shape=(64,), num_classes=10)
    from tntrun.config.zoo import build_model

    model = build_model(plan.settings.model, info)
    save_final(model, plan, info, tmp_path, val_batches=None)
    stored = np.load(tmp_path / FINAL_WEIGHTS)
    for ours, theirs in zip(stored.values(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert (tmp_path / FINAL_MODEL).is_file() and not (tmp_path / MLFLOW_MODEL).exists()


def test_the_mlflow_model_folder_loads_back_and_predicts_alike(tmp_path):
    model = trained_mlp()
    assert write_mlflow_model(model, X, tmp_path / MLFLOW_MODEL)
    assert requirements()[0] == f"keras=={keras.__version__}"
    example = example_inputs(X, model)
    assert example.shape == (5, 3)
    assert load_check.check_model_loads(tmp_path / MLFLOW_MODEL, model, example, tmp_path)
    assert json.loads((tmp_path / MODEL_LOADS).read_text())["loads"] is True


def test_the_culprit_is_the_users_class_that_does_not_rebuild():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, Scaled(2.0)(keras.layers.Dense(2)(inputs)))
    assert [type(layer) for layer in load_check.own_layers(model)] == [Scaled]
    cls, why = load_check.culprit(model, RuntimeError("whatever"))
    assert cls == "Scaled" and "factor" in why
    plain = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    error = TypeError("Could not locate class 'mymodels.Block'.\nException encountered: boom")
    assert load_check.culprit(plain, error) == ("mymodels.Block", "boom")


def test_predictions_are_compared_by_shape_then_within_tolerance():
    ones = [np.ones((2, 3))]
    assert load_check.differences(ones, ones) is None
    assert "other shapes" in load_check.differences([np.ones((2, 2))], ones)
    assert "max |difference| 0.5" in load_check.differences([np.ones((2, 3)) * 1.5], ones)
    wrapped = np.empty((), dtype=object)
    wrapped[()] = {"b": np.zeros(1), "a": np.ones(1)}
    assert [a.tolist() for a in load_check.as_arrays(wrapped)] == [[1.0], [0.0]]


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_an_empty_error_is_named_by_its_type(text):
    assert load_check.note_of(ValueError(text)) == "ValueError"
