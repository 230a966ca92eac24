"""The driver's check of ``callbacks.<name>`` before any rank starts, without importing Keras.

Each entry must name a class that is a Keras callback and whose constructor takes the
entry's keys. Both are read from source: ``keras.callbacks.<Name>`` from the installed
Keras' files (its API module says where the class is defined, its class statement what it
derives from), a user's own class from its module's syntax tree. What source cannot tell is
accepted and left to the rank: a class derived from a class of another package than Keras
(whether that one is a callback would need importing it, and with it TensorFlow), or a
target in a module that is not a ``.py`` file.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tntrun.config.user_code import Parameters, parameters_from_args
from tntrun.errors import PlanError

RANK_SCOPES = ("all_ranks", "master_only")  # callbacks.<name>.ranks
KERAS_CALLBACKS = "keras.callbacks"
KERAS_BASE = ("keras.src.callbacks.callback", "Callback")
OWN_KEYS = ("_target_", "ranks")  # read by tntrun, not passed to the constructor


class NotCallback(Exception):
    """The target is found and is no Keras callback (the message says what it is)."""


def check_callbacks(callbacks: Mapping[str, Any]) -> None:
    """Refuse, one line naming the key and the fix, a callback entry the ranks could not
    build: no ``_target_``, a target that is not there or no Keras callback, an argument its
    constructor does not take, or one it needs and is not given."""
    for name, spec in callbacks.items():
        key = f"callbacks.{name}"
        if not isinstance(spec, Mapping) or "_target_" not in spec:
            raise PlanError(
                f"{key}={spec!r}: give a callback class and its arguments: "
                f"+{key}._target_=keras.callbacks.<Class> +{key}.<argument>=..."
            )
        scope = spec.get("ranks")
        if scope not in (None, *RANK_SCOPES):
            raise PlanError(f"{key}.ranks={scope}: use all_ranks or master_only (or leave it out)")
        target = str(spec["_target_"])
        try:
            params = callback_parameters(key, target)
        except NotCallback as not_one:
            raise PlanError(
                f"{key}._target_={target}: {not_one}, not a Keras callback: give a subclass "
                f"of keras.callbacks.Callback, e.g. {key}._target_=keras.callbacks.EarlyStopping"
            ) from None
        if params is not None:
            _check_arguments(key, target, params, [k for k in spec if k not in OWN_KEYS])


def _check_arguments(key: str, target: str, params: Parameters, given: list[str]) -> None:
    name = target.rpartition(".")[2]
    unknown = [] if params.any_keyword else [k for k in given if k not in params.names]
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(params.names), n=1, cutoff=0.6)
        hint = (
            f"did you mean {key}.{close[0]}?"
            if close
            else "it takes " + (", ".join(sorted(params.names)) or "no arguments")
        )
        raise PlanError(f"{key}.{unknown[0]}: {name}() takes no {unknown[0]}; {hint}")
    needed = sorted(params.required - set(given))
    if needed:
        adds = " ".join(f"+{key}.{arg}=..." for arg in needed)
        raise PlanError(f"{key}._target_={target}: {name}() needs {', '.join(needed)}: add {adds}")


def callback_parameters(key: str, target: str) -> Parameters | None:
    """The constructor parameters of the callback class ``target`` (None: cannot tell from
    source); PlanError when it is not there, NotCallback when it is no callback."""
    module, _, attr = target.rpartition(".")
    top = module.split(".")[0]
    if top == "tensorflow" and module.startswith("tensorflow.keras."):  # Keras 3 under TF
        module, top = module.removeprefix("tensorflow."), "keras"
    if top == "keras":
        if module != KERAS_CALLBACKS:
            raise NotCallback(f"{module}.{attr} is no class of {KERAS_CALLBACKS}")
        return _keras_class(key, attr)
    if top in ("tensorflow", "tf_keras"):
        raise PlanError(
            f"{key}._target_={target}: tntrun trains Keras 3: use "
            f"{KERAS_CALLBACKS}.{attr} (or your own subclass of keras.callbacks.Callback)"
        )
    try:
        spec = importlib.util.find_spec(module) if module else None
    except (ModuleNotFoundError, ValueError):
        spec = None
    if spec is None:
        raise PlanError(
            f"{key}._target_={target}: module {module or '?'} not found in the working "
            "directory or the installed packages: check the name (module.Class)"
        )
    return _class_parameters(key, target, module, attr)


def _keras_source(module: str) -> Path | None:
    """The source file of a ``keras.src`` module in the installed Keras."""
    spec = importlib.util.find_spec("keras")  # found, not imported
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).parent.joinpath(*module.split(".")[1:])
    for path in (folder.with_suffix(".py"), folder / "__init__.py"):
        if path.is_file():
            return path
    return None


def _keras_class(key: str, attr: str) -> Parameters | None:
    api = _keras_source(KERAS_CALLBACKS)
    names = sorted(set(re.findall(r" as (\w+)", api.read_text() if api else "")))
    if attr not in names:
        close = difflib.get_close_matches(attr, names, n=2, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else f"Keras': {', '.join(names)}"
        raise PlanError(
            f"{key}._target_={KERAS_CALLBACKS}.{attr}: Keras has no such callback; {hint}"
        )
    return _inspect(KERAS_CALLBACKS, attr).params


@dataclass(frozen=True)
class Found:
    """What source says of a name: a function or a class (None: not found or cannot tell),
    whether it is a Keras callback (None: cannot tell), its constructor's parameters."""

    kind: str | None = None
    callback: bool | None = None
    params: Parameters | None = None


NO_ARGUMENTS = Parameters(frozenset(), frozenset(), False)
MAX_DEPTH = 12  # base classes followed; deeper is "cannot tell"


def _class_parameters(key: str, target: str, module: str, attr: str) -> Parameters | None:
    found = _inspect(module, attr)
    if found.kind is None and found.callback is None and found.params is None:
        return None
    if found.kind == "missing":
        raise PlanError(f"{key}._target_={target}: {module} has no {attr}: check the name")
    if found.kind == "function":
        raise NotCallback(f"{attr} is a function")
    if found.callback is False:
        raise NotCallback(f"{attr} derives from no Keras callback")
    return found.params


def _module_source(module: str) -> Path | None:
    if module.split(".")[0] == "keras":
        return _keras_source(module)
    try:
        spec = importlib.util.find_spec(module)
    except (ModuleNotFoundError, ValueError):
        return None
    origin = spec.origin if spec else None
    return Path(origin) if origin and origin.endswith(".py") else None


def _inspect(module: str, name: str, depth: int = 0) -> Found:
    """What the source of ``module`` says of its ``name``, following imports and bases."""
    if (module, name) == KERAS_BASE or (
        module in ("keras", KERAS_CALLBACKS) and name == "Callback"
    ):
        return Found("class", True, NO_ARGUMENTS)
    if module == "builtins":  # class X(object)
        return Found("class", False, NO_ARGUMENTS)
    if module.split(".")[0] in sys.stdlib_module_names:  # frozen or compiled: cheap to ask
        return _standard_library(module, name)
    source = _module_source(module)
    if source is None or depth > MAX_DEPTH:
        return Found()
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return Found()
    bound = _bindings(tree)
    node = next(
        (n for n in tree.body if isinstance(n, DEFINITIONS) and n.name == name),
        None,
    )
    if node is None:
        if name in bound:
            return _inspect(*bound[name], depth + 1)
        return Found() if _maybe_bound(tree, name) else Found("missing")
    if not isinstance(node, ast.ClassDef):
        return Found("function", False)
    bases = [_base(b, bound, module, tree) for b in node.bases]
    found = [_inspect(*b, depth + 1) if b else Found() for b in bases]
    callback = True if any(f.callback for f in found) else None
    if bases == [] or all(f.callback is False for f in found):
        callback = False
    init = next(
        (i for i in node.body if isinstance(i, DEFINITIONS[:2]) and i.name == "__init__"), None
    )
    if init is not None:
        return Found("class", callback, parameters_from_args(init.args, skip_self=True))
    inherited = next((f.params for f in found if f.kind == "class"), None)
    return Found("class", callback, inherited if callback else None)


def _maybe_bound(tree: ast.Module, name: str) -> bool:
    """Whether the module may bind ``name`` other than by a plain top-level statement: an
    assignment, a relative or star import, a definition or import inside ``if``/``try``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue  # walks into them too, which only makes the answer more cautious
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return True
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.asname or a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names = [node.id]
        else:
            names = [node.name] if isinstance(node, DEFINITIONS) else []
        if name in names:
            return True
    return False


def _standard_library(module: str, name: str) -> Found:
    """A name of Python's own library (imported: no Keras there): never a Keras callback."""
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return Found("missing")
    if found is None:
        return Found("missing")
    return Found("class" if inspect.isclass(found) else "function", False)


DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _base(
    expr: ast.expr, bound: dict[str, tuple[str, str]], module: str, tree: ast.Module
) -> tuple[str, str] | None:
    """(module, name) of a base class expression, when source says; None otherwise."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.insert(0, expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    head = expr.id
    if not parts:
        if any(isinstance(n, ast.ClassDef) and n.name == head for n in tree.body):
            return module, head
        return bound.get(head) or (("builtins", head) if head == "object" else None)
    if head not in bound:
        return None
    where, attr = bound[head]
    return ".".join([where, *([attr] if attr else []), *parts[:-1]]), parts[-1]


def _bindings(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """Names a module binds by import: name -> (module, attribute); a plain ``import a.b``
    binds ``a`` to (a, ''), ``import a.b as c`` binds ``c`` to (a.b, '')."""
    bound: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = (alias.name, "")
                else:
                    top = alias.name.split(".")[0]
                    bound[top] = (top, "")
    return bound
