"""The ring-allreduce alpha-beta scaling model (pure: no TensorFlow, no ranks)."""

from __future__ import annotations

import math

import pytest

from tntrun.planning.scaling_model import (
    LinkCost,
    ScalingProfile,
    fit_link,
    fusion_buffers,
    parse_csv,
    predict,
    render_csv,
    render_table,
    validation_error,
)

LINK = LinkCost(latency_s=50e-6, seconds_per_byte=1 / 2e9)  # 50 us, 2 GB/s
MIB = 1 << 20


def profile(**changes) -> ScalingProfile:
    values = dict(
        compute_s=0.100,
        gradient_bytes=100 * MIB,
        gradient_tensors=161,
        fusion_threshold_bytes=None,
        backward_passes_per_step=1,
        link=LINK,
        micro_batch_size=32,
        profiled_world_size=2,
        measured_step_s=0.160,
    )
    return ScalingProfile(**{**values, **changes})


@pytest.mark.parametrize("world", [2, 3, 8])
def test_fit_recovers_alpha_and_beta_from_ring_times(world):
    sizes = [4 << 10, 64 << 10, MIB, 8 * MIB, 64 * MIB]
    times = [
        2 * (world - 1) * LINK.latency_s + 2 * (world - 1) / world * n * LINK.seconds_per_byte
        for n in sizes
    ]
    fitted = fit_link(sizes, times, world)
    assert fitted.latency_s == pytest.approx(LINK.latency_s, rel=1e-6)
    assert fitted.bandwidth_bytes_per_s == pytest.approx(2e9, rel=1e-6)


def test_fit_needs_two_ranks_and_two_sizes():
    with pytest.raises(ValueError, match="2 or more ranks"):
        fit_link([1, 2], [1.0, 2.0], world=1)
    with pytest.raises(ValueError, match="two message sizes"):
        fit_link([MIB, MIB], [1.0, 1.1], world=2)


def test_fusion_buffers_follow_the_threshold():
    assert fusion_buffers(97 * MIB, 161, None) == 1  # Horovod's 128 MiB default
    assert fusion_buffers(97 * MIB, 161, 64 * MIB) == 2
    assert fusion_buffers(97 * MIB, 161, 0) == 161  # fusion off: one buffer per tensor


def test_prediction_matches_the_formula_by_hand():
    rows = {r.world_size: r for r in predict(profile(), worlds=[1, 2, 4])}
    assert rows[1].step_s == pytest.approx(0.100) and rows[1].efficiency == 1.0
    # N=4: 1 buffer x 6 messages x 50 us + 1.5 x 100 MiB / 2 GB/s
    allreduce = 6 * 50e-6 + 1.5 * 100 * MIB / 2e9
    assert rows[4].allreduce_s == pytest.approx(allreduce)
    assert rows[4].step_s == pytest.approx(0.100 + allreduce)
    assert rows[4].samples_per_s == pytest.approx(4 * 32 / (0.100 + allreduce))
    assert rows[4].efficiency == pytest.approx(0.100 / (0.100 + allreduce))


def test_efficiency_falls_with_ranks_and_rises_with_bandwidth():
    slow = [r.efficiency for r in predict(profile())]
    assert all(a >= b for a, b in zip(slow, slow[1:], strict=False))
    fast = predict(profile(link=LinkCost(50e-6, 1 / 20e9)))
    assert all(f.efficiency > s for f, s in zip(fast[1:], slow[1:], strict=True))
    # Latency dominates at scale without fusion: 161 buffers per update.
    unfused = predict(profile(fusion_threshold_bytes=0), worlds=[1024])[0]
    fused = predict(profile(), worlds=[1024])[0]
    assert unfused.allreduce_s - fused.allreduce_s == pytest.approx(160 * 2 * 1023 * 50e-6)


def test_gradient_accumulation_spreads_the_allreduce_over_its_steps():
    once = predict(profile(), worlds=[8])[0]
    accumulated = predict(profile(backward_passes_per_step=4), worlds=[8])[0]
    assert accumulated.allreduce_s == pytest.approx(once.allreduce_s / 4)


def test_validation_and_reports():
    p = profile()
    predicted = 0.100 + 2 * 50e-6 + 100 * MIB / 2e9
    assert validation_error(p) == pytest.approx(predicted / 0.160 - 1)
    rows = predict(p)
    table = render_table(p, rows)
    assert "| 1024 |" in table and "alpha 50.0 us" in table and "beta 2.000 GB/s" in table
    assert f"({validation_error(p):+.1%})" in table
    csv = render_csv(rows).splitlines()
    assert csv[0] == "world_size,step_ms,allreduce_ms,samples_per_s,efficiency"
    assert len(csv) == 12 and math.isclose(float(csv[1].split(",")[4]), 1.0)
    read_back = parse_csv(render_csv(rows))  # the driver's batch advice reads it so
    assert [r.world_size for r in read_back] == [r.world_size for r in rows]
    assert [r.step_s for r in read_back] == pytest.approx([r.step_s for r in rows], rel=1e-6)


def test_the_per_update_overhead_counts_once_per_update_on_two_or_more_ranks():
    with_overhead = profile(per_update_overhead_s=0.004)
    assert with_overhead.allreduce_s(1) == 0.0
    for world in (2, 64):
        assert with_overhead.allreduce_s(world) == pytest.approx(
            profile().allreduce_s(world) + 0.004
        )
    assert "per-update overhead c 4.00 ms" in render_table(with_overhead, predict(with_overhead))


def test_the_slowest_of_n_ranks_sets_the_compute_time():
    steady = profile(compute_samples_s=(0.1,) * 50)
    assert steady.compute_at(1024) == pytest.approx(0.1)
    jittery = profile(compute_s=0.15, compute_samples_s=(0.1, 0.2))
    assert jittery.compute_at(1) == 0.15  # one rank: the mean
    assert jittery.compute_at(2) == pytest.approx(0.175, abs=0.01)  # 3 of 4 pairs hold a 0.2
    assert jittery.compute_at(64) == pytest.approx(0.2)
    rows = {r.world_size: r for r in predict(jittery, worlds=[1, 2])}
    assert rows[2].step_s == pytest.approx(jittery.compute_at(2) + jittery.allreduce_s(2))


def test_a_timed_distributed_step_calibrates_the_interaction_term():
    apart = profile().separate_step_s(2)
    slower = profile().calibrated(apart + 0.012)  # 12 ms lost to compute/communication contention
    assert slower.interaction_s == pytest.approx(0.012)
    assert slower.step_s(2) == pytest.approx(apart + 0.012)  # reproduces the timed step
    assert slower.step_s(1) == pytest.approx(0.100)  # one rank: no communication, no interaction
    assert slower.step_s(64) == pytest.approx(profile().step_s(64) + 0.012)
    assert "interaction i +12.00 ms" in render_table(slower, predict(slower))
    overlapped = profile().calibrated(0.05)  # faster than the computation alone: clamped
    assert overlapped.interaction_s < 0 and overlapped.step_s(2) == pytest.approx(0.100)
    assert "interaction" not in render_table(profile(), predict(profile()))
