"""A local SQLite store that fails mid-run, and two SIGTERMs after the last epoch: nothing
of the run is lost.

One run, to spare CI (a run of the default digits experiment costs about 45 s here):
a real rank (2 epochs of 22 steps; one, ``ranks_per_node=1``: the claims are the driver's
and the store's, and a second rank would only cost CPU) and a real SQLite store. The rank
holds after step 22 (``InjectFault`` kind ``hold``) while the test makes the store
unwritable (``chattr +i`` on the file and its folder: tests run as root, where permissions
stop no write); it holds again after the last step while the driver gets two SIGTERMs.
The run must end FINISHED with exit 3, one line about the store and no traceback, its
record pending.
``tntrun sync`` then meets the store still unwritable (exit 3, the record kept); once the
store is repaired it delivers every metric point, the model and FINISHED into it, and,
from a copy of the run directory, into a fresh store with ``--tracking-uri``. Which errors
are outages, a deleted and a locked store among them, is tested in-process
(test_store_outages): a locked store costs 20 s an attempt (MLflow's SQLite busy timeout),
more than this test may.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.commands import start_in_session, stop_session, tntrun_command, tntrun_sync
from tests.helpers.records import assert_delivered_whole
from tests.helpers.runs import wait_for_file
from tntrun.contract import run_files
from tntrun.contract.exit_codes import EXIT_TRACKING_PENDING
from tntrun.tracking.outage import Pending, sync_line

STEPS_PER_EPOCH, EPOCHS = 22, 2  # the default digits run with train.epochs=2
START_S = 180  # a rank importing TensorFlow on a busy 2-core machine, then 22 steps
# After the last hold: validation, the model saved and loaded back (MLflow's import on
# rank 0), the ranks' exit and the driver's end (tracking.outage_grace_s=0), on a busy machine.
END_S = 120


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
        "ranks_per_node=1",
        *args,
    )
    # In its own session: a signal to it reaches the driver alone.
    process = start_in_session(command, tmp_path, stdout=log.open("w"), stderr=subprocess.STDOUT)
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


def chattr(flag: str, *paths: Path) -> None:
    subprocess.run(["chattr", flag, *map(str, paths)], check=True)


def wait_for_line(log: Path, text: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_S
    while text not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def run_to_the_end(tmp_path: Path, store: Path, uri: str) -> tuple[int, Path, Path]:
    """The run, its store made unwritable after step 22 and two SIGTERMs after step 44:
    (exit code, run directory, console log)."""
    release, release_end = tmp_path / "release", tmp_path / "release-end"
    holds = (
        *hold("fault", STEPS_PER_EPOCH, release),
        *hold("end", STEPS_PER_EPOCH * EPOCHS, release_end),
    )
    process, log = start(tmp_path, uri, *holds)
    try:
        wait_for_line(log, "tntrun: MLflow run ", process)  # opened, its params logged
        run_dir = run_dir_of_run(tmp_path, process, log)
        wait_for_file(held(release), process, START_S, log)
        chattr("+i", store / "mlflow.db", store)  # not even root writes it now
        release.touch()
        wait_for_file(held(release_end), process, START_S, log)
        assert (run_dir / run_files.TRAINED).is_file()
        sigterm_twice(process, log)
        release_end.touch()
        return process.wait(timeout=END_S), run_dir, log
    finally:
        stop_session(process)


def assert_still_pending(result: subprocess.CompletedProcess, uri: str, run_dir: Path) -> None:
    output = result.stdout + result.stderr
    assert_exit(result, EXIT_TRACKING_PENDING)
    assert "Traceback" not in output
    assert result.stdout.splitlines()[-1] == sync_line(uri, run_dir)
    assert Pending.load(run_dir) is not None


@pytest.mark.slow
def test_a_store_that_fails_mid_run_and_sigterms_after_the_last_step_lose_nothing(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    database = store / "mlflow.db"
    uri = f"sqlite:///{database}"
    try:
        code, run_dir, log = run_to_the_end(tmp_path, store, uri)
        output = log.read_text()
        lines = output.splitlines()
        assert code == EXIT_TRACKING_PENDING, output[-3000:]  # not KILLED, not 143
        assert "Traceback" not in output and "tntrun: run FINISHED" in lines
        (failed,) = [line for line in lines if " cannot be written (" in line]  # the relay's
        assert failed.startswith(f"tntrun: the tracking store {uri} cannot be written (SQLite: ")
        assert lines[-1] == sync_line(uri, run_dir)
        assert sum("after the last training step" in line for line in lines) == 1
        assert "the ranks stop at the next step" not in output  # no preemption claimed
        pending = Pending.load(run_dir)
        assert pending is not None and pending.status == "FINISHED" and pending.run_id
        copy = tmp_path / "copy"  # replayed below into a store that never had the run
        shutil.copytree(run_dir, copy)

        assert_still_pending(tntrun_sync(tmp_path, run_dir), uri, run_dir)  # still unwritable
    finally:
        chattr("-i", database, store)  # else pytest could not delete tmp_path
    print(f"the driver said: {failed}")
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    for target, replayed, args in (
        (uri, run_dir, ()),  # the store repaired: its RUNNING run is completed
        (fresh, copy, ("--tracking-uri", fresh)),  # a store without the run: made anew
    ):
        synced = tntrun_sync(tmp_path, replayed, *args)
        assert_succeeded(synced)
        assert "Traceback" not in synced.stdout + synced.stderr
        assert "the outputs and status FINISHED delivered" in synced.stdout
        assert not (replayed / run_files.TRACKING_PENDING).exists()
        assert_delivered_whole(target, replayed, 40)
