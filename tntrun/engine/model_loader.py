"""MLflow's pyfunc loader of a logged Keras model whose layers are the user's own code.

tntrun copies this file into the MLflow Model's ``code/`` folder (as ``tntrun_model_loader``)
with the user's modules; ``mlflow.pyfunc.load_model`` puts ``code/`` on ``sys.path`` and
calls :func:`_load_pyfunc`. Keras 3 finds a custom class in a saved config only by its
registered name (registered when its module is imported, which Keras never does for a
module outside keras) or in custom objects: this imports the modules the model's config
names, passes their classes and functions by name, then lets MLflow's Keras flavour load
the model. It imports nothing of tntrun: it runs wherever the model is loaded.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterable
from typing import Any

CODE = "code"  # the MLflow Model's folder of code (MLflow's code_paths)
MODULES_FILE = "tntrun_modules.json"  # in CODE: {"modules": [the modules the config names]}


def custom_objects(modules: Iterable[str]) -> dict[str, Any]:
    """The classes and functions defined in ``modules`` (imported), by their name and their
    registered name: what Keras looks a custom object up by."""
    import keras

    found: dict[str, Any] = {}
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if callable(value) and getattr(value, "__module__", None) == module.__name__:
                found[value.__name__] = value
                found[keras.saving.get_registered_name(value)] = value
    return found


def _load_pyfunc(path: str) -> Any:
    """The model at ``path`` (the MLflow Model folder) as MLflow's Keras pyfunc model."""
    import keras
    from mlflow.keras.load import _load_pyfunc as load_keras_pyfunc

    with open(os.path.join(path, CODE, MODULES_FILE)) as listed:
        modules = json.load(listed)["modules"]
    with keras.saving.custom_object_scope(custom_objects(modules)):
        return load_keras_pyfunc(path)
