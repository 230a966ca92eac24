"""The batch advice at the end of a run, read from a run directory the test writes as the
ranks would (plan.json, metrics.jsonl, the scaling prediction's CSV): the driver's
functions on real files, and the tag and console line through a real MLflow store."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.helpers.plans import plan_for
from tntrun.contract import run_files
from tntrun.contract.metrics import MetricsWriter
from tntrun.contract.run_status import RunStatus
from tntrun.planning.batch_advice import NOISE_SCALE
from tntrun.planning.scaling_model import LinkCost, ScalingProfile, predict, render_csv
from tntrun.tracking.mlflow_tracker import MlflowTracker
from tntrun.tracking.recorder import final_report
from tntrun.tracking.run_advice import ADVICE_TAG, advice_lines, advice_tags, predicted_step_times
from tntrun.tracking.run_record import record_outputs


def run_dir_of(tmp_path: Path, compose_cfg, noise_scales, *overrides: str) -> Path:
    """A run directory with the plan of ``overrides`` and rank 0's epoch metrics, the noise
    scale of each epoch in turn (None: not logged)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True)
    plan_for(compose_cfg, *overrides, run_dir=run_dir).save(run_dir / run_files.PLAN)
    writer = MetricsWriter(run_dir)
    for epoch, noise_scale in enumerate(noise_scales):
        metrics = {"loss": 1.0 / (epoch + 1)}
        if noise_scale is not None:
            metrics[NOISE_SCALE] = noise_scale
        writer.log(metrics, epoch)
    writer.close()
    return run_dir


def write_prediction(run_dir: Path, micro_batch: int) -> list[float]:
    """The scaling predictor's CSV, as rank 0 writes it; the predicted step times (s)."""
    profile = ScalingProfile(
        compute_s=0.004,
        gradient_bytes=4 << 20,
        gradient_tensors=8,
        fusion_threshold_bytes=None,
        backward_passes_per_step=1,
        link=LinkCost(latency_s=100e-6, seconds_per_byte=1 / 1e9),
        micro_batch_size=micro_batch,
        profiled_world_size=2,
        measured_step_s=0.006,
    )
    rows = predict(profile)
    (run_dir / run_files.SCALING_PREDICTION).mkdir()
    (run_dir / run_files.PREDICTION_CSV).write_text(render_csv(rows))
    return [row.step_s for row in rows]


def test_the_last_noise_scale_logged_is_read_next_to_the_batch(tmp_path, compose_cfg):
    run_dir = run_dir_of(
        tmp_path, compose_cfg, [-20.0, 150.0, 384.0], "ranks_per_node=2", "global_batch_size=128"
    )
    lines = advice_lines(run_dir, RunStatus.FINISHED)
    assert lines == [
        "gradient noise scale 384 samples (global batch 128 samples per update): "
        "2x the batch needs ~1.6x fewer steps (1.2x the samples); "
        "4x the batch needs ~2.3x fewer steps (1.8x the samples)"
    ]
    assert advice_tags(run_dir, RunStatus.FINISHED) == {ADVICE_TAG: lines[0]}
    # A failed or stopped run is advised nothing; nor a directory without a plan.
    assert advice_lines(run_dir, RunStatus.FAILED) == []
    assert advice_tags(tmp_path, RunStatus.FINISHED) == {}


def test_a_noise_scale_that_cannot_be_read_says_why(tmp_path, compose_cfg):
    run_dir = run_dir_of(tmp_path, compose_cfg, [150.0, float("nan")], "ranks_per_node=2")
    (line,) = advice_lines(run_dir, RunStatus.FINISHED)
    assert line == (
        "no batch advice: not measured reliably: gradient_noise_scale is nan "
        "(a non-finite gradient norm)"
    )


def test_a_last_epoch_without_a_positive_gradient_estimate_is_not_read_from_an_older_one(
    tmp_path, compose_cfg
):
    run_dir = run_dir_of(tmp_path, compose_cfg, [150.0], "ranks_per_node=2")
    writer = MetricsWriter(run_dir)  # the next epoch: |G|^2 below zero, no ratio logged
    writer.log({"loss": 0.3, "gns_gradient_sq": -0.02, "gns_trace": 4.0}, 1)
    writer.close()
    (line,) = advice_lines(run_dir, RunStatus.FINISHED)
    assert line.startswith("no batch advice: not measured reliably: gradient_noise_scale is -200:")


def test_one_rank_and_an_unmeasured_run_say_why(tmp_path, compose_cfg):
    one = run_dir_of(tmp_path / "one", compose_cfg, [None], "ranks_per_node=1")
    assert "not measured on one rank" in advice_lines(one, RunStatus.FINISHED)[0]
    off = run_dir_of(tmp_path / "off", compose_cfg, [None, None], "ranks_per_node=2")
    assert advice_lines(off, RunStatus.FINISHED) == [
        "no batch advice: the run logged no gradient_noise_scale "
        "(train.gradient_noise_scale=false turns it off)"
    ]


def test_with_a_scaling_prediction_the_time_to_loss_per_node_count(tmp_path, compose_cfg):
    run_dir = run_dir_of(tmp_path, compose_cfg, [500.0], "ranks_per_node=2", "global_batch_size=64")
    step_s = write_prediction(run_dir, micro_batch=32)
    worlds = [world for world, _ in predicted_step_times(run_dir)]
    assert worlds == [2**k for k in range(11)]
    assert [s for _, s in predicted_step_times(run_dir)] == pytest.approx(step_s, rel=1e-4)
    batch_line, time_line = advice_lines(run_dir, RunStatus.FINISHED)
    assert batch_line.startswith("gradient noise scale 500 samples (global batch 64 ")
    assert time_line.startswith("predicted time to this run's loss at micro-batch 32: 1 node ")
    assert "512 nodes (1024 ranks)" in time_line and "fastest on " in time_line


@pytest.mark.slow  # MLflow runs `uname -p` as it creates a run
def test_the_tag_and_the_console_line_of_a_finished_run(tmp_path, compose_cfg, caplog):
    run_dir = run_dir_of(tmp_path, compose_cfg, [200.0, 384.0], "ranks_per_node=2")
    tracker = MlflowTracker.at(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)
    tracker.start("advised", {})
    record_outputs(tracker, run_dir, RunStatus.FINISHED, None)
    tracker.finish(RunStatus.FINISHED)
    advice = tuple(advice_lines(run_dir, RunStatus.FINISHED))
    with caplog.at_level(logging.INFO, logger="tntrun.tracking.recorder"):
        recorded = final_report(tracker, run_dir, "FINISHED", False, advice)
    assert tracker.summary().tags[ADVICE_TAG] == advice[0]
    assert recorded.batch_advice == advice
    assert f"tntrun: {advice[0]}" in caplog.messages
    assert advice[0].startswith("gradient noise scale 384 samples (global batch 64 ")
