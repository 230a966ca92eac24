"""Print the code's shape figures (issue 43), read from the source, not imported:

- the fields of ``Plan`` and of the schema's largest sections;
- functions longer than 40 lines in ``tntrun/``;
- Horovod knobs looked up by string (a comparison against ``<knob>.key``);
- modules with logic (a function or class) in ``planning/``, ``launch/`` and ``engine/``
  that no test imports.

Run from the checkout: ``python scripts/shape_figures.py`` (exit 0; figures only).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tntrun"
LONG_FUNCTION = 40
UNIT_TESTED = ("planning", "launch", "engine")


def trees(folder: Path) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(folder.rglob("*.py")):
        yield path, ast.parse(path.read_text(), filename=str(path))


def class_fields(path: Path) -> dict[str, int]:
    """Annotated class-level fields of each class in ``path`` (its dataclasses)."""
    tree = ast.parse(path.read_text())
    return {
        node.name: sum(isinstance(s, ast.AnnAssign) for s in node.body)
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }


def long_functions() -> list[tuple[int, str]]:
    found = []
    for path, tree in trees(PACKAGE):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > LONG_FUNCTION:
                    found.append((length, f"{path.relative_to(ROOT)}:{node.name}"))
    return sorted(found, reverse=True)


def _is_knob_key(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "key"


def string_knob_lookups() -> list[str]:
    """Comparisons with a knob's ``.key``: a typed setting read back by its name."""
    found = []
    for path, tree in trees(PACKAGE):
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                _is_knob_key(side) for side in (node.left, *node.comparators)
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def imported_by_tests() -> set[str]:
    names: set[str] = set()
    for _, tree in trees(ROOT / "tests"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def has_logic(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.FunctionDef | ast.ClassDef) for n in tree.body)


def untested_modules() -> dict[str, list[str]]:
    imported = imported_by_tests()
    untested: dict[str, list[str]] = {}
    for package in UNIT_TESTED:
        for path, tree in trees(PACKAGE / package):
            dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if has_logic(tree) and dotted not in imported:
                untested.setdefault(package, []).append(dotted)
    return untested


def main() -> None:
    plan = class_fields(PACKAGE / "planning" / "plan.py")["Plan"]
    schema = class_fields(PACKAGE / "config" / "schema.py")
    largest = sorted(schema.items(), key=lambda kv: -kv[1])[:4]
    print(f"Plan fields: {plan}")
    print("largest config sections: " + ", ".join(f"{n} {c}" for n, c in largest))
    longs = long_functions()
    print(f"functions over {LONG_FUNCTION} lines in tntrun/: {len(longs)}")
    for length, name in longs:
        print(f"  {length:3d}  {name}")
    lookups = string_knob_lookups()
    print(f"Horovod knobs looked up by string: {len(lookups)}")
    for where in lookups:
        print(f"  {where}")
    untested = untested_modules()
    for package in UNIT_TESTED:
        modules = untested.get(package, [])
        print(f"modules with logic no test imports, {package}/: {len(modules)}")
        for dotted in modules:
            print(f"  {dotted}")


if __name__ == "__main__":
    main()
