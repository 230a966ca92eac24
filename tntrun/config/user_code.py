"""User code named by ``_target_``: found in the working directory and checked before launch.

The driver and every rank import user modules as ``python -m`` would: the
working directory comes first on ``sys.path``. A builder's parameters are read
from its source (no import, so the driver never imports TensorFlow through a
user's model file), falling back to importing it when the source does not say.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from tntrun.errors import PlanError

BLANK = "custom"  # conf/model/custom.yaml, conf/dataset/custom.yaml: a _target_ and no keys


def add_user_path(directory: str | os.PathLike[str] | None = None) -> str:
    """Put ``directory`` (default: the working directory) first on ``sys.path``; return it."""
    path = str(Path(directory or os.getcwd()).resolve())
    if path not in sys.path:
        sys.path.insert(0, path)
    return path


@dataclass(frozen=True)
class Parameters:
    """The keyword parameters a callable takes."""

    names: frozenset[str]
    required: frozenset[str]
    any_keyword: bool  # takes **kwargs


def parameters_from_args(args: ast.arguments, skip_self: bool) -> Parameters:
    positional = [*args.posonlyargs, *args.args]
    if skip_self and positional:
        positional = positional[1:]
    with_default = positional[len(positional) - len(args.defaults) :] if args.defaults else []
    pairs = zip(args.kwonlyargs, args.kw_defaults, strict=True)
    kwonly_required = {a.arg for a, default in pairs if default is None}
    names = {a.arg for a in [*positional, *args.kwonlyargs]}
    required = {a.arg for a in positional if a not in with_default} | kwonly_required
    return Parameters(frozenset(names), frozenset(required), args.kwarg is not None)


def _top_level(path: Path, attr: str) -> ast.FunctionDef | ast.ClassDef | None:
    """The top-level ``def attr`` or ``class attr`` of the source at ``path``, if any."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == attr:
            return node
    return None


def _from_source(path: Path, attr: str) -> Parameters | None:
    """Parameters of top-level ``def attr`` or ``class attr`` (its ``__init__``), from source."""
    node = _top_level(path, attr)
    if isinstance(node, ast.FunctionDef):
        return parameters_from_args(node.args, skip_self=False)
    if node is None or node.bases or node.decorator_list:
        return None  # not there, or an inherited or generated __init__: ask the class itself
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            return parameters_from_args(item.args, skip_self=True)
    return Parameters(frozenset(), frozenset(), False)


def _defined_in_source(path: Path, attr: str) -> str | None:
    """ "function" or "class" for a top-level ``def attr`` / ``class attr`` in the source."""
    node = _top_level(path, attr)
    if node is None:
        return None
    return "function" if isinstance(node, ast.FunctionDef) else "class"


def is_function_target(target: str) -> bool:
    """Whether ``target`` (module.attr) names a function rather than a class: read from its
    source when it is there (so a module importing TensorFlow is not imported), else from
    the imported object. False when it cannot be found (``find_target`` says why)."""
    module, _, attr = target.rpartition(".")
    try:
        spec = importlib.util.find_spec(module) if module else None
    except (ModuleNotFoundError, ValueError):
        return False
    if spec is None:
        return False
    if spec.origin and spec.origin.endswith(".py"):
        kind = _defined_in_source(Path(spec.origin), attr)
        if kind is not None:
            return kind == "function"
    found = getattr(importlib.import_module(module), attr, None)
    return found is not None and not inspect.isclass(found)


def _returns(function: ast.FunctionDef) -> list[ast.expr | None]:
    """The values the function's own ``return`` statements give (not nested functions')."""
    found: list[ast.expr | None] = []
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Return):
            found.append(node.value)
        todo.extend(ast.iter_child_nodes(node))
    return found


def constant_return(target: str) -> str | None:
    """What a builder function returns when its source says it returns no object on any
    path (None, a string, a number): ``None`` when it may return a model or cannot tell."""
    module, _, attr = target.rpartition(".")
    try:
        spec = importlib.util.find_spec(module) if module else None
    except (ModuleNotFoundError, ValueError):
        return None
    if spec is None or not (spec.origin and spec.origin.endswith(".py")):
        return None
    node = _top_level(Path(spec.origin), attr)
    if not isinstance(node, ast.FunctionDef):
        return None
    values = _returns(node)
    if any(v is not None and not isinstance(v, ast.Constant) for v in values):
        return None
    given = {repr(v.value) if isinstance(v, ast.Constant) else "None" for v in values}
    return " or ".join(sorted(given)) or "None"


LEGACY_KERAS = "tf_keras"


def imports_legacy_keras(path: Path) -> bool:
    """Whether the source at ``path`` imports the legacy ``tf_keras`` package (Keras 2)."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] == LEGACY_KERAS for name in names):
            return True
    return False


def _from_object(module: str, attr: str) -> Parameters | None:
    target = getattr(importlib.import_module(module), attr, None)
    if target is None:
        return None
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return Parameters(frozenset(), frozenset(), True)  # cannot tell: accept
    names, required, any_keyword = set(), set(), False
    for param in signature.parameters.values():
        if param.kind is param.VAR_KEYWORD:
            any_keyword = True
        elif param.kind is not param.VAR_POSITIONAL:
            names.add(param.name)
            if param.default is param.empty:
                required.add(param.name)
    return Parameters(frozenset(names), frozenset(required), any_keyword)


def packaged_options(group: str) -> list[str]:
    folder = files("tntrun.conf") / group
    if not folder.is_dir():  # a key without a config group (loss, metrics)
        return []
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def find_target(group: str, target: str) -> Parameters:
    """The parameters of ``target`` (module.attr), or PlanError when it cannot be found."""
    module, _, attr = target.rpartition(".")
    try:
        spec = importlib.util.find_spec(module) if module else None
    except (ModuleNotFoundError, ValueError):
        spec = None
    if spec is None:
        ours = packaged_options(group)
        listing = f"; tntrun's {group}s: {', '.join(ours)}" if ours else ""
        raise PlanError(
            f"{group}._target_={target}: module {module or '?'} not found in the working "
            f"directory or the installed packages{listing}"
        )
    found = None
    if spec.origin and spec.origin.endswith(".py"):
        if group == "model" and imports_legacy_keras(Path(spec.origin)):
            raise PlanError(
                f"model._target_={target}: {Path(spec.origin).name} imports the legacy "
                f"{LEGACY_KERAS} package; tntrun trains Keras 3: write `import keras` instead "
                "(the same layers and Model API)"
            )
        found = _from_source(Path(spec.origin), attr)
    if found is None:
        found = _from_object(module, attr)
    if found is None:
        raise PlanError(f"{group}._target_={target}: {module} has no {attr}")
    return found


def check_target(
    group: str,
    target: str,
    keys: Iterable[str],
    supplied: Iterable[str] = (),
    choice: str | None = None,
) -> None:
    """Refuse a target whose parameters do not take the config's keys.

    ``keys`` are the config's ``<group>.*`` keys passed as keyword arguments,
    ``supplied`` those tntrun passes itself (a model's input_shape and num_classes).
    """
    params = find_target(group, target)
    name = target.rpartition(".")[2]
    keys, supplied = set(keys), set(supplied)
    if not params.any_keyword:
        missing_supplied = sorted(supplied - params.names)
        if missing_supplied:
            raise PlanError(
                f"{group}._target_={target}: {name}() must take {', '.join(missing_supplied)} "
                f"(tntrun passes them from the dataset): add them to its parameters"
            )
        unknown = sorted(keys - params.names)
        if unknown:
            origin = f" (kept from {group}={choice})" if choice else ""
            raise PlanError(
                f"{group}._target_={target}: {name}() takes no {', '.join(unknown)}{origin}: "
                f"start from {group}={BLANK} ({group}={BLANK} {group}._target_={target} "
                f"+{group}.<key>=...) or give your {group} its own config file "
                f"({group}/<name>.yaml in a --config-dir)"
            )
    needed = sorted(params.required - keys - supplied)
    if needed:
        adds = " ".join(f"+{group}.{key}=..." for key in needed)
        raise PlanError(
            f"{group}._target_={target}: {name}() needs {', '.join(needed)}, which the config "
            f"does not set: add {adds}"
        )
