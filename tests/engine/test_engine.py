"""The rank-side engine with real Horovod ranks: equivalence, determinism, exact
validation, resume, rank API, callbacks and throughput metrics.

One deterministic configuration (plain SGD, no dropout, padded last batch,
warmup + cosine LR) is trained several ways and the final weights compared.
"""

from __future__ import annotations

import signal
import subprocess

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.commands import (
    in_session,
    modules_imported,
    tntrun_cli,
    tntrun_command,
)
from tests.helpers.mpi import MPIS, mpi_first_on_path
from tests.helpers.pace import PACE
from tests.helpers.runs import run_dir_of, store_uri, wait_for_file
from tntrun.config.schema import FaultsConfig

pytestmark = pytest.mark.slow

CONFIG = (
    "deterministic=true",
    "optimizer=sgd",
    "optimizer.base_lr=0.4",
    "model.dropout=0.0",
    "train.drop_remainder=false",
    "schedule=warmup_cosine",
    "schedule.warmup_epochs=1",
    "schedule.warmup_start_lr=0.01",  # the default (scaled LR / world size) differs by layout
    "train.epochs=4",
    "checkpoint.min_interval_s=0",  # a checkpoint each epoch: resume tests
)


def weights(run_dir) -> list[np.ndarray]:
    with np.load(run_dir / "final_weights.npz") as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def mlflow_run(work, result):
    """The MLflow run a finished ``tntrun`` logged to, and its client."""
    client = MlflowClient(store_uri(work))
    return client, client.get_run((run_dir_of(result) / "run_id").read_text())


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    work = tmp_path_factory.mktemp("two_ranks")
    result = tntrun_cli(
        work,
        *CONFIG,
        "train.tensorboard=true",
        "+callbacks.csv._target_=keras.callbacks.CSVLogger",
        "+callbacks.csv.filename=${hydra:runtime.output_dir}/epochs.csv",
        "+callbacks.csv.ranks=master_only",
    )
    assert_succeeded(result)
    return work, result


def test_two_runs_with_deterministic_true_are_identical(two_ranks, tmp_path):
    _, first = two_ranks
    again = tntrun_cli(tmp_path, *CONFIG)
    assert_succeeded(again)
    for a, b in zip(weights(run_dir_of(first)), weights(run_dir_of(again)), strict=True):
        np.testing.assert_array_equal(a, b)


def test_one_rank_and_two_ranks_reach_the_same_weights(two_ranks, tmp_path):
    _, two = two_ranks
    one = tntrun_cli(tmp_path, *CONFIG, "ranks_per_node=1")
    assert_succeeded(one)
    assert "1 ranks on localhost:1" in one.stdout
    for a, b in zip(weights(run_dir_of(one)), weights(run_dir_of(two)), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_all_ranks_hold_identical_weights_at_the_end(two_ranks):
    _, run = mlflow_run(*two_ranks)
    assert run.data.metrics["weights_rank_spread"] == 0.0


def test_rank_api_inside_a_two_rank_launch(two_ranks):
    log = (run_dir_of(two_ranks[1]) / "ranks.log").read_text()
    assert "rank 0/2: local rank 0" in log and "master=True" in log
    assert "rank 1/2: local rank 1" in log and "master=False" in log


def test_sharded_validation_equals_single_process_evaluation(two_ranks):
    import keras

    from tntrun.datasets.digits import DigitsDataset

    _, run = mlflow_run(*two_ranks)
    run_dir = run_dir_of(two_ranks[1])
    model = keras.models.load_model(run_dir / "model.keras", compile=False)
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]
    )
    _, val = DigitsDataset().load()
    assert DigitsDataset().info().num_val % 2 == 1, "an odd set makes the shards unequal"
    loss, accuracy = model.evaluate(val.batch(1000), verbose=0)
    assert run.data.metrics["val_accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert run.data.metrics["val_loss"] == pytest.approx(loss, abs=1e-5)


def test_master_only_callbacks_and_throughput_metrics(two_ranks):
    client, run = mlflow_run(*two_ranks)
    run_dir = run_dir_of(two_ranks[1])
    rows = (run_dir / "epochs.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 and "val_accuracy" in rows[0]
    assert any((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert kept == ["epoch-0003", "epoch-0004"], "checkpoint.keep=2 keeps the last two"
    for key in (
        "samples_per_s",
        "step_time_p50_ms",
        "step_time_p95_ms",
        "epoch_time_s",
        "steady_samples_per_s",
        "lr",
    ):
        assert run.data.metrics[key] > 0, key
    lrs = [m.value for m in client.get_metric_history(run.info.run_id, "lr")]
    assert lrs[0] > lrs[-1], "warmup + cosine decays over training"


def test_model_flop_utilisation_is_logged(two_ranks):
    _, run = mlflow_run(*two_ranks)
    metrics = run.data.metrics
    # The digits MLP 64-128-64-10: 2 FLOPs per multiply-add plus bias adds, x3 for training.
    assert metrics["model_flops_per_sample"] == 3 * (2 * (64 * 128 + 128 * 64 + 64 * 10) + 202)
    achieved = metrics["model_flops_per_sample"] * 64 / (metrics["steady_step_time_ms"] / 1e3)
    assert metrics["achieved_flops_per_s"] == pytest.approx(achieved)
    assert metrics["peak_flops_per_s"] > metrics["achieved_flops_per_s"]
    assert 0 < metrics["mfu"] < 1
    assert metrics["mfu"] == pytest.approx(achieved / metrics["peak_flops_per_s"])
    assert "measured matmul peak" in two_ranks[1].stdout


@pytest.mark.parametrize("launcher", ["horovodrun", *(f"mpirun-{mpi}" for mpi in sorted(MPIS))])
def test_a_preempted_run_resumes_mid_epoch_into_the_same_run_with_the_same_weights(
    two_ranks, tmp_path, monkeypatch, launcher
):
    """SIGTERM to the driver (what Slurm sends on preemption): the ranks stop together at
    one step of epoch 2, checkpoint it, and the run ends KILLED, tagged preempted;
    resume=auto finds it, continues from that step and ends as if never stopped (the
    weights of the uninterrupted horovodrun run). The stop is proven under horovodrun and
    under each MPI; the resume reads only the run directory and the store, so it is proven
    under horovodrun (an MPI's ranks end with horovodrun's weights: the restart test of
    tests/launch/test_failures.py)."""
    _, uninterrupted = two_ranks
    chosen: tuple[str, ...] = ()
    if launcher.startswith("mpirun-"):
        mpi_first_on_path(launcher.removeprefix("mpirun-"), tmp_path, monkeypatch)
        chosen = ("launcher=mpirun",)
    (tmp_path / "pace.py").write_text(PACE)
    reached = tmp_path / "reached"  # rank 0 holds at epoch 2, batch 3 until it notes the stop
    hold = (
        "+callbacks.hold._target_=pace.HoldForStop",
        "+callbacks.hold.ranks=master_only",
        "+callbacks.hold.epoch=1",
        "+callbacks.hold.batch=3",
        f"+callbacks.hold.reached={reached}",
    )
    log = tmp_path / "driver.log"
    command = tntrun_command(tmp_path, *CONFIG, *chosen, *hold)
    with log.open("w") as out, in_session(command, tmp_path, stdout=out, stderr=out) as driver:
        wait_for_file(reached, driver, timeout_s=300, log=log)
        driver.send_signal(signal.SIGTERM)
        # The driver waits preempt_grace_s for the checkpoint, then stops the ranks; 30 s
        # margin for its own ending (MLflow, logs) on a busy machine.
        # 143 = 128 + SIGTERM, as shells and schedulers read a run a signal ended.
        assert driver.wait(timeout=FaultsConfig().preempt_grace_s + 30) == 143
    text = log.read_text()
    assert "tntrun: run KILLED" in text, text[-3000:]
    preempted_dir = run_dir_of(subprocess.CompletedProcess([], 1, text, ""))
    # Held at batch 3 until noted: the request rides in the step at batch 3 or 4.
    (checkpoint,) = [p.name for p in (preempted_dir / "checkpoints").glob("epoch-0001.batch-*")]
    assert checkpoint in ("epoch-0001.batch-00004", "epoch-0001.batch-00005"), checkpoint
    client = MlflowClient(store_uri(tmp_path))
    run_id = (preempted_dir / "run_id").read_text()
    tags = client.get_run(run_id).data.tags
    assert tags["preempted"].startswith("SIGTERM on "), tags
    assert tags["preempted"].endswith(f"checkpoint {checkpoint}"), tags
    if chosen:
        return

    resumed = tntrun_cli(tmp_path, *CONFIG, *chosen, "resume=auto")
    assert_succeeded(resumed)
    assert f"resume=auto: continuing run {run_id}" in resumed.stdout
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and "preempted" not in run.data.tags
    assert run.data.tags["restarts"] == "1"
    assert run.data.tags["restart.1"].startswith(f"resume=auto: from {checkpoint}; SIGTERM on ")
    history = client.get_metric_history(run_id, "val_accuracy")
    assert sorted({m.step for m in history}) == [0, 1, 2, 3]
    # The host's system metrics: one series whose steps go on in the resumed run's directory.
    written = sum(
        len((run_dir / "system" / "localhost.jsonl").read_text().splitlines())
        for run_dir in (preempted_dir, run_dir_of(resumed))
    )
    cpu = client.get_metric_history(run_id, "system/cpu_utilization_percentage")
    assert sorted(m.step for m in cpu) == list(range(written)), [m.step for m in cpu]
    for a, b in zip(weights(run_dir_of(resumed)), weights(run_dir_of(uninterrupted)), strict=True):
        np.testing.assert_array_equal(a, b)


def test_resume_with_another_layout_is_refused(two_ranks, tmp_path):
    _, result = two_ranks
    refused = tntrun_cli(
        tmp_path, f"resume={run_dir_of(result)}", "ranks_per_node=1", "train.epochs=6"
    )
    assert_exit(refused, 2)
    assert "resume: the checkpoint was trained on 2 ranks with global batch 64" in refused.stderr
    assert "resume_allow_layout_change=true" in refused.stderr


def test_manual_distribution_mode_trains(tmp_path):
    result = tntrun_cli(tmp_path, "dataset.distribute=false", "train.epochs=8")
    assert_succeeded(result)
    assert "ran out of data" not in result.stdout + result.stderr  # Keras' warning
    _, run = mlflow_run(tmp_path, result)
    assert run.data.metrics["val_accuracy"] >= 0.9
    assert run.data.metrics["weights_rank_spread"] == 0.0


def test_resume_by_run_id_with_an_allowed_layout_change(two_ranks, tmp_path):
    work, result = two_ranks
    client, run = mlflow_run(work, result)
    resumed = tntrun_cli(
        work,
        f"resume={run.info.run_id}",
        "resume_allow_layout_change=true",
        "ranks_per_node=1",
        "global_batch_size=32",
        "train.epochs=5",
    )
    assert_succeeded(resumed)
    run = client.get_run(run.info.run_id)
    assert run.data.tags["resume.layout_change"].startswith(
        "2 ranks, global batch 64 -> 1 ranks, global batch 32; LR 0.05, restarting at step 180"
    )
    history = client.get_metric_history(run.info.run_id, "val_accuracy")
    assert sorted({m.step for m in history}) == [0, 1, 2, 3, 4]


def test_the_rank_side_engine_imports_neither_tf_keras_nor_mlflow_nor_kerass_extras():
    """Each costs a rank seconds before its first step: tf_keras and Horovod's Keras layer
    are not used, MLflow is the driver's, and Keras 3 is imported without the optional
    libraries it would load (tntrun.engine.worker.import_keras)."""
    imported = modules_imported(
        "import tntrun.engine.worker as w; w.import_keras();"
        "import tntrun.engine.trainer, tntrun.engine.runtime",
        "('tf_keras', 'horovod.tensorflow.keras', 'mlflow', *w.OPTIONAL_FOR_KERAS)",
    )
    assert imported == [], f"the rank side imported {imported}"
