"""Hydra's and OmegaConf's composition errors as tntrun's one line: the key, what was given,
what it takes and the fix.

Hydra answers a misspelled key (``train.epoch=3``) or a wrong type
(``global_batch_size=64.5``) with 3-7 lines and its own exit code; the CLI composes the
config before Hydra's entry (:func:`tntrun.config.compose.compose_config`) and these
functions turn what composing raised into the line ``tntrun: config error: ...`` (exit 2).
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Sequence
from enum import Enum
from types import NoneType, UnionType
from typing import Any

from omegaconf import MISSING
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from tntrun.config.moved_keys import moved_to

KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def one_line(err: BaseException, overrides: Sequence[str]) -> str:
    """The line that says what composing ``overrides`` refused, naming the override."""
    from hydra.errors import OverrideParseException

    cause = err.__cause__
    if isinstance(err, OverrideParseException):
        return _unparsable(overrides, err)
    if isinstance(cause, ConfigAttributeError | ConfigKeyError) and cause.full_key:
        given = _given(overrides, cause.full_key)
        append = str(err).partition("To append to your config use ")[2].strip()
        if append and not _fields(cause.object_type):  # a mapping's new key: Hydra's +
            section = str(cause.full_key).rpartition(".")[0]
            return f"{append.lstrip('+')}: {section} is empty here: add keys with {append}"
        return _unknown_key(cause, given)
    if isinstance(cause, ValidationError) and cause.full_key:
        return _wrong_value(cause, _given(overrides, cause.full_key))
    text = str(err)
    if text.startswith("Could not append to config. An item is already at"):
        key = text.split("'")[1]
        return f"+{key}=...: {key} is set already: drop the +, e.g. {key}=<value>"
    if text.startswith("Could not delete from config."):
        key = text.split("'")[1]
        return f"~{key}: the config has no {key} to delete: drop ~{key}"
    if text.startswith("Ambiguous value for argument"):
        arg = text.split("'")[1]
        key, _, value = arg.partition("=")
        return (
            f"{arg}: a value with a comma is a sweep: write {key}=[{value}] for a list, "
            f"quote it ({key}='{value}') for a string, or add -m to sweep over it"
        )
    said = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return f"the command line: {said} (each override is key=value: tntrun --help)"


def unresolved(err: Exception, overrides: Sequence[str]) -> str:
    """The line for a value the config cannot resolve (``seed=${nosuch}``), naming the
    override that holds the interpolation when there is one."""
    said = (str(err).strip().splitlines() or [type(err).__name__])[0].strip()
    key = str(getattr(err, "full_key", "") or "")
    holding = [o for o in overrides if "${" in o]
    named = next((o for o in holding if o.lstrip("+").partition("=")[0] == key), None)
    where = named or (holding[0] if holding else key or "the config")
    return (
        f"{where}: {said}: give a value, or interpolate a key that exists "
        "(e.g. train.epochs=${seed})"
    )


def _given(overrides: Sequence[str], key: str) -> str:
    """The override that set ``key``, as typed (else ``key=?``)."""
    for override in reversed(overrides):
        name, eq, _ = override.partition("=")
        if eq and (name.lstrip("+~") == key or name.lstrip("+~").startswith(f"{key}.")):
            return override.lstrip("+")
    return f"{key}=?"


def _unparsable(overrides: Sequence[str], err: Exception) -> str:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_override(override)
        except HydraException as bad:
            said = str(bad).splitlines()[0].strip()
            return (
                f"{override}: not an override Hydra can read ({said}): write key=value, and "
                "quote values with spaces or brackets (key='a b')"
            )
    return " ".join(str(err).split())


def _fields(owner: Any) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(owner)} if dataclasses.is_dataclass(owner) else {}


def _unknown_key(cause: ConfigKeyError, given: str) -> str:
    section, _, name = str(cause.full_key).rpartition(".")
    known = sorted(k for k in _fields(cause.object_type) if not k.startswith("_"))
    where = section or "the config"
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if moved_to(str(cause.full_key)):
        hint = f"{cause.full_key} moved to {moved_to(str(cause.full_key))}"
    elif close:
        hint = f"did you mean {', '.join(f'{section}.{c}' if section else c for c in close)}?"
    elif known:
        hint = f"its keys: {', '.join(known)}"
    else:
        hint = "tntrun --cfg job shows the keys"
    return f"{given}: {where} has no key {name}; {hint}"


def _wrong_value(cause: ValidationError, given: str) -> str:
    key = str(cause.full_key)
    name = key.rpartition(".")[2]
    field = _fields(cause.object_type).get(name)
    said = str(cause.msg).splitlines()[0].strip().rstrip(".")
    if field is None:
        return f"{given}: {said}"
    annotation = typing.get_type_hints(cause.object_type).get(name, Any)
    if dataclasses.is_dataclass(annotation):
        return f"{given}: {key} is a section: set its keys one by one, {key}.<key>=<value>"
    allowed = _kind(annotation)
    return f"{given}: {key} takes {allowed}{_example(key, field.default)} ({said})"


def _example(key: str, default: Any) -> str:
    """``, e.g. key=<the schema's default>`` when the default is a plain value."""
    if isinstance(default, Enum):
        return f", e.g. {key}={default.value}"
    if isinstance(default, bool):
        return f", e.g. {key}={str(default).lower()}"
    if isinstance(default, int | float | str) and default != MISSING:
        return f", e.g. {key}={default}"
    return ""


def _kind(annotation: Any) -> str:
    """How a schema's type reads: ``an integer or null``, ``one of a, b``."""
    if isinstance(annotation, UnionType) or typing.get_origin(annotation) is typing.Union:
        members = typing.get_args(annotation)
        named = [_kind(m) for m in members if m is not NoneType]
        return " or ".join(named + (["null"] if NoneType in members else []))
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return f"one of {', '.join(str(m.value) for m in annotation)}"
    origin = typing.get_origin(annotation) or annotation
    if origin is list:
        return "a list, e.g. [a,b]"
    if origin is dict:
        return "a mapping, e.g. {name:value}"
    return KINDS.get(origin, "a value of its type")
