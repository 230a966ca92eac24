"""Rank 0's MLflow Model folders: the trained model in MLflow's Keras flavour.

No rank opens the tracking store: rank 0 writes files and the driver, which never
imports TensorFlow, relays them. Rank 0 holds the trained model and TensorFlow
already, so it writes the MLflow Model folder (``mlflow.keras.save_model`` writes
files only: the model, ``MLmodel`` with its signature, an input example and the
pinned requirements); the driver logs that folder as the run's logged model.

``mlflow.keras`` is imported here alone, once, at the end of a finished run with
``tracking.log_model`` (about 1 s of rank 0's time, then about 1 s to save).
The requirements are given, not inferred: MLflow's inference loads the model
again in a subprocess (about 23 s here).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import keras
import numpy as np

EXAMPLE_SAMPLES = 5  # validation samples in the input example (and the signature's source)
# The TensorFlow distributions a rank may run on, the first one installed is pinned.
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly")


def example_inputs(features: Any, model: Any) -> np.ndarray | dict[str, np.ndarray]:
    """The first :data:`EXAMPLE_SAMPLES` samples of a validation batch's features, as MLflow
    describes them: an array, or a dict by the model's input names (a translation model's
    source and target tokens)."""
    if isinstance(features, Mapping):
        return {str(k): np.asarray(v)[:EXAMPLE_SAMPLES] for k, v in features.items()}
    if isinstance(features, list | tuple):
        names = [getattr(tensor, "name", None) for tensor in getattr(model, "inputs", None) or []]
        if len(names) != len(features) or not all(names):
            raise ValueError(
                f"its {len(features)} inputs have no names MLflow's signature could use "
                "(build it as a functional model with named keras.Input layers)"
            )
        return {name: np.asarray(part)[:EXAMPLE_SAMPLES] for name, part in zip(names, features)}
    return np.asarray(features)[:EXAMPLE_SAMPLES]


def requirements() -> list[str]:
    """The packages the model needs to load, pinned to the versions that trained it."""
    pins = [f"keras=={keras.__version__}"]
    for name in TENSORFLOW_DISTRIBUTIONS:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
            break
        except metadata.PackageNotFoundError:
            continue
    return pins


def write_mlflow_model(model: Any, features: Any, path: Path) -> bool:
    """Write ``model`` as an MLflow Model folder at ``path`` (replaced whole: a folder there
    is always complete); False, with a note, when MLflow cannot describe or save it (the
    run's ``model.keras`` and weights stand)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    partial = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        import mlflow.keras
        from mlflow.models import infer_signature

        example = example_inputs(features, model)
        signature = infer_signature(example, model.predict(example, verbose=0))
        partial.mkdir(parents=True)
        mlflow.keras.save_model(
            model,
            str(partial),
            signature=signature,
            input_example=example,
            pip_requirements=requirements(),
        )
    except Exception as err:  # an optional output never fails a finished run
        shutil.rmtree(partial, ignore_errors=True)
        why = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        print(f"tntrun: note: no MLflow model in {path.name}: {why}", flush=True)
        return False
    shutil.rmtree(path, ignore_errors=True)
    os.replace(partial, path)
    return True
