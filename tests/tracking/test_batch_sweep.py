"""`tntrun report` of a sweep over the global batch: steps to a common training loss, measured
from the runs' metrics files (written here as rank 0 writes them) and predicted from the
gradient noise scale."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tntrun.contract.metrics import MetricsWriter
from tntrun.tracking import RunSummary
from tntrun.tracking.batch_sweep import epoch_losses, fitted_steps, steps_to, steps_to_loss
from tntrun.tracking.report import _markdown, add_steps_to_loss, plot_steps_to_loss, rows_of

NOISE_SCALE = 100.0
S_MIN = 50.0


def true_steps(batch: int) -> float:
    return S_MIN * (1 + NOISE_SCALE / batch)


def child(tmp_path: Path, batch: int, noise_scale: float, passes: int = 1) -> RunSummary:
    """A finished run of ``batch`` samples per update whose loss falls linearly from 1 to
    0.5 at the steps the paper's model gives, and on for 20% more (one update an epoch, of
    ``passes`` training steps)."""
    run_dir = tmp_path / f"b{batch}"
    run_dir.mkdir()
    writer = MetricsWriter(run_dir)
    steps = true_steps(batch)
    for epoch in range(math.ceil(1.2 * steps)):
        optimizer_step = epoch + 1
        writer.log({"loss": 1 - 0.5 * optimizer_step / steps, "step_loss": 9.0}, epoch)
    writer.close()
    return RunSummary(
        run_id=f"id{batch}",
        name=f"job-b{batch}",
        status="FINISHED",
        params={
            "plan.world_size": "2",
            "plan.global_batch_size": str(batch // passes),
            "plan.effective_batch_size": str(batch),
            "plan.steps_per_epoch": str(passes),
        },
        metrics={"gradient_noise_scale": noise_scale},
        tags={"run_dir": str(run_dir)},
    )


def test_steps_to_a_loss_count_optimizer_steps_to_the_end_of_the_epoch(tmp_path):
    writer = MetricsWriter(tmp_path)
    for epoch, loss in enumerate([2.0, 1.0, float("nan"), 0.5]):
        writer.log({"loss": loss, "val_loss": 0.1}, epoch)
    writer.close()
    history = epoch_losses(tmp_path, steps_per_epoch=10, passes=2)  # 5 updates an epoch
    assert history == [(5, 2.0), (10, 1.0), (20, 0.5)]
    assert [steps_to(history, t) for t in (3.0, 1.0, 0.7, 0.1)] == [5, 10, 20, None]
    assert epoch_losses(tmp_path / "gone", 10, 1) == []


def test_the_fit_recovers_the_papers_steps_given_the_noise_scale():
    batches = [32, 64, 128, 256]
    steps = [true_steps(b) for b in batches]
    assert fitted_steps(batches, steps, NOISE_SCALE) == pytest.approx(steps)
    assert fitted_steps(batches, steps, 10 * NOISE_SCALE) != pytest.approx(steps, rel=0.1)


def test_a_batch_sweep_reports_measured_steps_next_to_the_prediction(tmp_path):
    noise = {32: 90.0, 64: 100.0, 128: 110.0, 256: float("nan")}  # median of the readable
    children = [child(tmp_path, b, n) for b, n in noise.items()]
    steps = steps_to_loss(children)
    assert steps is not None and steps.noise_scale == 100.0
    # Every run trained to a loss of 1 - 0.5 x 1.2 = 0.4 (within a step): the target.
    assert steps.target == pytest.approx(0.4, abs=0.01)
    for batch in noise:
        measured, predicted = steps.steps[f"id{batch}"]
        assert measured == pytest.approx(1.2 * true_steps(batch), abs=2)
        assert predicted == pytest.approx(measured, rel=0.03)
    rows = rows_of(children)
    note = add_steps_to_loss(rows, children)
    assert "highest of the runs' lowest epoch losses" in note and "B_noise = 100 " in note
    table = _markdown(rows)
    assert "steps_to_target | predicted_steps |" in table.splitlines()[0]
    assert "| 90 | 248 | 24" in table  # batch 32: B_simple 90, 1.2 x 206.25 steps
    plot = plot_steps_to_loss(rows, tmp_path / "steps_to_target.png")
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_gradient_accumulation_counts_updates_and_their_samples(tmp_path):
    children = [child(tmp_path, b, NOISE_SCALE, passes=2) for b in (64, 256)]
    steps = steps_to_loss(children)
    assert steps is not None
    assert steps.steps["id64"][0] == pytest.approx(1.2 * true_steps(64), abs=2)


def test_no_section_without_two_batches_or_without_a_noise_scale(tmp_path):
    for seed in (1, 2):
        (tmp_path / str(seed)).mkdir()
    one_batch = [child(tmp_path / str(seed), 64, NOISE_SCALE) for seed in (1, 2)]  # repeats
    assert steps_to_loss(one_batch) is None
    assert add_steps_to_loss(rows_of(one_batch), one_batch) == ""
    unmeasured = [child(tmp_path, b, -5.0) for b in (32, 64)]
    steps = steps_to_loss(unmeasured)
    assert steps is not None and steps.noise_scale is None
    assert {predicted for _, predicted in steps.steps.values()} == {None}
    assert "nothing is predicted" in steps.note()
