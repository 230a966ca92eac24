"""The rank-side engine with real Horovod ranks: equivalence, determinism, exact
validation, resume (on the same layout, and on one rank: issue 34, item 5), rank API,
callbacks and throughput metrics.

One deterministic configuration (plain SGD, no dropout, padded last batch,
warmup + cosine LR) is trained several ways and the final weights compared.
"""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.commands import (
    NO_LOGGED_MODEL,
    in_session,
    modules_imported,
    tntrun_cli,
    tntrun_command,
)
from tests.helpers.mpi import mpi_first_on_path
from tests.helpers.pace import PACE
from tests.helpers.runs import run_dir_of, store_uri, wait_for_file
from tntrun.config.schema import FaultsConfig

pytestmark = pytest.mark.slow

# What no test here reads, off (each costs a run CPU-seconds; none changes the training):
# the MLflow Model folder (model.keras, the final model, is written anyway), the gradient
# noise scale and, except where a test reads them, the host's system metrics.
UNREAD = (NO_LOGGED_MODEL, "train.gradient_noise_scale=false", "tracking.system_metrics=false")
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
    *UNREAD,
)
SYSTEM_METRICS = ("tracking.system_metrics=true",)  # after CONFIG: a key's last value wins
ONE_RANK = ("ranks_per_node=1",)
ALLOW = ("resume_allow_layout_change=true",)
STEPS_PER_EPOCH = 23  # 1437 training samples in global batches of 64, the last one padded


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


def test_one_rank_and_two_ranks_reach_the_same_weights(two_ranks, tmp_path):
    _, two = two_ranks
    one = tntrun_cli(tmp_path, *CONFIG, *ONE_RANK, "checkpoint.every_epochs=0")
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


@dataclass(frozen=True)
class Preempted:
    """A run the driver's SIGTERM stopped mid-epoch: its store, run id, directory and the
    checkpoint of the step the ranks stopped at."""

    client: MlflowClient
    run_id: str
    run_dir: Path
    checkpoint: str


def preempted_mid_epoch(tmp_path: Path, *overrides: str) -> Preempted:
    """SIGTERM to the driver of CONFIG (what Slurm sends on preemption): the ranks stop
    together at one step of epoch 2, checkpoint it, and the run ends KILLED (exit 143),
    tagged preempted."""
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
    command = tntrun_command(tmp_path, *CONFIG, *overrides, *hold)
    with log.open("w") as out, in_session(command, tmp_path, stdout=out, stderr=out) as driver:
        wait_for_file(reached, driver, timeout_s=300, log=log)
        driver.send_signal(signal.SIGTERM)
        # The driver waits preempt_grace_s for the checkpoint, then stops the ranks; 30 s
        # margin for its own ending (MLflow, logs) on a busy machine.
        # 143 = 128 + SIGTERM, as shells and schedulers read a run a signal ended.
        assert driver.wait(timeout=FaultsConfig().preempt_grace_s + 30) == 143
    text = log.read_text()
    assert "tntrun: run KILLED" in text, text[-3000:]
    run_dir = run_dir_of(subprocess.CompletedProcess([], 1, text, ""))
    # Held at batch 3 until noted: the request rides in the step at batch 3 or 4.
    (checkpoint,) = [p.name for p in (run_dir / "checkpoints").glob("epoch-0001.batch-*")]
    assert checkpoint in ("epoch-0001.batch-00004", "epoch-0001.batch-00005"), checkpoint
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["epoch-0001", checkpoint]
    client = MlflowClient(store_uri(tmp_path))
    run_id = (run_dir / "run_id").read_text()
    tags = client.get_run(run_id).data.tags
    assert tags["preempted"].startswith("SIGTERM on "), tags
    assert tags["preempted"].endswith(f"checkpoint {checkpoint}"), tags
    assert tags["world_size"] == "2", tags
    return Preempted(client, run_id, run_dir, checkpoint)


@pytest.fixture(scope="module")
def resumed_after_sigterm(tmp_path_factory) -> tuple[Preempted, subprocess.CompletedProcess]:
    """CONFIG under horovodrun, with the host's system metrics, stopped by SIGTERM
    (:func:`preempted_mid_epoch`), then ``resume=auto``: the stop and the resumed run."""
    work = tmp_path_factory.mktemp("sigterm")
    stop = preempted_mid_epoch(work, *SYSTEM_METRICS)
    resumed = tntrun_cli(work, *CONFIG, *SYSTEM_METRICS, "resume=auto")
    assert_succeeded(resumed)
    return stop, resumed


def test_two_runs_with_deterministic_true_are_identical(two_ranks, resumed_after_sigterm):
    """The fixture's run and a second run of CONFIG (what either adds writes outputs
    only), trained in two launches (stopped by SIGTERM, then resumed), end with bitwise
    the same weights: a step that trained otherwise in either launch would show."""
    _, first = two_ranks
    _, again = resumed_after_sigterm
    for a, b in zip(weights(run_dir_of(first)), weights(run_dir_of(again)), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_preempted_run_resumes_mid_epoch_into_the_same_run_with_the_same_weights(
    two_ranks, resumed_after_sigterm
):
    """Under horovodrun: the SIGTERM stop (:func:`preempted_mid_epoch`), then resume=auto
    finds the run, continues from that step and ends as if never stopped (the weights of
    the uninterrupted run). The stop is proven under each MPI too (the tests below, which
    resume on one rank); the resume reads only the run directory and the store (an MPI's
    ranks end with horovodrun's weights: the restart test of tests/launch/test_failures.py)."""
    uninterrupted = two_ranks[1]
    stop, resumed = resumed_after_sigterm
    client, run_id = stop.client, stop.run_id
    assert f"resume=auto: continuing run {run_id}" in resumed.stdout
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and "preempted" not in run.data.tags
    assert run.data.tags["restarts"] == "1"
    assert run.data.tags["restart.1"].startswith(
        f"resume=auto: from {stop.checkpoint}; SIGTERM on "
    )
    history = client.get_metric_history(run_id, "val_accuracy")
    assert sorted({m.step for m in history}) == [0, 1, 2, 3]
    # The host's system metrics: one series whose steps go on in the resumed run's directory.
    written = sum(
        len((run_dir / "system" / "localhost.jsonl").read_text().splitlines())
        for run_dir in (stop.run_dir, run_dir_of(resumed))
    )
    cpu = client.get_metric_history(run_id, "system/cpu_utilization_percentage")
    assert sorted(m.step for m in cpu) == list(range(written)), [m.step for m in cpu]
    for a, b in zip(weights(run_dir_of(resumed)), weights(run_dir_of(uninterrupted)), strict=True):
        np.testing.assert_array_equal(a, b)


def assert_continued_on_one_rank(stop: Preempted, resumed, uninterrupted) -> None:
    """The preempted run, FINISHED, tagged with the new layout, trained on from the
    checkpoint's step on one rank to the weights of the uninterrupted 2-rank run."""
    assert_succeeded(resumed)
    assert "1 ranks on localhost:1" in resumed.stdout
    assert f"continuing run {stop.run_id}" in resumed.stdout
    run = stop.client.get_run(stop.run_id)
    tags = run.data.tags
    assert run.info.status == "FINISHED"
    assert (tags["world_size"], tags["hosts"], tags["layout_changes"]) == ("1", "localhost:1", "1")
    assert run.info.run_name == "mlp-digits-1x64"
    batch = int(stop.checkpoint.rsplit("-", 1)[1])
    step = STEPS_PER_EPOCH + batch
    assert tags["resume.layout_change"] == (
        "2 ranks, global batch 64 -> 1 ranks, global batch 64; LR 0.1, "
        f"restarting at step {step} (epoch 2, batch {batch})"
    )
    ranks_log = (run_dir_of(resumed) / "ranks.log").read_text()
    assert f"{stop.checkpoint} at epoch 1, step {step}" in ranks_log
    history = stop.client.get_metric_history(stop.run_id, "val_accuracy")
    assert sorted({m.step for m in history}) == [0, 1, 2, 3]
    # 1 rank and 2 ranks differ only in the order of the allreduce's sums
    # (test_one_rank_and_two_ranks_reach_the_same_weights).
    for a, b in zip(weights(run_dir_of(resumed)), weights(run_dir_of(uninterrupted)), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_a_run_preempted_under_mpich_resumes_auto_on_one_rank_only_with_the_key(
    two_ranks, tmp_path, monkeypatch
):
    """The SIGTERM stop under MPICH's mpirun; resume=auto on 1 rank is refused without
    resume_allow_layout_change=true, in one line before any rank starts and with no new
    run; with it the same MLflow run goes on at the checkpointed step (issue 34, item 5)."""
    mpi_first_on_path("mpich", tmp_path, monkeypatch)
    mpirun = ("launcher=mpirun",)
    stop = preempted_mid_epoch(tmp_path, *mpirun)

    refused = tntrun_cli(tmp_path, *CONFIG, *mpirun, "resume=auto", *ONE_RANK)
    assert_exit(refused, 2)
    (line,) = refused.stderr.strip().splitlines()
    assert line == (
        "tntrun: config error: resume: the checkpoint was trained on 2 ranks with global batch "
        "64, this run has 1 ranks and global batch 64: keep the layout or set "
        "resume_allow_layout_change=true"
    )
    assert "ranks on" not in refused.stdout, "no rank started"
    assert [p.parent for p in tmp_path.glob("outputs/runs/*/*/ranks.log")] == [stop.run_dir]
    experiment = stop.client.get_run(stop.run_id).info.experiment_id
    runs = stop.client.search_runs([experiment], run_view_type=ViewType.ALL)
    assert [(r.info.run_id, r.info.status) for r in runs] == [(stop.run_id, "KILLED")]

    resumed = tntrun_cli(tmp_path, *CONFIG, *mpirun, "resume=auto", *ONE_RANK, *ALLOW)
    assert "resume=auto: continuing run" in resumed.stdout
    assert_continued_on_one_rank(stop, resumed, two_ranks[1])


def test_a_run_preempted_under_openmpi_resumes_on_one_rank_named_by_its_directory(
    two_ranks, tmp_path, monkeypatch
):
    """The SIGTERM stop under Open MPI's mpirun; an explicit resume=<run directory> on 1
    rank with resume_allow_layout_change=true continues the same MLflow run at the
    checkpointed step (issue 34, item 5)."""
    mpi_first_on_path("openmpi", tmp_path, monkeypatch)
    mpirun = ("launcher=mpirun",)
    stop = preempted_mid_epoch(tmp_path, *mpirun)
    resumed = tntrun_cli(tmp_path, *CONFIG, *mpirun, f"resume={stop.run_dir}", *ONE_RANK, *ALLOW)
    assert_continued_on_one_rank(stop, resumed, two_ranks[1])


def test_resume_with_another_layout_is_refused(two_ranks, tmp_path):
    _, result = two_ranks
    refused = tntrun_cli(
        tmp_path, f"resume={run_dir_of(result)}", "ranks_per_node=1", "train.epochs=6"
    )
    assert_exit(refused, 2)
    assert "resume: the checkpoint was trained on 2 ranks with global batch 64" in refused.stderr
    assert "resume_allow_layout_change=true" in refused.stderr


def test_manual_distribution_mode_trains(tmp_path):
    unread = (*UNREAD, "checkpoint.every_epochs=0")  # nor are its checkpoints read
    result = tntrun_cli(tmp_path, "dataset.distribute=false", "train.epochs=8", *unread)
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
