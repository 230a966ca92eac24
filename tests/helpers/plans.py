"""Plans built from composed configs with fixed dataset and machine facts, and the chart
a plan draws (for the planning tests and those that check a plan's parts)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

from omegaconf import OmegaConf

from tntrun.config.schema import HorovodConfig
from tntrun.launch.launcher import LaunchSpec
from tntrun.planning.knobs import horovod_knobs
from tntrun.planning.plan import DatasetInfo, MachineFacts, Plan, ResumePoint
from tntrun.preparation import PlanInputs, typed_experiment

DIGITS = DatasetInfo(num_train=1438, num_val=359, input_shape=(64,), num_classes=10)
IMAGENET = DatasetInfo(
    num_train=1_281_167, num_val=50_000, input_shape=(224, 224, 3), num_classes=1000
)
FACTS = MachineFacts(cores_per_node=2, numactl="/usr/bin/numactl")
SVG = "{http://www.w3.org/2000/svg}"


def plan_for(
    compose_cfg,
    *overrides: str,
    data=DIGITS,
    facts=FACTS,
    run_dir: Path = Path("/runs/x"),
    resume: ResumePoint | None = None,
) -> Plan:
    """The plan the driver would make of ``overrides`` (no dataset sized, no targets vetted:
    ``data`` and ``facts`` stand for them)."""
    typed = typed_experiment(compose_cfg(*overrides), list(overrides), facts.allocation)
    return PlanInputs(typed.settings, typed.config_hash, data, facts, run_dir).plan(resume)


def settings_for(compose_cfg, *overrides: str):
    """The typed settings of ``overrides``."""
    return typed_experiment(compose_cfg(*overrides), list(overrides), None).settings


def line_points(svg: str) -> list[tuple[float, float]]:
    """The points of the learning-rate line of a schedule chart."""
    root = ET.fromstring(svg)
    (line,) = [e for e in root.iter(f"{SVG}polyline") if e.get("class") == "lr"]
    return [tuple(map(float, p.split(","))) for p in line.get("points").split()]


def horovod_settings(given: dict) -> HorovodConfig:
    """``horovod.*`` as the settings type it (``given``: plain values, enums by name)."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(HorovodConfig), given))


def with_horovod(spec: LaunchSpec, run_dir: Path, given: dict) -> LaunchSpec:
    """``spec`` launching with ``horovod.*`` = ``given`` (plain values): the typed settings
    and the knobs they render, as the planner hands both to a launcher."""
    settings = horovod_settings(given)
    return replace(spec, horovod=settings, knobs=horovod_knobs(settings, run_dir))
