"""Checks of the command line's group choices, before Hydra composes anything.

Hydra answers an unknown choice (``schedule=nosuch``) with a many-line error;
these checks give one line listing the choices instead. Overrides are parsed
with Hydra's own parser, so sweeps (``model=glob(resnet*)``, ``seed=range(3)``,
``a,b``) are understood, and the options come from tntrun's configs plus every
user config directory (``--config-dir``, ``hydra.searchpath``).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from tntrun.config.moved_keys import moved_key_problems

SEARCHPATH = "hydra.searchpath"
NOT_CHOICES = ("hydra", "schema")  # groups Hydra or the schema own
# Hydra's flags that take the next argument as their value.
VALUE_FLAGS = (
    "-cd",
    "--config-dir",
    "-cp",
    "--config-path",
    "-cn",
    "--config-name",
    "-c",
    "--cfg",
    "-p",
    "--package",
    "--experimental-rerun",
)
INFO_TOPICS = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(overrides, config directories) of a Hydra command line."""
    overrides, dirs = [], []
    args = iter(enumerate(argv))
    for index, arg in args:
        if arg.startswith("-"):
            name, eq, value = arg.partition("=")
            if name in VALUE_FLAGS and not eq:
                _, value = next(args, (None, ""))
            if name in ("-cd", "--config-dir"):
                dirs.append(value)
            if name == "--info" and index + 1 < len(argv) and argv[index + 1] in INFO_TOPICS:
                next(args, None)
            continue
        overrides.append(arg)
    return overrides, dirs


def _key_of(override: str) -> str:
    """The key or group an override sets (``+model@pkg=x``: ``model``), without parsing it."""
    return override.lstrip("~+").partition("=")[0].partition("@")[0].strip()


def _roots(dirs: Iterable[str], overrides: Sequence[Any]) -> list[Any]:
    """Config roots: tntrun's packaged configs, then user directories and search paths."""
    roots: list[Any] = [files("tntrun.conf")]
    roots += [Path(d).expanduser() for d in dirs if d]
    for override in overrides:
        if override.key_or_group == SEARCHPATH and not override.is_sweep_override():
            for entry in override.value() or []:
                scheme, _, where = str(entry).partition("://")
                if scheme == "file":
                    roots.append(Path(where).expanduser())
                elif scheme == "pkg":
                    try:
                        roots.append(files(where))
                    except ModuleNotFoundError:
                        continue
    return roots


def _groups(roots: Sequence[Any]) -> set[str]:
    found = set()
    for root in roots:
        if root.is_dir():
            found.update(
                p.name
                for p in root.iterdir()
                if p.is_dir() and p.name not in NOT_CHOICES and not p.name.startswith("_")
            )
    return found


def group_options(group: str, roots: Sequence[Any]) -> list[str]:
    """Every option of ``group`` across the config roots."""
    options = set()
    for root in roots:
        folder = root / group
        if folder.is_dir():
            options.update(
                p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
            )
    return sorted(options)


def _group_overrides(
    overrides: Sequence[str], config_dirs: Iterable[str]
) -> tuple[list[Any], list[Any], set[str]]:
    """The overrides that set a group, parsed; the config roots and their groups. Only
    those are parsed: Hydra's parser takes ~1 ms an item of a list, 0.3 s for
    ``hosts=[...]`` at a thousand hosts, which cannot be a choice."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    searchpaths = [o for o in overrides if _key_of(o) == SEARCHPATH]
    roots = _roots(config_dirs, parser.parse_overrides(searchpaths))
    groups = _groups(roots)
    return parser.parse_overrides([o for o in overrides if _key_of(o) in groups]), roots, groups


def choice_problems(overrides: Sequence[str], config_dirs: Iterable[str] = ()) -> list[str]:
    """One line per key that moved to another section, naming its new place, and per group
    choice that names no config, listing the group's options."""
    from hydra.errors import HydraException

    problems = moved_key_problems(overrides)
    try:
        parsed, roots, groups = _group_overrides(overrides, config_dirs)
    except HydraException:
        return problems  # Hydra reports a malformed override with its own message
    for override in parsed:
        group = override.key_or_group
        if group not in groups or override.package or override.is_delete():
            continue
        options = group_options(group, roots)
        listing = f"available: {', '.join(options)}"
        if override.value_type is not None and override.value_type.name == "GLOB_CHOICE_SWEEP":
            if not override.value().filter(options):
                problems.append(
                    f"{group}={override.get_value_string()}: matches no {group}; {listing}"
                )
            continue
        if override.is_sweep_override():
            if not override.is_choice_sweep():
                continue
            chosen = list(override.sweep_string_iterator())
        else:
            value = override.value()
            chosen = [] if value is None else [str(value)]
        for choice in chosen:
            if choice != "null" and choice not in options:
                close = difflib.get_close_matches(choice, options, n=3, cutoff=0.6)
                hint = f"did you mean {', '.join(close)}? " if close else ""
                problems.append(f"{group}={choice}: no such {group}; {hint}{listing}")
    return problems


def user_choices(choices: Mapping[str, Any]) -> dict[str, str]:
    """Hydra's ``runtime.choices`` without Hydra's own groups and the schemas."""
    return {
        g: str(v)
        for g, v in choices.items()
        if not g.startswith(("hydra/", "schema/")) and v is not None
    }
