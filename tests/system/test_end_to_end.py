"""The real CLI: Hydra driver, two Horovod ranks over Gloo, a SQLite MLflow store."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.commands import tntrun_cli
from tests.helpers.runs import run_dir_of, store_uri
from tests.helpers.stack import tensorflow_version

pytestmark = pytest.mark.slow


def only_run(tmp_path):
    client = MlflowClient(tracking_uri=store_uri(tmp_path))
    experiment = client.get_experiment_by_name("tntrun")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, f"expected one run, found {len(runs)}"
    return client, runs[0]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The default experiment, the first run in its folder (it makes the store), and where
    it ran. Two tests read it, one launch instead of two: the default run's record, and its
    story in Hydra's job log, which ``hydra.verbose=tntrun`` (tntrun's DEBUG lines, nothing
    a run does) adds to."""
    workdir = tmp_path_factory.mktemp("default")
    result = tntrun_cli(workdir, "tracking.system_metrics_interval_s=1", "hydra.verbose=tntrun")
    assert_succeeded(result)
    return result, workdir


def test_default_experiment_trains_on_two_ranks_and_logs_to_mlflow(default_run):
    result, tmp_path = default_run
    client, run = only_run(tmp_path)
    assert run.info.status == "FINISHED"
    assert run.data.params["plan.world_size"] == "2"
    assert run.data.params["plan.micro_batch_size"] == "32"
    assert run.data.params["global_batch_size"] == "64"
    assert run.data.params["model._target_"] == "tntrun.models.mlp.build_mlp"
    assert run.data.metrics["val_accuracy"] >= 0.95

    epochs = int(run.data.params["train.epochs"])
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        history = client.get_metric_history(run.info.run_id, key)
        assert [m.step for m in history] == list(range(epochs)), key

    steps = [m.step for m in client.get_metric_history(run.info.run_id, "step_loss")]
    assert steps == list(range(20, 22 * epochs + 1, 20))  # every tracking.log_every_steps
    # The gradient noise scale, measured in every run of 2 ranks (docs/tracking.md).
    assert run.data.metrics["gns_trace"] > 0 and run.data.metrics["gradient_noise_scale"] > 0
    noise = client.get_metric_history(run.info.run_id, "step_gradient_noise_scale")
    assert [m.step for m in noise] and {m.step for m in noise} <= set(steps)
    # One host: one node series (local rank 0 samples it), named without a node id.
    system = sorted(key for key in run.data.metrics if key.startswith("system/"))
    assert "system/cpu_utilization_percentage" in system
    assert all(key.count("/") == 1 for key in system), system
    assert [p.name for p in (run_dir_of(result) / "system").glob("*.jsonl")] == ["localhost.jsonl"]
    cpu = client.get_metric_history(run.info.run_id, "system/cpu_utilization_percentage")
    assert [m.step for m in cpu] == list(range(len(cpu))) and len(cpu) >= 2
    for key in ("steady_samples_per_s", "step_time_p50_ms", "step_time_p95_ms", "epoch_time_s"):
        assert run.data.metrics[key] > 0
    assert "rank 1: done without opening the MLflow store" in result.stdout


def test_the_default_runs_artifacts_tags_and_console_say_what_ran(default_run):
    result, tmp_path = default_run
    client, run = only_run(tmp_path)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {
        "config.yaml",
        "plan.json",
        "lr_schedule.svg",
        "model.keras",
        "hydra",
        "logs",
        "checkpoint",
        "precision.json",
    } <= artifacts
    logs = {a.path for a in client.list_artifacts(run.info.run_id, "logs")}
    assert {"logs/rank.0.log", "logs/rank.1.log", "logs/launcher.log"} <= logs
    tags = run.data.tags
    assert tags["world_size"] == "2" and tags["hosts"] == "localhost:2"
    assert tags["version.tensorflow"] == tensorflow_version()
    assert tags["version.horovod"] == "0.28.1"
    assert tags["horovod.built_for_tensorflow"] == tensorflow_version()
    assert "Gloo" in tags["horovod.check_build"]
    horovodrun = "-m tntrun.launch.horovodrun_command --gloo -np 2 -H localhost:2"
    assert horovodrun in tags["launch_command"]
    assert tags["choice.model"] == "mlp" and tags["choice.dataset"] == "digits"

    out = result.stdout
    assert f"final val_accuracy: {run.data.metrics['val_accuracy']:.4f}" in out
    assert f"MLflow run id: {run.info.run_id}" in out
    assert "mlflow server --backend-store-uri sqlite:///" in out
    # TensorFlow's start-up notices stay off the console (2.21 logs oneDNN's
    # before TF_CPP_MIN_LOG_LEVEL applies).
    console = out + result.stderr
    assert "oneDNN custom operations" not in console and "absl::InitializeLog" not in console


def test_a_failing_rank_marks_the_run_failed(run_tntrun, tmp_path):
    """One rank: the claim is the driver's record of a rank's failure (which of two ranks
    failed: tests/launch/test_failures.py)."""
    result = run_tntrun("train.epochs=1", "model.hidden_units=[-5]", "ranks_per_node=1")
    assert result.returncode != 0
    client, run = only_run(tmp_path)
    assert run.info.status == "FAILED"
    assert "run FAILED" in result.stdout
    assert "ValueError" in result.stdout  # the rank's traceback reaches the user
    assert run.data.tags["failure.rank"] == "0"
    assert "ValueError" in run.data.tags["failure.last_lines"]
    failed_rank = run.data.tags["failure.rank"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert f"traceback_rank_{failed_rank}.txt" in artifacts


def test_config_error_exits_2_before_any_run(run_tntrun, tmp_path):
    result = run_tntrun("global_batch_size=63")
    assert_exit(result, 2)
    assert "global_batch_size=63 is not divisible by the world size 2" in result.stderr
    assert not (tmp_path / "outputs" / "mlflow.db").exists()


def test_the_run_story_is_in_hydras_job_log_and_verbose_adds_tntruns_debug(default_run):
    """The default run's story: the driver's log, not the ranks'."""
    result, _ = default_run
    job_log = (run_dir_of(result) / "cli.log").read_text()
    story = ("tntrun: 2 ranks on localhost:2", "tntrun: MLflow run ", "tntrun: run FINISHED")
    for line in (*story, "tntrun: launching the ranks: "):
        assert f"][INFO] - {line}" in job_log or f"][DEBUG] - {line}" in job_log, line
    assert "[tntrun.launch.supervisor][DEBUG] - tntrun: launching the ranks: " in job_log
    # The console: tntrun's lines as written, its DEBUG lines with hydra.verbose=tntrun.
    assert "\ntntrun: run FINISHED\n" in result.stdout
    assert "\ntntrun: launching the ranks: " in result.stdout
    assert "][INFO] - tntrun" not in result.stdout + result.stderr
