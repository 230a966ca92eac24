"""A local SQLite store that fails mid-run, and stop signals after the last epoch: nothing
of the run is lost.

Real ranks (the default digits run, 2 epochs of 22 steps) and a real SQLite store. Rank 0
holds after step 22 (``InjectFault`` kind ``hold``) while the test breaks the store:
deleted, made unwritable (``chattr +i`` on the file and its folder: tests run as root,
where permissions stop no write), or locked (``BEGIN EXCLUSIVE`` held on a connection of
the test's own). The run must end FINISHED with exit 3 and no traceback, its record
pending, and ``tntrun sync`` must deliver every metric point, the model and the status
(into the repaired store, or into a fresh one). Two SIGTERMs after the last step (a second
hold, at step 44) must not make the run KILLED: it keeps its model.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.commands import clean_env, tntrun_command
from tests.helpers.paths import BIN
from tests.helpers.records import (
    assert_each_sample_once,
    expected_counts,
    host_samples,
    recorded_counts,
)
from tests.helpers.runs import wait_for_file
from tntrun.contract import run_files
from tntrun.contract.exit_codes import EXIT_TRACKING_PENDING
from tntrun.tracking.outage import Pending, sync_line

STEPS_PER_EPOCH, EPOCHS = 22, 2  # the default digits run with train.epochs=2
START_S = 180  # 2 ranks importing TensorFlow on a busy 2-core machine, then 22 steps
# What the end of a run on a store that fails waits for: the relay's request under way
# and one attempt at the end (tracking.outage_grace_s=0), each up to MLflow's 20 s SQLite
# busy timeout on a locked store, plus the ranks' second epoch and exit.
END_S = 2 * 20 + 60


def hold(name: str, step: int, release: Path) -> tuple[str, ...]:
    """Rank 0 holds after ``step`` until ``release`` exists (``<release>.held`` says when)."""
    key = f"+callbacks.{name}"
    return (
        f"{key}._target_=tntrun.engine.faults.InjectFault",
        f"{key}.ranks=all_ranks",
        f"{key}.rank=0",
        f"{key}.at_step={step}",
        f"{key}.kind=hold",
        f"{key}.release={release}",
    )


def held(release: Path) -> Path:
    return release.with_name(f"{release.name}.held")


def start(tmp_path: Path, uri: str, *args: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "tntrun.log"
    command = tntrun_command(
        tmp_path,
        f"tracking.uri={uri}",
        f"train.epochs={EPOCHS}",
        "tracking.log_every_steps=5",
        "tracking.outage_grace_s=0",
        "tracking.system_metrics_interval_s=1",
        *args,
    )
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=clean_env(),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # a signal to it reaches the driver alone
    )
    return process, log


def run_dir_of_run(tmp_path: Path, process: subprocess.Popen, log: Path) -> Path:
    """The run directory once the run is in its store (the driver wrote its id)."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        found = list((tmp_path / "outputs" / "runs").glob(f"*/*/{run_files.RUN_ID}"))
        if found:
            return found[0].parent
        time.sleep(0.1)
    raise AssertionError(f"the run was not created within {START_S} s")


def sigterm_twice(process: subprocess.Popen, log: Path) -> None:
    """Two SIGTERMs to the driver (a scheduler's, and an impatient user's), then its line
    that they stop nothing (rank 0 holds after the last step meanwhile)."""
    for _ in range(2):
        process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
    deadline = time.monotonic() + 30
    while "after the last training step" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def sync(tmp_path: Path, run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "tntrun"), "sync", str(run_dir), *args],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_delivered_whole(uri: str, run_dir: Path) -> None:
    """The store holds the run FINISHED with every metric point and sample once, and its
    model."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    run_id = (run_dir / run_files.RUN_ID).read_text()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    expected = expected_counts(run_dir)
    assert sum(expected.values()) > 40
    assert recorded_counts(client, run_id, expected) == expected  # none lost, none twice
    assert_each_sample_once(client, run_id, host_samples(run_dir))
    assert "model.keras" in {a.path for a in client.list_artifacts(run_id)}
    assert len(run.outputs.model_outputs) == 1  # the final model, logged once


class Breakage:
    """One way a local store fails, and its repair."""

    def __init__(self, store: Path) -> None:
        self.store, self.database = store, store / "mlflow.db"
        self.holder: sqlite3.Connection | None = None

    def chattr(self, flag: str) -> None:
        subprocess.run(["chattr", flag, str(self.database), str(self.store)], check=True)

    def deleted(self) -> None:
        self.database.unlink()

    def unwritable(self) -> None:
        self.chattr("+i")  # not even root writes an immutable file or into its folder

    def locked(self) -> None:
        self.holder = sqlite3.connect(self.database, timeout=60, isolation_level=None)
        self.holder.execute("BEGIN EXCLUSIVE")  # another writer holds it: nobody reads

    def repair(self) -> None:
        if self.holder is not None:
            self.holder.execute("COMMIT")
            self.holder.close()
            self.holder = None
        if self.database.exists():
            subprocess.run(["chattr", "-i", str(self.database), str(self.store)], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["deleted", "unwritable", "locked"])
def test_a_store_that_fails_mid_run_loses_nothing(tmp_path, kind):
    store = tmp_path / "store"
    store.mkdir()
    uri = f"sqlite:///{store / 'mlflow.db'}"
    breakage = Breakage(store)
    broken: Callable[[], None] = getattr(breakage, kind)
    release, release_end = tmp_path / "release", tmp_path / "release-end"
    signals = kind == "deleted"  # two SIGTERMs after the last step, in one of the runs
    ends = hold("end", STEPS_PER_EPOCH * EPOCHS, release_end) if signals else ()
    process, log = start(tmp_path, uri, *hold("fault", STEPS_PER_EPOCH, release), *ends)
    try:
        run_dir = run_dir_of_run(tmp_path, process, log)
        wait_for_file(held(release), process, START_S, log)
        broken()
        release.touch()
        if signals:
            wait_for_file(held(release_end), process, START_S, log)
            assert (run_dir / run_files.TRAINED).is_file()
            sigterm_twice(process, log)
            release_end.touch()
        code = process.wait(timeout=END_S)
    finally:
        if process.poll() is None:
            process.kill()
        breakage.repair()  # else pytest could not delete an immutable tmp_path
    output = log.read_text()
    lines = output.splitlines()
    assert code == EXIT_TRACKING_PENDING, output[-3000:]
    assert "Traceback" not in output and "tntrun: run FINISHED" in lines
    (failed,) = [line for line in lines if " cannot be written (" in line]  # the relay's
    assert failed.startswith(f"tntrun: the tracking store {uri} cannot be written (SQLite: ")
    print(f"{kind}: {failed}")
    assert lines[-1] == sync_line(uri, run_dir)
    if signals:
        assert sum("after the last training step" in line for line in lines) == 1
        assert "the ranks stop at the next step" not in output  # no preemption claimed
    pending = Pending.load(run_dir)
    assert pending is not None and pending.status == "FINISHED" and not pending.outputs_logged

    target = f"sqlite:///{tmp_path / 'fresh.db'}" if kind == "deleted" else uri
    synced = sync(tmp_path, run_dir, *(["--tracking-uri", target] if kind == "deleted" else []))
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert "Traceback" not in synced.stdout + synced.stderr
    assert "the outputs and status FINISHED delivered" in synced.stdout
    assert not (run_dir / run_files.TRACKING_PENDING).exists()
    assert_delivered_whole(target, run_dir)


@pytest.mark.slow
def test_two_sigterms_after_the_last_epoch_keep_the_trained_model(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    release = tmp_path / "release"
    process, log = start(tmp_path, uri, *hold("end", STEPS_PER_EPOCH * EPOCHS, release))
    try:
        run_dir = run_dir_of_run(tmp_path, process, log)
        wait_for_file(held(release), process, START_S, log)
        sigterm_twice(process, log)
        release.touch()
        code = process.wait(timeout=END_S)
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text()
    assert code == 0, output[-3000:]
    assert "tntrun: run FINISHED" in output.splitlines() and "Traceback" not in output
    assert "the ranks stop at the next step" not in output  # no preemption claimed
    client = MlflowClient(uri)
    run = client.get_run((run_dir / run_files.RUN_ID).read_text())
    assert run.info.status == "FINISHED" and "preempted" not in run.data.tags
    assert len(run.outputs.model_outputs) == 1
