"""What the gradient noise scale advises (pure: numbers in, advice out)."""

from __future__ import annotations

import math

import pytest

from tests.helpers.plans import plan_for
from tntrun.planning.batch_advice import (
    BatchAdvice,
    NoAdvice,
    advise,
    duration,
    final_noise_scale,
    noise_scale_problem,
    samples,
    steps_factor,
)


def test_steps_follow_the_papers_model():
    # S(B) = S_min (1 + B_noise / B): at B_noise = 384, B = 128, twice the batch needs
    # (1 + 3) / (1 + 1.5) = 1.6 times fewer steps, four times 4 / 1.75 = 2.286.
    assert 1 / steps_factor(384, 128, 256) == pytest.approx(1.6)
    assert 1 / steps_factor(384, 128, 512) == pytest.approx(4 / 1.75)
    # Far below the noise scale a doubled batch halves the steps; far above it, nothing.
    assert steps_factor(1e6, 8, 16) == pytest.approx(0.5, rel=1e-4)
    assert steps_factor(1, 1e6, 2e6) == pytest.approx(1.0, rel=1e-5)


def test_the_batch_line_reads_the_figures_with_their_units():
    advice = BatchAdvice(noise_scale=410.0, batch=128, micro_batch=64)
    assert advice.fewer_steps(2) == pytest.approx(1.615, abs=1e-3)
    assert advice.lines() == [
        "gradient noise scale 410 samples (global batch 128 samples per update): "
        "2x the batch needs ~1.6x fewer steps (1.2x the samples); "
        "4x the batch needs ~2.3x fewer steps (1.7x the samples)"
    ]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (math.nan, "is nan"),
        (math.inf, "is inf"),
        (0.0, "is 0: its estimates of |G|^2 and tr(Sigma) are not both above zero"),
        (-35.0, "is -35: its estimates"),
    ],
)
def test_nonsense_is_refused_with_its_reason(compose_cfg, value, why):
    assert why in noise_scale_problem(value)
    plan = plan_for(compose_cfg, "ranks_per_node=2")
    advice = advise(plan, value)
    assert isinstance(advice, NoAdvice)
    assert advice.lines() == [
        f"no batch advice: not measured reliably: {noise_scale_problem(value)}"
    ]


def test_the_final_noise_scale_is_the_ratio_of_the_last_estimates():
    last = {"gradient_noise_scale": 300.0, "gns_gradient_sq": 0.5, "gns_trace": 200.0}
    assert final_noise_scale(last) == 400.0  # the last epoch's, not an earlier epoch's ratio
    # The last |G|^2 estimate not positive: the run left gradient_noise_scale out, the advice
    # refuses the ratio rather than read an older epoch's value.
    assert final_noise_scale({**last, "gns_gradient_sq": -0.5}) == -400.0
    assert final_noise_scale({**last, "gns_gradient_sq": 0.0}) == 0.0
    assert final_noise_scale({"gradient_noise_scale": 300.0}) == 300.0
    assert final_noise_scale({"loss": 0.1}) is None


def test_a_run_that_logged_no_noise_scale_says_so(compose_cfg):
    assert "logged no gradient_noise_scale" in noise_scale_problem(None)
    advice = advise(plan_for(compose_cfg, "ranks_per_node=2"), None)
    assert isinstance(advice, NoAdvice)
    assert advice.reason.endswith("(train.gradient_noise_scale=false turns it off)")


def test_one_rank_says_why_nothing_is_advised(compose_cfg):
    advice = advise(plan_for(compose_cfg, "ranks_per_node=1"), 410.0)
    assert isinstance(advice, NoAdvice)
    assert "not measured on one rank" in advice.reason


def test_the_run_batch_is_the_samples_per_update(compose_cfg):
    plan = plan_for(
        compose_cfg,
        "ranks_per_node=2",
        "global_batch_size=64",
        "horovod.backward_passes_per_step=2",
    )
    advice = advise(plan, 300.0)
    assert isinstance(advice, BatchAdvice)
    assert (advice.batch, advice.micro_batch) == (128, 32)


def test_time_to_the_same_loss_weighs_step_time_by_steps(compose_cfg):
    plan = plan_for(compose_cfg, "ranks_per_node=2", "global_batch_size=64", "train.epochs=2")
    steps = plan.total_steps
    # Step times from the scaling predictor, in ranks: communication grows with the ranks.
    step_times = [(1, 0.010), (2, 0.012), (4, 0.013), (8, 0.016), (16, 0.030)]
    advice = advise(plan, 256.0, step_times)
    assert isinstance(advice, BatchAdvice)
    rows = {row.world_size: row for row in advice.node_times}
    assert sorted(rows) == [2, 4, 8, 16]  # whole nodes of 2 ranks only
    assert rows[2].nodes == 1 and rows[2].steps_factor == pytest.approx(1.0)
    assert rows[2].time_s == pytest.approx(steps * 0.012)
    # 8 ranks: B = 32 x 8 = 256, steps (1 + 1) / (1 + 4) of this run's.
    assert rows[8].batch == 256 and rows[8].steps_factor == pytest.approx(2 / 5)
    assert rows[8].time_s == pytest.approx(steps * 0.4 * 0.016)
    # 16 ranks: (1 + 0.5) / 5 = 0.3 of the steps at 0.030 s (0.009 s a step of this run's)
    # lose to 8 ranks' 0.4 x 0.016 (0.0064 s); 4 ranks: 0.6 x 0.013 (0.0078 s).
    assert advice.fastest is rows[8]
    line = advice.lines()[1]
    assert line.startswith("predicted time to this run's loss at micro-batch 32: 1 node ")
    assert line.endswith(
        f"fastest on 4 nodes (8 ranks) ({duration(rows[8].time_s)}, global batch 256), "
        "1.9x sooner than on this run's 1 node (2 ranks)"  # 0.012 / 0.0064
    )


def test_fewer_ranks_than_a_node_are_named_in_ranks(compose_cfg):
    plan = plan_for(compose_cfg, "ranks_per_node=2", "global_batch_size=64")
    advice = advise(plan, 100.0, [(1, 0.01)])  # no prediction fills a whole node of 2
    assert isinstance(advice, BatchAdvice)
    assert "1 rank " in advice.time_line()


def test_numbers_keep_their_units_short():
    assert [samples(v) for v in (410.4, 12345.0, 3.14159, 0.0123)] == [
        "410",
        "12300",
        "3.14",
        "0.0123",
    ]
    assert [duration(s) for s in (4.2, 600, 36000)] == ["4.2 s", "10 min", "10 h"]
