"""The seams' one lookup: a variant by its registered name, or a class by its dotted path.

Launchers, cluster environments and trackers are each one module plus a registry line
(``name -> "package.module.Class"``); a user's own variant is named by its dotted path.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")


def find_class(
    name: str, registry: Mapping[str, str], base: type[T] | None = None
) -> type[T] | None:
    """The class registered as ``name`` (else at the dotted path ``name``), when it can be
    imported and is a subclass of ``base``; None otherwise: the caller says what to choose."""
    module, _, attr = registry.get(name, name).rpartition(".")
    if not module:
        return None
    try:
        found = getattr(importlib.import_module(module), attr, None)
    except ImportError:
        return None
    if not isinstance(found, type) or (base is not None and not issubclass(found, base)):
        return None
    return found
