"""Rank 0 loads its MLflow Model folder back, as a fresh process would, and compares.

A model that saves may still not load: a custom layer without ``get_config``/``**kwargs``
saves a config its ``__init__`` refuses, and nothing says so until someone loads it. Rank 0
loads the folder it just wrote through ``mlflow.pyfunc.load_model`` (the folder's own
loader), predicts the input example and compares with the trained model. The outcome goes
to :data:`~tntrun.contract.run_files.MODEL_LOADS` (the driver tags the run) and, when the
model does not load, one console line naming the class and the fix. It runs in rank 0's
process, where the user's modules are imported already: what it proves is that the saved
config rebuilds the model from the shipped code, not that every import resolves elsewhere.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import keras
import numpy as np

from tntrun.contract.run_files import MODEL_LOADS
from tntrun.engine import keras_internals
from tntrun.engine.model_code import KERAS_PACKAGES

RTOL = ATOL = 1e-5  # the loaded model's predictions agree with the trained one's within
FIX = (
    "register {cls} with @keras.saving.register_keras_serializable(), give it get_config() "
    "and accept **kwargs in its __init__ (docs/your-code.md)"
)
MISMATCH_FIX = "make sure its layers' get_config() holds every argument that shapes call()"


def note_of(err: BaseException) -> str:
    """The last line of an error that says something (Keras puts the cause last)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    last = lines[-1].removeprefix("Exception encountered: ") if lines else type(err).__name__
    return last[:300]


def own_layers(model: Any) -> list[Any]:
    """``model`` and its nested layers whose classes are not Keras'."""
    layers = keras_internals.all_layers(model, include_self=True)
    return [layer for layer in layers if type(layer).__module__.split(".")[0] not in KERAS_PACKAGES]


def culprit(model: Any, err: BaseException) -> tuple[str, str]:
    """(class, why) of a failed load: the first of the model's own classes that does not
    rebuild from its config, else the class the error names."""
    for layer in own_layers(model):
        try:
            type(layer).from_config(layer.get_config())
        except Exception as rebuilt:
            return type(layer).__name__, note_of(rebuilt)
    named = re.search(r"class '([\w.]+)'", str(err))
    return (named.group(1) if named else type(model).__name__), note_of(err)


def as_arrays(predicted: Any) -> list[np.ndarray]:
    if isinstance(predicted, np.ndarray) and predicted.dtype == object and not predicted.shape:
        predicted = predicted.item()  # MLflow's pyfunc wraps a dict of outputs in an array
    if isinstance(predicted, Mapping):
        return [np.asarray(predicted[key]) for key in sorted(predicted)]
    if isinstance(predicted, list | tuple):
        return [np.asarray(part) for part in predicted]
    return [np.asarray(predicted)]


def pyfunc_predict(folder: Path, batch: Any) -> Any:
    """Load ``folder`` as ``mlflow.pyfunc.load_model`` does anywhere and predict ``batch``
    (Keras' progress bar off; ``sys.path`` restored: the loader prepends ``code/``)."""
    import mlflow.pyfunc

    path, interactive = list(sys.path), keras.utils.is_interactive_logging_enabled()
    keras.utils.disable_interactive_logging()
    try:
        return mlflow.pyfunc.load_model(str(folder)).predict(batch)
    finally:
        sys.path[:] = path
        if interactive:
            keras.utils.enable_interactive_logging()


def differences(loaded: list[np.ndarray], trained: list[np.ndarray]) -> str | None:
    """Why the loaded model's predictions are not the trained model's, or None."""
    if [a.shape for a in loaded] != [a.shape for a in trained]:
        return "its predictions have other shapes than the trained model's"
    pairs = list(zip(loaded, trained, strict=True))
    if all(np.allclose(a, b, rtol=RTOL, atol=ATOL) for a, b in pairs):
        return None
    worst = max(float(np.max(np.abs(a - b))) for a, b in pairs)
    return f"its predictions differ from the trained model's (max |difference| {worst:.3g})"


def load_problem(folder: Path, model: Any, batch: Any) -> tuple[str, str, str] | None:
    """(class, why, fix) when the folder's model does not load or predicts otherwise."""
    try:
        loaded = as_arrays(pyfunc_predict(folder, batch))
    except Exception as err:  # whatever the user's code raises: reported, never the run's
        cls, why = culprit(model, err)
        return cls, why, FIX.format(cls=cls)
    why = differences(loaded, as_arrays(model.predict(batch, verbose=0)))
    if why is None:
        return None
    return type(model).__name__, why, MISMATCH_FIX


def check_model_loads(folder: Path, model: Any, batch: Any, run_dir: Path) -> bool:
    """Load ``folder`` back, record the outcome in the run directory, say it when it fails."""
    start = time.perf_counter()
    problem = load_problem(folder, model, batch)
    record = {"loads": problem is None, "seconds": round(time.perf_counter() - start, 4)}
    if problem is not None:
        cls, why, fix = problem
        record["error"] = f"{cls}: {why}"
        print(
            f"tntrun: warning: the logged model does not load back ({cls}: {why}): {fix}",
            flush=True,
        )
    (run_dir / MODEL_LOADS).write_text(json.dumps(record))
    return problem is None
