"""A run directory written by an older tntrun still resumes with this one.

The fixture (tests/data/run_dir_v0_1, its README says how it was made) is a preempted run
and its MLflow store, written by tntrun 0.1: ``resume=`` must continue it where it stopped.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import tntrun_cli
from tests.helpers.paths import ROOT
from tests.helpers.runs import run_dir_of, store_uri

pytestmark = pytest.mark.slow

FIXTURE = ROOT / "tests" / "data" / "run_dir_v0_1"
WRITTEN_IN = "/tmp/tntrun-run-dir-v0_1"  # the folder the fixture's run was started in
CHECKPOINT = "epoch-0001.batch-00010"  # the newest checkpoint: epoch 2, batch 10, step 32
STEPS_PER_EPOCH, EPOCHS = 22, 2


def relocate_store(database: Path, workdir: Path) -> None:
    """Point the store's artifact locations from where the fixture was written to
    ``workdir``, as moving an ``outputs/`` folder requires."""
    moved = (WRITTEN_IN, str(workdir))
    with closing(sqlite3.connect(database)) as store, store:
        runs = store.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", moved)
        store.execute(
            "UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)", moved
        )
        assert runs.rowcount == 1, "the fixture's store holds one run"


def unpack_fixture(workdir: Path) -> Path:
    """The fixture as a user's ``outputs/``: its store and the run directory (returned)."""
    outputs = workdir / "outputs"
    run_dir = shutil.copytree(FIXTURE / "run", outputs / "runs" / "v0_1")
    with gzip.open(FIXTURE / "mlflow.db.gz") as packed, (outputs / "mlflow.db").open("wb") as db:
        shutil.copyfileobj(packed, db)
    relocate_store(outputs / "mlflow.db", workdir)
    return run_dir


def test_a_run_directory_written_by_tntrun_0_1_resumes_where_it_stopped(tmp_path):
    old_dir = unpack_fixture(tmp_path)
    run_id = (old_dir / "run_id").read_text()
    # Without the old run's fault injection: a test instrument, not the format under test;
    # nor a model logged as an MLflow Model, which no assertion reads (rank 0 saves it and
    # loads it back).
    resumed = tntrun_cli(tmp_path, f"resume={old_dir}", "callbacks={}", "tracking.log_model=false")
    assert_succeeded(resumed)
    assert f"resume={old_dir}: continuing run {run_id}" in resumed.stdout
    assert f"{CHECKPOINT} at epoch 1, step 32" in resumed.stdout  # not from scratch

    new_dir = run_dir_of(resumed)
    final = json.loads((new_dir / "checkpoints" / "epoch-0002" / "meta.json").read_text())
    assert (final["epoch"], final["step"]) == (EPOCHS, EPOCHS * STEPS_PER_EPOCH)

    client = MlflowClient(store_uri(tmp_path))
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and "preempted" not in run.data.tags
    assert run.info.artifact_uri.startswith(f"file://{tmp_path}/")
    assert run.data.tags["restart.1"].startswith(f"resume={old_dir}: from {CHECKPOINT}")
    # Epoch 1 was logged by tntrun 0.1, epoch 2 by this code, into the same run: training
    # went on from the checkpoint (1 epoch from scratch reaches val_accuracy 0.82).
    accuracy = epoch_values(client, run_id, "val_accuracy")
    loss = epoch_values(client, run_id, "val_loss")
    assert accuracy[1] > accuracy[0] >= 0.8 and accuracy[1] >= 0.85, accuracy
    assert loss[1] < loss[0], loss
    step_losses = client.get_metric_history(run_id, "step_loss")
    assert sorted(m.step for m in step_losses) == [20, 40]  # every 20 steps, none twice


def epoch_values(client: MlflowClient, run_id: str, key: str) -> list[float]:
    """A per-epoch metric's values in epoch order."""
    history = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
    assert [m.step for m in history] == list(range(EPOCHS)), key
    return [m.value for m in history]
