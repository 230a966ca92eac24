"""The task's metrics per output of a several-output model, and the custom objects the
logged model's loader passes Keras, with real Keras models and modules."""

from __future__ import annotations

from tests.engine.one_rank import keras
from tntrun.engine import lr_schedule
from tntrun.engine.lr_schedule import PlannedSchedule
from tntrun.engine.model_loader import custom_objects
from tntrun.engine.output_metrics import per_output

SPEC = {"loss": "mse", "weighted_metrics": ["mae"]}


def two_outputs(named: bool) -> keras.Model:
    inputs = keras.Input((3,))
    first, second = keras.layers.Dense(1, name="a")(inputs), keras.layers.Dense(2, name="b")(inputs)
    return keras.Model(inputs, {"a": first, "b": second} if named else [first, second])


def test_each_output_gets_the_metrics_by_its_name_and_compiles():
    for named in (True, False):
        model = two_outputs(named)
        spec = per_output(SPEC, model)
        assert spec["weighted_metrics"] == {"a": ["mae"], "b": ["mae"]}
        model.compile(optimizer="sgd", **spec)  # Keras takes it
    assert SPEC["weighted_metrics"] == ["mae"]  # the given spec is left as it was


def test_one_output_or_metric_objects_are_left_as_given():
    single = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    assert per_output(SPEC, single) == SPEC
    objects = {"loss": "mse", "weighted_metrics": [keras.metrics.MeanAbsoluteError()]}
    assert per_output(objects, two_outputs(True)) == objects


def test_custom_objects_are_a_modules_own_classes_and_functions_by_both_names():
    found = custom_objects(["tntrun.engine.lr_schedule"])
    assert found["PlannedSchedule"] is found["tntrun>PlannedSchedule"] is PlannedSchedule
    assert found["learning_rate_of"] is lr_schedule.learning_rate_of
    assert "learning_rate" not in found and "TF_OPS" not in found  # imported; not callable
