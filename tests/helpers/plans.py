"""Plans built from composed configs with fixed dataset and machine facts, and the chart
a plan draws (for the planning tests and those that check a plan's parts)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tntrun.config.compose import plain_config
from tntrun.launch import with_launch_command
from tntrun.planning.plan import DatasetInfo, MachineFacts, Plan, build_plan

DIGITS = DatasetInfo(num_train=1438, num_val=359, input_shape=(64,), num_classes=10)
IMAGENET = DatasetInfo(
    num_train=1_281_167, num_val=50_000, input_shape=(224, 224, 3), num_classes=1000
)
FACTS = MachineFacts(cores_per_node=2, numactl="/usr/bin/numactl")
SVG = "{http://www.w3.org/2000/svg}"


def plan_for(compose_cfg, *overrides: str, data=DIGITS, facts=FACTS) -> Plan:
    cfg = plain_config(compose_cfg(*overrides), list(overrides), {})
    return with_launch_command(build_plan(cfg, data, facts, Path("/runs/x")), cfg, facts)


def line_points(svg: str) -> list[tuple[float, float]]:
    """The points of the learning-rate line of a schedule chart."""
    root = ET.fromstring(svg)
    (line,) = [e for e in root.iter(f"{SVG}polyline") if e.get("class") == "lr"]
    return [tuple(map(float, p.split(","))) for p in line.get("points").split()]
