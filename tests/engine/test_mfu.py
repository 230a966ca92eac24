"""Model FLOP utilisation on one rank in-process: the peak from the matmul cache when every
rank has one, the achieved rate from the model's FLOPs and the steady step time, and a
skipped MFU (the peak alone) without a step time."""

from __future__ import annotations

import pytest

from tests.engine.one_rank import classifier, horovod_of_one_rank
from tests.helpers.plans import plan_for
from tntrun.engine.flops import (
    cache_key,
    forward_flops_per_sample,
    training_flops_per_sample,
    write_cached,
)
from tntrun.engine.mfu import format_flops, model_flop_utilisation, peak_flops_across_ranks
from tntrun.planning.plan import DatasetInfo

INFO = DatasetInfo(num_train=16, num_val=8, input_shape=(3,), num_classes=2)
PEAK = 2.5e11


@pytest.fixture
def plan(compose_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    horovod_of_one_rank()
    made = plan_for(compose_cfg, "ranks_per_node=1")
    write_cached(cache_key(made.threads_per_rank, made.ranks_per_node), PEAK)
    return made


def test_the_peak_is_the_cached_rate_summed_over_the_ranks(plan):
    assert peak_flops_across_ranks(plan.threads_per_rank, plan.ranks_per_node) == PEAK


def test_mfu_is_achieved_over_peak(plan, capsys):
    model = classifier()
    metrics = model_flop_utilisation(model, INFO, plan, {"steady_step_time_ms": 10.0})
    per_sample = training_flops_per_sample(forward_flops_per_sample(model, (3,)))
    achieved = per_sample * plan.global_batch_size / 0.01
    assert metrics == pytest.approx(
        {
            "peak_flops_per_s": PEAK,
            "mfu": achieved / PEAK,
            "model_flops_per_sample": per_sample,
            "achieved_flops_per_s": achieved,
        }
    )
    assert "measured matmul peak (float32)" in capsys.readouterr().out


def test_without_a_steady_step_time_only_the_peak_is_logged(plan, capsys):
    assert model_flop_utilisation(classifier(), INFO, plan, {}) == {"peak_flops_per_s": PEAK}
    assert "mfu: skipped, no steady step time" in capsys.readouterr().out


def test_rates_are_shown_in_their_unit():
    assert [format_flops(r) for r in (1.234e12, 5e15, 3e6, 12.0)] == [
        "1.23 TFLOP/s",
        "5 PFLOP/s",
        "3 MFLOP/s",
        "12 FLOP/s",
    ]
