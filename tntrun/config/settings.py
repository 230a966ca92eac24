"""The composed config, typed once: the schema's dataclasses with enums as enums.

A run's config is typed here, where it is composed, and travels inside the Plan
(``plan.json``) to the ranks, so no later stage re-types a value (``int(cfg.x)``)
or reads the config tree. The rule for what is typed: every section tntrun defines
(``train``, ``eval``, ``faults``, ``checkpoint``, ``horovod``, ``tracking``, ``schedule``
and the top-level keys) becomes its dataclass; the sections whose keys the user's target
defines (``model``, ``dataset``, ``callbacks``: keyword arguments of a constructor) stay
plain dicts, checked at composition by their schemas and targets. The ``optimizer`` is
both: what tntrun plans the learning rate with is typed (:class:`OptimizerSettings`), the
class's own keyword arguments stay a dict beside it.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from tntrun.config.moved_keys import current_layout
from tntrun.config.schema import TRACKING_KEYS, TntrunConfig, TrackingConfig
from tntrun.contract.checkpoints import config_hash
from tntrun.errors import PlanError

# Sections whose keys the user's target defines: plain dicts, as given.
TARGET_SECTIONS = ("model", "dataset", "callbacks")
# The optimizer section's keys that plan the learning rate or name the class: typed; the
# others are the class's own keyword arguments.
OPTIMIZER_PLAN_KEYS = ("name", "_target_", "base_lr", "base_batch_size")


@dataclass
class OptimizerSettings:
    """The ``optimizer`` section, typed where tntrun reads it: the learning rate and the
    batch it is right at, and which class; ``arguments`` holds the class's own keyword
    arguments as given (the schema's for an optimizer tntrun names, the user's for a
    ``_target_``), which only that class knows."""

    base_lr: float = MISSING
    base_batch_size: int = MISSING
    name: str | None = None  # tntrun's name of a Keras optimizer (schema.OPTIMIZER_SCHEMAS)
    target: str | None = None  # or the user's class (optimizer=custom), its dotted path
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> OptimizerSettings:
        """A section's fields as given (``settings_of`` types them through the schema)."""
        return cls(**optimizer_fields(section))

    def section(self) -> dict[str, Any]:
        """The section as the config states it (``optimizer_fields``' inverse)."""
        named = {"name": self.name} if self.name is not None else {}
        targeted = {"_target_": self.target} if self.target is not None else {}
        planned = {"base_lr": self.base_lr, "base_batch_size": self.base_batch_size}
        return {**named, **targeted, **planned, **self.arguments}


def optimizer_fields(section: Mapping[str, Any]) -> dict[str, Any]:
    """An ``optimizer`` section as :class:`OptimizerSettings`' fields."""
    return {
        "base_lr": section.get("base_lr", MISSING),
        "base_batch_size": section.get("base_batch_size", MISSING),
        "name": section.get("name"),
        "target": section.get("_target_"),
        "arguments": {k: v for k, v in section.items() if k not in OPTIMIZER_PLAN_KEYS},
    }


@dataclass
class Settings(TntrunConfig):
    """The composed config, typed; ``tracker_options``: the keys another tracker than
    MLflow's takes (``+tracking.<key>``) beyond the schema's, which its class defines."""

    optimizer: OptimizerSettings = field(default_factory=OptimizerSettings)
    tracker_options: dict[str, Any] = field(default_factory=dict)


def settings_of(plain: Mapping[str, Any]) -> Settings:
    """Type a resolved config (a plain nested mapping, enums as names or members); one
    stored by an earlier run may hold keys that moved since."""
    plain = current_layout(plain)
    refuse_unknown_keys(plain)
    tracking = dict(plain.get("tracking") or {})
    options = {k: tracking.pop(k) for k in list(tracking) if k not in TRACKING_KEYS}
    typed_part = {k: v for k, v in plain.items() if k not in TARGET_SECTIONS}
    typed_part.update({k: {} for k in TARGET_SECTIONS})  # set below, as given
    typed_part["tracking"] = tracking
    typed_part["optimizer"] = optimizer_fields(plain.get("optimizer") or {})
    if "tracker_options" in plain:  # a Plan's own settings, written by plain_settings
        options = {**plain["tracker_options"], **options}
    typed_part["tracker_options"] = options
    hosts = typed_part.pop("hosts", None)  # typed below: OmegaConf takes 0.3 ms a host
    merged = OmegaConf.merge(OmegaConf.structured(Settings), typed_part)
    settings = OmegaConf.to_object(merged)
    assert isinstance(settings, Settings)  # noqa: S101  # to_object of a Settings node
    as_given = {k: _plain(plain[k]) for k in TARGET_SECTIONS if k in plain}
    return replace(settings, hosts=host_names(hosts), **as_given)


def host_names(hosts: Any) -> list[str] | None:
    """``hosts`` typed as the schema's ``list[str] | None`` types it (each item as text; the
    layout checks the names), without OmegaConf's node per host: a thousand hosts cost it
    0.3 s, in the driver and in every rank reading plan.json."""
    if hosts is None:
        return None
    if not isinstance(hosts, list | tuple):
        raise PlanError(f"hosts={hosts!r}: hosts takes a list, e.g. [a,b] or null")
    return [str(h) for h in hosts]


def refuse_unknown_keys(plain: Mapping[str, Any]) -> None:
    """A top-level key the schema does not know (``+foo=3``; Hydra adds it) is one line
    naming it and the close known keys, not OmegaConf's traceback."""
    known = [f.name for f in fields(Settings)]
    unknown = sorted(set(plain) - set(known))
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise PlanError(
            f"{unknown[0]}: tntrun has no such key; {hint}remove +{unknown[0]}=... "
            "(tntrun's keys: tntrun --cfg job)"
        )


def tracking_settings(tracking: Mapping[str, Any]) -> TrackingConfig:
    """A ``tracking`` section alone, typed (a sweep's, whose jobs have the whole settings);
    another tracker's own keys are left out."""
    given = {k: v for k, v in tracking.items() if k in TRACKING_KEYS}
    typed = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrackingConfig), given))
    assert isinstance(typed, TrackingConfig)  # noqa: S101  # to_object of a TrackingConfig node
    return typed


def problem_hash(config: DictConfig) -> str:
    """The training problem's hash (:func:`tntrun.contract.checkpoints.config_hash`) of a
    composed config: what ``resume=auto`` looks runs up by, computed once into the Plan."""
    return config_hash(OmegaConf.to_container(config, resolve=True))


def stored_config(config_file: Path) -> DictConfig:
    """A run directory's ``config.yaml`` in today's layout (an earlier tntrun's moved keys
    at their new places), typed through the schema as when it was composed."""
    recorded = OmegaConf.to_container(OmegaConf.load(config_file))
    assert isinstance(recorded, dict)  # noqa: S101  # a config.yaml holds a mapping
    return OmegaConf.merge(OmegaConf.structured(TntrunConfig), current_layout(recorded))


def recorded_settings(config_file: Path) -> tuple[Settings, str]:
    """The settings and problem hash of a run directory's ``config.yaml`` (a run written
    before its plan carried them)."""
    composed = stored_config(config_file)
    return settings_of(OmegaConf.to_container(composed, resolve=True)), problem_hash(composed)


def plain_settings(settings: Settings) -> dict[str, Any]:
    """The settings as JSON-ready data (enums by their value), the optimizer as the config
    states it: ``settings_of``'s inverse."""
    plain = _plain(dataclasses.asdict(settings))
    plain["optimizer"] = _plain(settings.optimizer.section())
    return plain


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
