"""The learning rate over every training step, drawn as an SVG line chart.

Written by hand rather than with a plotting library: the driver draws it after
every run and at every dry run, and importing matplotlib alone costs 0.4 s of CPU
(BENCHMARKS.md, whole-process CPU). MLflow's artifact viewer shows SVG as an image.
"""

from __future__ import annotations

import math
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np

from tntrun.planning.plan import Plan
from tntrun.planning.schedules import learning_rate

WIDTH, HEIGHT = 700, 350
LEFT, RIGHT, TOP, BOTTOM = 75, 20, 32, 48  # margins around the plot area
MAX_POINTS = 2000  # longer schedules are sampled evenly (first and last step kept)
LINE, STOP, GRID = "#1f77b4", "#d62728", "#e6e6e6"


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """About ``count`` (up to 1.25 x) round tick values from 0 to ``high``: steps of 1, 2,
    2.5 or 5 x 10^k."""
    if high <= 0:
        return [0.0]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * 0.8)
    return [k * step for k in range(int(math.floor(high / step * (1 + 1e-9))) + 1)]


def sampled_steps(total_steps: int) -> np.ndarray:
    """The steps drawn: all of them, or ``MAX_POINTS`` evenly spread ones."""
    if total_steps <= MAX_POINTS:
        return np.arange(total_steps)
    return np.unique(np.linspace(0, total_steps - 1, MAX_POINTS).round().astype(np.int64))


class Axes:
    """Data coordinates (step, learning rate) to SVG pixels."""

    def __init__(self, x_max: float, y_max: float) -> None:
        self.x_max, self.y_max = max(x_max, 1.0), max(y_max, 1e-30)
        self.width, self.height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(self, step: float) -> float:
        return LEFT + step / self.x_max * self.width

    def y(self, lr: float) -> float:
        return TOP + self.height - lr / self.y_max * self.height


def schedule_svg(plan: Plan) -> str:
    """The chart as an SVG document."""
    steps = sampled_steps(plan.schedule.total_steps)
    rates = learning_rate(steps, plan.schedule)
    y_ticks = nice_ticks(float(rates.max()) * 1.05)
    axes = Axes(float(plan.schedule.total_steps), max(y_ticks[-1], float(rates.max()) * 1.05))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        *_grid(axes, y_ticks, nice_ticks(float(plan.schedule.total_steps))),
        _schedule_line(axes, steps, rates),
        *(_stop_marker(axes, plan) if plan.stops_early else []),
        *_labels(axes, plan),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def _grid(axes: Axes, y_ticks: list[float], x_ticks: list[float]) -> list[str]:
    """Grid lines with their tick labels, then the plot area's frame."""
    bottom, right = TOP + axes.height, LEFT + axes.width
    parts = []
    for tick in y_ticks:
        y = axes.y(tick)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="{GRID}"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
    for tick in x_ticks:
        x = axes.x(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{bottom}" stroke="{GRID}"/>')
        parts.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{tick:g}</text>')
    parts.append(
        f'<rect x="{LEFT}" y="{TOP}" width="{axes.width}" height="{axes.height}" '
        'fill="none" stroke="#333"/>'
    )
    return parts


def _schedule_line(axes: Axes, steps: np.ndarray, rates: np.ndarray) -> str:
    """The learning rate at each drawn step, as one polyline."""
    points = " ".join(f"{axes.x(s):.2f},{axes.y(r):.2f}" for s, r in zip(steps, rates, strict=True))
    return (
        f'<polyline class="lr" fill="none" stroke="{LINE}" stroke-width="1.5" points="{points}"/>'
    )


def _stop_marker(axes: Axes, plan: Plan) -> list[str]:
    """A dashed line where a run that trains only the schedule's first epochs stops."""
    x, bottom, right = axes.x(plan.total_steps), TOP + axes.height, LEFT + axes.width
    return [
        f'<line class="stop" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{bottom}" '
        f'stroke="{STOP}" stroke-dasharray="5,3"/>',
        f'<text x="{right - 6}" y="{TOP + 16}" text-anchor="end" fill="{STOP}">'
        f"-- this run stops (epoch {plan.epochs})</text>",
    ]


def _labels(axes: Axes, plan: Plan) -> list[str]:
    """The title (schedule, peak LR, global batch) and the two axis labels."""
    title = (
        f"{plan.schedule.name}: peak {plan.scaled_lr:g}, global batch {plan.effective_batch_size}"
    )
    return [
        f'<text x="{WIDTH / 2}" y="{TOP - 12}" text-anchor="middle" font-size="13">'
        f"{escape(title)}</text>",
        f'<text x="{LEFT + axes.width / 2}" y="{HEIGHT - 10}" text-anchor="middle">'
        f"training step ({plan.steps_per_epoch} per epoch)</text>",
        f'<text transform="translate(16 {TOP + axes.height / 2}) rotate(-90)" '
        'text-anchor="middle">learning rate</text>',
    ]


def write_schedule_chart(plan: Plan, path: Path) -> Path:
    """Write :func:`schedule_svg` to ``path``."""
    path.write_text(schedule_svg(plan))
    return path
