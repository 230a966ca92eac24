"""What a model builder returned, checked on the ranks before the first step (in-process:
the check alone, without ranks): anything but a Keras 3 ``keras.Model`` is one line."""

from __future__ import annotations

import keras
import pytest

from tntrun.engine.model_set import UserModelError, require_model

SECTION = {"_target_": "mymodels.build"}


@pytest.mark.parametrize(
    ("returned", "says"),
    [
        (None, "returned None, not a keras.Model"),
        ("a model", "returned a str ('a model'), not a keras.Model"),
        (keras.layers.Dense(2), "returned a Dense ('<Dense name=dense"),
    ],
)
def test_a_builder_that_returns_no_model_is_one_line(returned, says):
    with pytest.raises(UserModelError) as refused:
        require_model(returned, SECTION)
    line = str(refused.value)
    assert line.startswith("model._target_=mymodels.build ") and says in line, line
    assert line.endswith("return the model it builds (e.g. return keras.Sequential([...]))")
    assert "\n" not in line


def test_a_keras_model_passes():
    require_model(keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(2)]), SECTION)
