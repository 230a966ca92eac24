"""The composed config, typed once: the schema's dataclasses with enums as enums.

A run's config is typed here, where it is composed, and travels inside the Plan
(``plan.json``) to the ranks, so no later stage re-types a value (``int(cfg.x)``)
or reads the config tree. The rule for what is typed: every section tntrun defines
(``train``, ``checkpoint``, ``horovod``, ``tracking``, ``schedule`` and the top-level
keys) becomes its dataclass; the sections whose keys the user's target defines
(``model``, ``dataset``, ``optimizer``, ``callbacks``: keyword arguments of a
constructor) stay plain dicts, checked at composition by their schemas and targets.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tntrun.config.schema import TRACKING_KEYS, TntrunConfig, TrackingConfig
from tntrun.contract.checkpoints import config_hash
from tntrun.errors import PlanError

# Sections whose keys the user's target defines: plain dicts, as given.
TARGET_SECTIONS = ("model", "dataset", "optimizer", "callbacks")


@dataclass
class Settings(TntrunConfig):
    """The composed config, typed; ``tracker_options``: the keys another tracker than
    MLflow's takes (``+tracking.<key>``) beyond the schema's, which its class defines."""

    tracker_options: dict[str, Any] = field(default_factory=dict)


def settings_of(plain: Mapping[str, Any]) -> Settings:
    """Type a resolved config (a plain nested mapping, enums as names or members)."""
    refuse_unknown_keys(plain)
    tracking = dict(plain.get("tracking") or {})
    options = {k: tracking.pop(k) for k in list(tracking) if k not in TRACKING_KEYS}
    typed_part = {k: v for k, v in plain.items() if k not in TARGET_SECTIONS}
    typed_part.update({k: {} for k in TARGET_SECTIONS})  # set below, as given
    typed_part["tracking"] = tracking
    if "tracker_options" in plain:  # a Plan's own settings, written by plain_settings
        options = {**plain["tracker_options"], **options}
    typed_part["tracker_options"] = options
    merged = OmegaConf.merge(OmegaConf.structured(Settings), typed_part)
    settings = OmegaConf.to_object(merged)
    assert isinstance(settings, Settings)  # noqa: S101  # to_object of a Settings node
    as_given = {k: _plain(plain[k]) for k in TARGET_SECTIONS if k in plain}
    return replace(settings, **as_given)


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


def recorded_settings(config_file: Path) -> tuple[Settings, str]:
    """The settings and problem hash of a run directory's ``config.yaml`` (a run written
    before its plan carried them): typed through the schema, as when it was composed."""
    recorded = OmegaConf.load(config_file)
    composed = OmegaConf.merge(OmegaConf.structured(TntrunConfig), recorded)
    plain = OmegaConf.to_container(recorded, resolve=True)
    return settings_of(plain), problem_hash(composed)


def plain_settings(settings: Settings) -> dict[str, Any]:
    """The settings as JSON-ready data (enums by their value): ``settings_of``'s inverse."""
    return _plain(dataclasses.asdict(settings))


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
