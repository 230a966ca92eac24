"""Rank 0's MLflow Model folders: the trained model in MLflow's Keras flavour.

No rank opens the tracking store: rank 0 writes files and the driver, which never
imports TensorFlow, relays them. Rank 0 holds the trained model and TensorFlow
already, so it writes the MLflow Model folder (``mlflow.keras.save_model`` writes
files only: the model, ``MLmodel`` with its signature, an input example and the
pinned requirements); the driver logs that folder as the run's logged model.

``mlflow.keras`` is imported here alone, once, at the end of a finished run with
``tracking.log_model``: about 0.75 s of rank 0's time, and 0.15 s to describe
and save the model (BENCHMARKS.md). The requirements are given, not inferred:
MLflow's inference loads the model again in a subprocess (about 23 s here).

A model with the user's own layers gets their modules in its ``code/`` folder
(:mod:`.model_code`), and with ``tracking.check_model_loads`` rank 0 loads the final
folder back once (:mod:`.load_check`).
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

from tntrun.contract import run_files
from tntrun.contract.checkpoints import best_checkpoint
from tntrun.contract.run_files import FINAL_MODEL, MLFLOW_BEST_MODEL, MLFLOW_MODEL
from tntrun.engine.load_check import check_model_loads
from tntrun.engine.model_code import named_modules, ship_user_code
from tntrun.engine.model_loader import custom_objects

EXAMPLE_SAMPLES = 5  # validation samples in the input example (and the signature's source)
# The TensorFlow distributions a rank may run on, the first one installed is pinned.
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly")
_imported = False  # whether write_mlflow_model imported MLflow (at the end of training)


def imported_mlflow() -> bool:
    """Whether this rank imported MLflow here, after training, to save its model (the
    worker refuses any other import of MLflow on a rank)."""
    return _imported


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
        return {
            name: np.asarray(part)[:EXAMPLE_SAMPLES]
            for name, part in zip(names, features, strict=True)
        }
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


def skip_environment_scan(pins: list[str]) -> None:
    """Spare rank 0 MLflow's scan of every installed distribution (about 1 s here, most of
    the save): MLflow maps all installed modules to their packages to check the
    requirements against this environment, and these pins are this environment's own
    versions, so the check passes by construction. It gets the map of just the pinned
    packages instead. A private detail of MLflow: where it differs, the scan runs."""
    from mlflow.utils import requirements_utils

    if getattr(requirements_utils, "_MODULES_TO_PACKAGES", False) is not None:
        return  # computed already, or not this MLflow
    packages = [pin.split("==")[0] for pin in pins]
    modules = {
        "tensorflow" if name in TENSORFLOW_DISTRIBUTIONS else name: [name] for name in packages
    }
    requirements_utils._MODULES_TO_PACKAGES = {**modules, "mlflow": ["mlflow"]}


def write_mlflow_model(model: Any, features: Any, path: Path) -> bool:
    """Write ``model`` as an MLflow Model folder at ``path`` (replaced whole: a folder there
    is always complete); False, with a note, when MLflow cannot describe or save it (the
    run's ``model.keras`` and weights stand)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    partial = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    global _imported
    _imported = True
    try:
        import mlflow.keras
        from mlflow.models import infer_signature

        example = example_inputs(features, model)
        signature = infer_signature(example, model.predict(example, verbose=0))
        partial.mkdir(parents=True)
        pins = requirements()
        skip_environment_scan(pins)
        mlflow.keras.save_model(
            model, str(partial), signature=signature, input_example=example, pip_requirements=pins
        )
        ship_user_code(model, partial, user_dir())
    except Exception as err:  # an optional output never fails a finished run
        shutil.rmtree(partial, ignore_errors=True)
        print(f"tntrun: note: no {path.name}: {note_of(err)}", flush=True)
        return False
    shutil.rmtree(path, ignore_errors=True)
    os.replace(partial, path)
    return True


def user_dir() -> Path:
    """The driver's working directory, where the user's modules are (the worker put it
    first on ``sys.path``)."""
    return Path(os.environ.get(run_files.ENV_USER_PATH) or os.getcwd())


def save_mlflow_models(final: Any, run_dir: Path, val_batches: Any, check: bool) -> None:
    """The final model (in memory) and the best one (``checkpoints/best``, with
    checkpoint.monitor) as MLflow Model folders, their input example from the first of
    this rank's validation batches; with ``check``, the final one loaded back
    (:mod:`.load_check`)."""
    first = next(iter(val_batches), None)
    if first is None:
        print(
            f"tntrun: note: no {MLFLOW_MODEL}: no validation sample for its input example",
            flush=True,
        )
        return
    features = first[0]
    written = write_mlflow_model(final, features, run_dir / MLFLOW_MODEL)
    if written and check:
        example = example_inputs(features, final)
        check_model_loads(run_dir / MLFLOW_MODEL, final, example, run_dir)
    best = best_checkpoint(run_dir)
    if best is None or not (best[0] / FINAL_MODEL).is_file():
        return
    try:  # the user's classes, registered or not, as the final model names them
        with keras.saving.custom_object_scope(custom_objects(named_modules(final))):
            model = keras.saving.load_model(best[0] / FINAL_MODEL, compile=False)
    except Exception as err:  # as write_mlflow_model: the final model stands
        print(f"tntrun: note: no {MLFLOW_BEST_MODEL}: {note_of(err)}", flush=True)
        return
    write_mlflow_model(model, features, run_dir / MLFLOW_BEST_MODEL)


def note_of(err: BaseException) -> str:
    """The first line of an error, short enough for a note."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
