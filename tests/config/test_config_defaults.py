"""One source per default: conf/ YAML sets what the schema leaves open or changes on purpose.

The schema (tntrun/config/schema.py and the zoos' ``SCHEMAS``) holds every default. A YAML
value equal to the default it would get anyway is a second source that drifts; a value that
changes a default says why in a comment, on its line or on the line above. An experiment is
compared with the config its group choices give without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from tntrun.config.compose import compose_config
from tntrun.config.schema import TntrunConfig, register

CONF = Path(str(files("tntrun.conf")))
# Hydra's settings and the submitit launcher's: their defaults are the plugins', not tntrun's.
NOT_TNTRUN_SCHEMA = ("hydra",)
OPEN = "???"  # MISSING in the schema: the YAML is where the value comes from
ABSENT = object()  # a key the schema does not declare (a custom model's free keys)


@dataclass(frozen=True)
class YamlValue:
    file: Path
    name: str  # the file's path in conf/
    line: int  # 0-based
    key: str  # dotted, from the file's package
    value: Any

    def where(self) -> str:
        return f"{self.name}:{self.line + 1} {self.key}"


def leaves(node: yaml.Node, data: Any, prefix: str = "") -> Iterator[tuple[int, str, Any]]:
    """(line, dotted key, value) of every leaf below a YAML mapping (lists are leaves)."""
    for key_node, value_node in node.value:
        key = f"{prefix}{key_node.value}"
        value = data[key_node.value]
        if isinstance(value_node, yaml.MappingNode) and value:
            yield from leaves(value_node, value, f"{key}.")
        else:
            yield key_node.start_mark.line, key, value


def yaml_values(path: Path, conf: Path) -> list[YamlValue]:
    """The values a conf/ file sets (not its defaults list, not Hydra's settings)."""
    root = yaml.compose(path.read_text())
    if root is None:
        return []
    data = OmegaConf.to_container(OmegaConf.load(path))
    return [
        YamlValue(path, path.relative_to(conf).as_posix(), line, key, value)
        for line, key, value in leaves(root, data)
        if key.split(".")[0] not in ("defaults", *NOT_TNTRUN_SCHEMA)
    ]


def defaults_list(path: Path) -> list[Any]:
    return (yaml.safe_load(path.read_text()) or {}).get("defaults") or []


def plain(node: Any) -> dict[str, Any]:
    return OmegaConf.to_container(node, enum_to_str=True)


def schema_of(path: Path, conf: Path) -> dict[str, Any]:
    """The defaults a file's values are measured against (as plain data)."""
    if path.read_text().startswith("# @package _global_") or path.parent == conf:
        return plain(OmegaConf.structured(TntrunConfig))
    for entry in defaults_list(path):
        if isinstance(entry, str) and entry.startswith("/schema/"):
            name = entry.removeprefix("/").split("@")[0]
            return plain(ConfigStore.instance().load(f"{name}.yaml").node)
    return {}  # no schema (model=custom, dataset=custom): every value fills an open key


def experiment_choices(path: Path) -> dict[str, str]:
    """The group options an experiment selects (``override /model: resnet50``)."""
    return {
        key.removeprefix("override /"): option
        for entry in defaults_list(path)
        if isinstance(entry, dict)
        for key, option in entry.items()
    }


def experiment_base(path: Path) -> dict[str, Any]:
    """The config an experiment's group choices give without the experiment's own values."""
    choices = experiment_choices(path)
    return plain(compose_config([f"{group}={option}" for group, option in choices.items()])[0])


def default_at(defaults: dict[str, Any], key: str) -> Any:
    node: Any = defaults
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return ABSENT
        node = node[part]
    return node


def same(value: Any, default: Any) -> bool:
    """Equal as config values (``true`` is not ``1``)."""
    return value == default and isinstance(value, bool) == isinstance(default, bool)


def says_why(value: YamlValue) -> bool:
    lines = value.file.read_text().splitlines()
    after_key = lines[value.line].split(":", 1)[1]
    return " #" in after_key or (value.line > 0 and lines[value.line - 1].lstrip().startswith("#"))


def checked_values(conf: Path) -> Iterator[tuple[YamlValue, Any]]:
    """(value, the default it replaces) for every value tntrun's schema governs.

    An experiment's values replace what its group choices give (which may set a value back to
    the schema's default: inverse_sqrt's scaling none, for one).
    """
    register()
    for path in sorted(conf.rglob("*.yaml")):
        if path.relative_to(conf).parts[0] in NOT_TNTRUN_SCHEMA:
            continue
        is_experiment = path.parent.name == "experiment"
        defaults = experiment_base(path) if is_experiment else schema_of(path, conf)
        for value in yaml_values(path, conf):
            yield value, default_at(defaults, value.key)


def restated(conf: Path) -> list[str]:
    return [
        f"{value.where()}: {value.value!r} is the default already"
        for value, default in checked_values(conf)
        if same(value.value, default)
    ]


def unexplained(conf: Path) -> list[str]:
    return [
        f"{value.where()}: {value.value!r} changes the default {default!r} without a comment"
        for value, default in checked_values(conf)
        if default is not ABSENT and default != OPEN and not same(value.value, default)
        if not says_why(value)
    ]


def test_no_yaml_value_restates_its_default():
    assert restated(CONF) == []


def test_every_changed_default_says_why():
    assert unexplained(CONF) == []


def test_the_checks_see_a_restated_and_an_unexplained_default(tmp_path):
    group = tmp_path / "horovod"
    group.mkdir()
    (group / "mine.yaml").write_text(
        "defaults:\n  - /schema/horovod/horovod@_here_\n  - _self_\n\n"
        "start_timeout: 60\n"
        "autotune: true\n"
        "# Knob tuning costs the first minutes of a short run.\n"
        "cycle_time_ms: 1.5\n"
        "timeline: true  # see where the allreduce waits\n"
    )
    assert restated(tmp_path) == ["horovod/mine.yaml:5 start_timeout: 60 is the default already"]
    assert unexplained(tmp_path) == [
        "horovod/mine.yaml:6 autotune: True changes the default False without a comment"
    ]
