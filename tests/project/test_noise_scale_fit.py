"""The noise scale validation bench's arithmetic on synthetic data: the fit of
S(B) = S_min (1 + B_crit / B), steps to a target loss, and the verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.noise_scale_validation import (
    RunRecord,
    agreement,
    best_tuned,
    centred_mean,
    fit_critical_batch,
    step_noise_scale,
    steps_to_target,
    validate,
)

BATCHES = [32, 64, 128, 256, 512, 1024]


@pytest.mark.parametrize(("s_min", "b_crit"), [(40.0, 300.0), (500.0, 20.0), (10.0, 5000.0)])
def test_the_fit_recovers_s_min_and_b_crit_from_exact_steps(s_min, b_crit):
    steps = [s_min * (1 + b_crit / b) for b in BATCHES]
    fit = fit_critical_batch(BATCHES, steps)
    assert fit.b_crit == pytest.approx(b_crit, rel=1e-3)
    assert fit.s_min == pytest.approx(s_min, rel=1e-3)
    assert fit.rms_log_error < 1e-3
    # The paper's form: (S / S_min - 1)(E / E_min - 1) = 1 with E = S B samples.
    for batch, s in zip(BATCHES, steps, strict=True):
        assert (s / fit.s_min - 1) * (s * batch / fit.e_min - 1) == pytest.approx(1, rel=1e-2)


def test_the_fit_holds_within_noise_of_measured_steps():
    rng = np.random.default_rng(3)
    steps = [60 * (1 + 250 / b) * math.exp(rng.normal(0, 0.05)) for b in BATCHES]
    fit = fit_critical_batch(BATCHES, steps)
    assert 250 / 1.5 < fit.b_crit < 250 * 1.5
    assert 0.01 < fit.rms_log_error < 0.1


def test_one_batch_cannot_be_fitted():
    with pytest.raises(ValueError, match="two or more batches"):
        fit_critical_batch([64, 64], [100, 110])


def test_steps_to_target_smooth_over_as_many_samples_at_every_batch():
    # A loss falling linearly from 1, crossing 0.5 at step 100, with +-0.3 noise that
    # alternates every step: the raw loss crosses at step 40, the centred mean near 100.
    losses = [(s, 1 - 0.005 * s + (0.3 if s % 2 else -0.3)) for s in range(1, 200)]
    assert next(s for s, v in losses if v <= 0.5) == 40
    assert steps_to_target(losses, 0.5, batch=32, window_samples=0) == 40
    assert steps_to_target(losses, 0.5, batch=32, window_samples=640) == pytest.approx(100, abs=2)
    assert steps_to_target(losses, 0.01, batch=32, window_samples=640) is None
    assert centred_mean([(1, 1.0), (2, 3.0), (3, 5.0)], 1) == [(1, 2.0), (2, 3.0), (3, 4.0)]


def test_a_step_line_gives_the_ratio_of_its_smoothed_estimates():
    line = {"step_loss": 0.3, "step_gns_gradient_sq": 0.02, "step_gns_trace": 5.0}
    assert step_noise_scale(line) == pytest.approx(250.0)
    assert math.isnan(step_noise_scale({**line, "step_gns_gradient_sq": -0.02}))
    assert step_noise_scale({"step_loss": 0.3}) is None


def test_the_verdict_is_the_papers_factor_of_three():
    assert agreement(300, 120) == "B_simple / B_crit = 2.50: within a factor of 3"
    assert agreement(30, 120).endswith("NOT within a factor of 3")


def test_a_workload_table_from_runs_that_follow_the_model():
    def record(batch: int) -> RunRecord:
        steps = round(50 * (1 + 200 / batch))
        losses = [(s, 1 - 0.5 * s / steps) for s in range(1, 2 * steps)]  # 0.5 at `steps`
        return RunRecord(batch, losses, {s: 150.0 for s, _ in losses})

    lines = validate("mlp", [record(b) for b in BATCHES], target=0.5, window=0)
    assert lines[0] == "### mlp: steps to a training loss of 0.5"
    assert "| 32 | default | 362 | 362 | 150 |" in lines
    (fit,) = [line for line in lines if line.startswith("- fit:")]
    assert "B_crit = 198 samples" in fit  # 200, to the rounding of the steps
    b_crit = fit_critical_batch(BATCHES, [round(50 * (1 + 200 / b)) for b in BATCHES]).b_crit
    assert lines[-1] == f"- B_simple (median) = 150 samples; {agreement(150, b_crit)}"


def test_of_a_batch_s_lr_grid_the_run_that_reached_the_target_first_is_kept():
    def record(base_lr: float, slope: float) -> RunRecord:
        return RunRecord(64, [(s, 1 - slope * s) for s in range(1, 200)], {}, base_lr)

    slow, fast, never = record(0.001, 0.005), record(0.002, 0.01), record(0.004, 0.0)
    assert best_tuned([slow, never, fast], target=0.5, window=0) is fast
    assert best_tuned([never, slow], target=0.5, window=0) is slow
