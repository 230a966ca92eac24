"""Failure handling with real ranks: a rank that raises, dies or stalls, and Ctrl-C.

Each case must end the whole job promptly, leave no process behind, mark the
MLflow run FAILED or KILLED with the reason, and keep the last checkpoint usable.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.bounds import AFTER_RANK_FAILURE_S, after_stall_s
from tests.helpers.commands import NO_LOGGED_MODEL, free_port, start_in_session, tntrun_cli
from tests.helpers.driving import (
    LONG_RUN,
    Driver,
    assert_ctrl_c_stops_every_rank,
    assert_nothing_left,
    fault,
    run_until,
    sigkill_the_driver,
    the_run,
)
from tests.helpers.mpi import DRIVER_LAUNCHERS, LAUNCHERS, use_launcher
from tests.helpers.paths import BIN
from tests.helpers.runs import (
    DETERMINISTIC,
    assert_same_weights,
    final_weights,
    run_dir_of,
    store_uri,
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["raise", "kill"])
def test_a_failing_rank_ends_the_job_and_the_run_can_resume(tmp_path, kind):
    code, seconds, output, seen = run_until(tmp_path, (*LONG_RUN, *fault(kind)), "injecting fault")
    assert code != 0 and seconds < AFTER_RANK_FAILURE_S, f"{seconds:.1f} s to end after the fault"
    run_dir, client, run = the_run(tmp_path, output)
    assert run.info.status == "FAILED"
    assert_nothing_left(run_dir, seen, time.monotonic(), 0)  # the driver waited for them all
    assert run.data.tags["failure.rank"] == "1"
    if kind == "raise":
        assert "injected failure on rank 1" in run.data.tags["failure.last_lines"]
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert "traceback_rank_1.txt" in artifacts
    assert (run_dir / "checkpoints" / "epoch-0001" / "meta.json").exists()
    if kind == "kill":
        return  # the same checkpoint; resuming from it once is enough

    resumed = tntrun_cli(
        tmp_path, f"resume={run_dir}", "train.epochs=2", "callbacks={}", NO_LOGGED_MODEL
    )
    assert_succeeded(resumed)
    assert "at epoch 1" in resumed.stdout
    assert client.get_run(run.info.run_id).info.status == "FINISHED"


def test_ctrl_c_stops_every_rank(tmp_path):
    assert_ctrl_c_stops_every_rank(tmp_path)


# Longer than any legitimate pause of this run on a busy machine: the first step's tracing
# (10 s seen at load 7) and rank 0 held while the positive control searches /proc.
STALL_TIMEOUT_S = 20.0


@pytest.mark.parametrize("launcher", DRIVER_LAUNCHERS)
def test_the_watchdog_names_a_stalled_rank(tmp_path, monkeypatch, launcher):
    """Under horovodrun and mpirun alike: the watchdog reads the ranks' heartbeats, not the
    launcher, and stopping the launcher's process group ends the stalled rank too."""
    chosen, roles = use_launcher(launcher, tmp_path, monkeypatch)
    stall = f"faults.stall_timeout_s={STALL_TIMEOUT_S}"
    code, seconds, output, seen = run_until(
        tmp_path, (*chosen, *LONG_RUN, stall, *fault("stall")), "injecting fault", roles=roles
    )
    assert code != 0 and seconds < after_stall_s(STALL_TIMEOUT_S), f"{seconds:.1f} s"
    assert "stall watchdog: rank 1 stalled at step 30" in output
    run_dir, _, run = the_run(tmp_path, output)
    assert run.info.status == "FAILED"
    assert run.data.tags["failure.stalled"].startswith("rank 1 stalled at step 30")
    assert_nothing_left(run_dir, seen, time.monotonic(), 0)
    assert os.path.exists(run_dir / "checkpoints" / "epoch-0001")


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_sigkilled_driver_takes_its_ranks_along_and_a_later_command_ends_its_run(
    tmp_path, monkeypatch, launcher
):
    """SIGKILL of the driver (the OOM killer, Slurm's KillWait): its heartbeat stops, the ranks
    and the launcher (horovodrun; mpirun and MPICH's hydra_pmi_proxy) end within
    LOST_AFTER_S of its last beat (their output is still read: no broken pipe helps), and
    ``tntrun ui`` on the same store ends the run KILLED with ``driver_lost`` (which does not
    depend on the launcher: proven under horovodrun only)."""
    chosen, roles = use_launcher(launcher, tmp_path, monkeypatch)
    with Driver(tmp_path, (*chosen, *LONG_RUN), roles) as driver:
        run_id, outlived = sigkill_the_driver(tmp_path, driver)
    print(f"\n[lost driver, {launcher}] ranks and launcher outlived the driver by {outlived:.1f} s")
    if launcher != "horovodrun":
        return

    client = MlflowClient(store_uri(tmp_path))
    ui = start_in_session(
        [
            str(BIN / "tntrun"),
            "ui",
            "--output-root",
            str(tmp_path / "outputs"),
            "--port",
            str(free_port()),
        ],
        tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while client.get_run(run_id).info.status == "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        ui.terminate()
        ui.wait(timeout=30)
    run = client.get_run(run_id)
    assert run.info.status == "KILLED"
    assert (
        run.data.tags["driver_lost"]
        == f"driver pid {driver.process.pid} on {socket.gethostname()} is gone"
    )


@pytest.mark.parametrize("launcher", DRIVER_LAUNCHERS)
def test_max_restarts_restarts_the_ranks_in_the_same_run_and_ends_like_no_failure(
    tmp_path, monkeypatch, two_local_ranks_weights, launcher
):
    """SIGKILL of rank 1 at step 30 (epoch 2) with faults.max_restarts=1: the driver restarts
    the ranks from epoch 1's checkpoint, and the final weights equal an undisturbed run's
    (horovodrun's), under horovodrun and under mpirun, whose restarted ranks meet again at
    the rendezvous server of the first attempt."""
    chosen, _ = use_launcher(launcher, tmp_path, monkeypatch)
    once = tmp_path / "fault-fired"  # the restarted ranks pass step 30 again
    result = tntrun_cli(
        tmp_path,
        *chosen,
        *DETERMINISTIC,
        NO_LOGGED_MODEL,
        "checkpoint.min_interval_s=0",
        "faults.max_restarts=1",
        *fault("kill"),
        f"+callbacks.fault.once_file={once}",
    )
    assert_succeeded(result)
    assert "restart 1 of 1 (faults.max_restarts) from epoch-0001, in the same run" in result.stdout
    run_dir = run_dir_of(result)
    client = MlflowClient(store_uri(tmp_path))
    run = client.get_run((run_dir / "run_id").read_text())
    assert run.info.status == "FINISHED" and run.data.tags["restarts"] == "1"
    failed = run.data.tags["restart.1"].removeprefix("rank ")[:1]
    assert failed == "1", run.data.tags
    assert run.data.tags["restart.1"].startswith(f"rank {failed} failed")
    assert (run_dir / "restarts" / "attempt-1" / "logs" / "rank.1.log").is_file()
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "restarts/attempt-1")}
    assert f"restarts/attempt-1/traceback_rank_{failed}.txt" in artifacts
    assert_same_weights(final_weights(result), two_local_ranks_weights)
