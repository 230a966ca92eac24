"""Print the code's shape figures (issue 43), read from the source, not imported:

- the fields of ``Plan`` and of the schema's largest sections;
- functions longer than 40 lines in ``tntrun/``;
- Horovod knobs looked up by string (a comparison against ``<knob>.key``);
- modules with logic (a function or class) in ``planning/``, ``launch/`` and ``engine/``
  that no test imports; in ``engine/``, those whose logic needs a second rank
  (:data:`NEEDS_SECOND_RANK`) listed apart.

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
# engine/ modules whose logic runs only beside a second rank (a collective, an agreement
# between ranks): tested by real two-rank runs, which import no module, so they are listed
# apart from the modules that lack a test. One dotted name a line, with why:
#     "tntrun.engine.<module>",  # what it needs the second rank for
SECOND_RANK_PACKAGE = "engine"
NEEDS_SECOND_RANK: frozenset[str] = frozenset()


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


def dotted_name(path: Path) -> str:
    """``tntrun/engine/worker.py`` -> ``tntrun.engine.worker``."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def untested_modules() -> dict[str, list[str]]:
    imported = imported_by_tests()
    untested: dict[str, list[str]] = {}
    for package in UNIT_TESTED:
        for path, tree in trees(PACKAGE / package):
            dotted = dotted_name(path)
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
        print_modules(f"no test imports, {package}/", _lacking_a_test(modules))
        if package == SECOND_RANK_PACKAGE:
            needing = [m for m in modules if m in NEEDS_SECOND_RANK]
            print_modules(f"needing a second rank, {package}/", needing)
    for dotted in sorted(NEEDS_SECOND_RANK - _modules_in(SECOND_RANK_PACKAGE)):
        print(f"NEEDS_SECOND_RANK names no module of {SECOND_RANK_PACKAGE}/: {dotted}")


def _lacking_a_test(modules: list[str]) -> list[str]:
    return [m for m in modules if m not in NEEDS_SECOND_RANK]


def _modules_in(package: str) -> set[str]:
    return {dotted_name(path) for path in (PACKAGE / package).rglob("*.py")}


def print_modules(which: str, modules: list[str]) -> None:
    print(f"modules with logic {which}: {len(modules)}")
    for dotted in modules:
        print(f"  {dotted}")


if __name__ == "__main__":
    main()
