"""The learning-rate chart: an SVG whose line is the schedule, drawn without a plotting library."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

import pytest

from tests.helpers.plans import SVG, line_points, plan_for
from tntrun.planning import schedule_chart
from tntrun.planning.schedule_chart import nice_ticks, sampled_steps, schedule_svg
from tntrun.planning.schedules import learning_rate


@pytest.mark.parametrize(
    "high, expected",
    [
        (1.0, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (220, [0, 50, 100, 150, 200]),
        (0.0525, [0, 0.01, 0.02, 0.03, 0.04, 0.05]),
        (7, [0, 2, 4, 6]),
        (0, [0.0]),
    ],
)
def test_ticks_are_round_and_within_range(high, expected):
    assert nice_ticks(high) == pytest.approx(expected)


def test_long_schedules_are_sampled_keeping_both_ends():
    assert list(sampled_steps(5)) == [0, 1, 2, 3, 4]
    steps = sampled_steps(1_000_000)
    assert len(steps) == schedule_chart.MAX_POINTS and steps[0] == 0 and steps[-1] == 999_999


def test_the_line_is_the_schedule_at_every_step(compose_cfg):
    plan = plan_for(
        compose_cfg,
        "schedule=warmup_piecewise",
        "train.epochs=10",
        "optimizer=sgd",
        "schedule.warmup_epochs=2",
        "schedule.boundaries_epochs=[4,6,8]",
    )
    svg = schedule_svg(plan)
    root = ET.fromstring(svg)
    assert (root.get("width"), root.get("height")) == ("700", "350")
    points = line_points(svg)
    assert len(points) == plan.schedule.total_steps == 220
    axes = schedule_chart.Axes(220.0, 0)  # only its pixel geometry is used below
    top, bottom = schedule_chart.TOP, schedule_chart.TOP + axes.height
    peak_y = min(y for _, y in points)
    # Back from pixels to learning rates: linear, 0 at the bottom edge, the peak at the top.
    peak = plan.scaled_lr
    for step, (x, y) in enumerate(points):
        assert x == pytest.approx(schedule_chart.LEFT + step / 220 * axes.width, abs=0.01)
        lr = (bottom - y) / (bottom - peak_y) * peak
        assert lr == pytest.approx(learning_rate(step, plan.schedule), rel=1e-3, abs=1e-6), step
    assert top < peak_y < bottom
    assert "warmup_piecewise: peak 0.025, global batch 64" in svg
    assert "stops" not in svg  # runs the whole schedule


def test_a_run_stopping_early_is_marked(compose_cfg):
    plan = plan_for(compose_cfg, "schedule=warmup_cosine", "train.epochs=10", "+schedule.epochs=20")
    assert plan.stops_early
    root = ET.fromstring(schedule_svg(plan))
    (stop,) = [e for e in root.iter(f"{SVG}line") if e.get("class") == "stop"]
    half = (
        schedule_chart.LEFT
        + (schedule_chart.WIDTH - schedule_chart.LEFT - schedule_chart.RIGHT) / 2
    )
    assert float(stop.get("x1")) == pytest.approx(half, abs=0.1)
    assert "this run stops (epoch 10)" in ET.tostring(root, encoding="unicode")


def test_drawing_needs_no_plotting_library(compose_cfg, monkeypatch):
    for name in ("matplotlib", "matplotlib.pyplot"):  # an ImportError, if the chart tried
        monkeypatch.setitem(sys.modules, name, None)
    assert "<svg" in schedule_svg(plan_for(compose_cfg))
