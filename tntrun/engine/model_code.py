"""The user's model code inside rank 0's MLflow Model folder, so the model loads anywhere.

MLflow's Keras flavour saves the model file alone, and Keras 3 will not import a user's
module to find a custom layer: a model built from the working directory's layers would not
load in another process. When the model's config names modules outside Keras, their
top-level modules or packages from the working directory (and the working directory's
other modules this rank imported: the helpers they import) go into the folder's ``code/``,
with :mod:`tntrun.engine.model_loader` as the pyfunc flavour's loader.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import keras

from tntrun.engine import model_loader

# Packages Keras imports itself when a config names them: nothing to ship or import.
KERAS_PACKAGES = frozenset({"keras", "keras_hub", "keras_cv", "keras_nlp", "builtins"})
LOADER_MODULE = "tntrun_model_loader"  # model_loader.py's name in code/
INSTALLED = "tntrun"  # tntrun's own modules (its zoo): installed where the model loads


def named_modules(model: Any) -> list[str]:
    """The modules outside Keras that ``model``'s serialised config names (its classes,
    functions, nested layers)."""
    found: set[str] = set()
    pending: list[Any] = [keras.saving.serialize_keras_object(model)]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            module = item.get("module")
            if isinstance(module, str) and module.split(".")[0] not in KERAS_PACKAGES:
                found.add(module)
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return sorted(found)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def user_source(name: str, user_dir: Path) -> Path | None:
    """The file or package folder of top-level module ``name`` when it is the user's (in
    ``user_dir``, not in the Python environment, not tntrun); else None."""
    if name == INSTALLED or name.startswith("__"):  # tntrun; __main__: the rank's entry
        return None
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    if file is not None:
        source = Path(file).resolve()
        source = source.parent if source.name == "__init__.py" else source
    else:  # a namespace package
        paths = list(getattr(module, "__path__", []))
        if not paths:
            return None
        source = Path(paths[0]).resolve()
    environments = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    if not _inside(source, user_dir):
        return None
    if any(_inside(source, environment) for environment in environments):
        return None  # installed (a virtual environment in the working directory)
    return source


def user_sources(modules: list[str], user_dir: Path) -> dict[str, Path]:
    """The top-level user modules to ship: those of ``modules`` and, when there are any,
    every other user module this process imported (what they import in turn)."""
    tops = sorted({module.split(".")[0] for module in modules})
    named = {top: src for top in tops if (src := user_source(top, user_dir))}
    if not named:
        return {}
    imported = [name for name in list(sys.modules) if "." not in name]
    helpers = {top: src for top in imported if (src := user_source(top, user_dir))}
    return {**helpers, **named}


def ship_user_code(model: Any, folder: Path, user_dir: Path) -> list[str]:
    """Copy the user's modules and the loader into ``folder``'s ``code/`` and make the loader
    the pyfunc flavour's; the modules the loader imports (none: the folder is left as
    MLflow's Keras flavour wrote it)."""
    modules = named_modules(model)
    if not modules:
        return []
    code = folder / model_loader.CODE
    code.mkdir()
    for top, source in user_sources(modules, user_dir.resolve()).items():
        if source.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(source, code / top, ignore=ignore)
        else:
            shutil.copyfile(source, code / source.name)
    shutil.copyfile(model_loader.__file__, code / f"{LOADER_MODULE}.py")
    (code / model_loader.MODULES_FILE).write_text(json.dumps({"modules": modules}))
    use_loader(folder)
    return modules


def use_loader(folder: Path) -> None:
    """Point the MLflow Model's pyfunc flavour at the shipped loader and its ``code/``."""
    from mlflow import pyfunc
    from mlflow.models import Model

    spec = Model.load(str(folder / "MLmodel"))
    spec.flavors[pyfunc.FLAVOR_NAME].update(
        {pyfunc.MAIN: LOADER_MODULE, pyfunc.CODE: model_loader.CODE}
    )
    spec.save(str(folder / "MLmodel"))
