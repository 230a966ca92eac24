"""The ranks' learning-rate schedule (tntrun.engine.lr_schedule) evaluates the plan's formula
on TensorFlow as the planner does on NumPy, for every schedule with a decay."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.one_rank import tf
from tntrun.engine.lr_schedule import PlannedSchedule
from tntrun.planning.schedules import ScheduleParams, learning_rate

DECAYING = {
    "warmup_piecewise": {"boundaries": (400, 700)},
    "warmup_cosine": {"final_lr": 0.1},
    "warmup_poly": {"final_lr": 0.1, "power": 2.0},
}


@pytest.mark.parametrize("name", sorted(DECAYING))
def test_the_ranks_schedule_equals_the_plans_at_every_step(name):
    params = ScheduleParams(
        name, peak_lr=3.0, total_steps=1000, warmup_steps=100, warmup_start_lr=0.5, **DECAYING[name]
    )
    steps = np.arange(0, 1001, 7)
    planned = learning_rate(steps, params)
    ranks = PlannedSchedule(params)(tf.constant(steps)).numpy()
    np.testing.assert_allclose(ranks, planned, rtol=2e-6, atol=1e-7)
    assert planned.max() == pytest.approx(3.0, rel=0.02) and planned[-1] < 1.0
