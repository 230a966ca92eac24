"""Failure handling with real ranks: a rank that raises, dies or stalls, and Ctrl-C.

Each case must end the whole job promptly, leave no process behind, mark the
MLflow run FAILED or KILLED with the reason, and keep the last checkpoint usable.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import (
    BIN,
    DETERMINISTIC,
    assert_same_weights,
    clean_env,
    final_weights,
    free_port,
    run_dir_of,
    store_uri,
    tntrun_cli,
    tntrun_command,
)

pytestmark = pytest.mark.slow
# A checkpoint every epoch (not every 60 s): the failure tests check that it stays usable.
LONG_RUN = ("train.epochs=50", "tracking.system_metrics=false", "checkpoint.min_interval_s=0")


def fault(kind: str, rank: int = 1, step: int = 30) -> tuple[str, ...]:
    return (
        "+callbacks.fault._target_=tntrun.engine.faults.InjectFault",
        "+callbacks.fault.ranks=all_ranks", f"+callbacks.fault.rank={rank}",
        f"+callbacks.fault.at_step={step}", f"+callbacks.fault.kind={kind}",
    )  # fmt: skip


def run_until(tmp_path, args, marker: str, then=None):
    """Run tntrun; note when ``marker`` is printed (and call ``then``); return timings."""
    driver = subprocess.Popen(
        tntrun_command(tmp_path, *args), cwd=tmp_path, env=clean_env(), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    lines, marked = [], None
    for line in driver.stdout:
        lines.append(line)
        if marked is None and marker in line:
            marked = time.monotonic()
            if then is not None:
                then(driver)
    code = driver.wait(timeout=120)
    ended = time.monotonic()
    output = "".join(lines)
    assert marked is not None, f"never saw {marker!r}:\n{output[-3000:]}"
    return code, ended - marked, output


def leftover_processes(run_dir) -> list[str]:
    found = subprocess.run(["pgrep", "-af", str(run_dir)], capture_output=True, text=True)
    return [line for line in found.stdout.splitlines() if "pgrep" not in line]


def wait_until_no_process_left(run_dir, since: float, bound: float) -> float:
    """Seconds from ``since`` until no process of the run is left (polled up to ``bound``)."""
    while leftover_processes(run_dir) and time.monotonic() - since < bound:
        time.sleep(0.2)
    return time.monotonic() - since


def the_run(tmp_path, output):
    run_dir = run_dir_of(subprocess.CompletedProcess([], 0, output, ""))
    client = MlflowClient(store_uri(tmp_path))
    return run_dir, client, client.get_run((run_dir / "mlflow_run_id").read_text())


@pytest.mark.parametrize("kind", ["raise", "kill"])
def test_a_failing_rank_ends_the_job_and_the_run_can_resume(tmp_path, kind):
    code, seconds, output = run_until(tmp_path, (*LONG_RUN, *fault(kind)), "injecting fault")
    assert code != 0 and seconds < 30, f"job took {seconds:.1f} s to end after the fault"
    run_dir, client, run = the_run(tmp_path, output)
    assert run.info.status == "FAILED"
    assert leftover_processes(run_dir) == []
    assert run.data.tags["failure.rank"] == "1"
    if kind == "raise":
        assert "injected failure on rank 1" in run.data.tags["failure.last_lines"]
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert "traceback_rank_1.txt" in artifacts
    assert (run_dir / "checkpoints" / "epoch-0001" / "meta.json").exists()
    if kind == "kill":
        return  # the same checkpoint; resuming from it once is enough

    resumed = tntrun_cli(tmp_path, f"resume={run_dir}", "train.epochs=2", "callbacks={}")
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "at epoch 1" in resumed.stdout
    assert client.get_run(run.info.run_id).info.status == "FINISHED"


def assert_ctrl_c_stops_every_rank_within_10_s(tmp_path, *overrides: str, settle_s=0.0) -> None:
    """SIGINT to the driver after epoch 1's checkpoint: KILLED, no process of the run left
    (``settle_s`` after the driver's exit: a rank on another host ends by its last beat)."""
    code, seconds, output = run_until(
        tmp_path, (*overrides, *LONG_RUN), "checkpoint saved: epoch 1",
        then=lambda driver: driver.send_signal(signal.SIGINT),
    )  # fmt: skip
    assert code != 0 and seconds < 10, f"ranks took {seconds:.1f} s to stop"
    exited = time.monotonic()
    run_dir, _, run = the_run(tmp_path, output)
    assert run.info.status == "KILLED"
    wait_until_no_process_left(run_dir, exited, settle_s)
    assert leftover_processes(run_dir) == []


def test_ctrl_c_stops_every_rank_within_10_s(tmp_path):
    assert_ctrl_c_stops_every_rank_within_10_s(tmp_path)


def test_the_watchdog_names_a_stalled_rank(tmp_path):
    code, seconds, output = run_until(
        tmp_path, (*LONG_RUN, "train.stall_timeout_s=8", *fault("stall")), "injecting fault"
    )
    assert code != 0 and seconds < 8 + 15
    assert "stall watchdog: rank 1 stalled at step 30" in output
    run_dir, _, run = the_run(tmp_path, output)
    assert run.info.status == "FAILED"
    assert run.data.tags["failure.stalled"].startswith("rank 1 stalled at step 30")
    assert leftover_processes(run_dir) == []
    assert os.path.exists(run_dir / "checkpoints" / "epoch-0001")


def test_a_sigkilled_driver_takes_its_ranks_along_and_a_later_command_ends_its_run(tmp_path):
    """SIGKILL of the driver (the OOM killer, Slurm's KillWait): its heartbeat stops, the ranks
    and horovodrun end within 10 s (their output is still read: no broken pipe helps), and
    ``tntrun ui`` on the same store ends the run KILLED with ``driver_lost``."""
    driver = subprocess.Popen(
        tntrun_command(tmp_path, *LONG_RUN), cwd=tmp_path, env=clean_env(), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    for line in driver.stdout:
        lines.append(line)
        if "checkpoint saved: epoch 1" in line:
            break
    threading.Thread(target=lambda: lines.extend(driver.stdout), daemon=True).start()
    (run_id,) = re.findall(r"MLflow run (\w+) in", "".join(lines))
    client = MlflowClient(store_uri(tmp_path))
    run_dir = client.get_run(run_id).data.tags["run_dir"]
    driver.kill()
    outlived = wait_until_no_process_left(run_dir, time.monotonic(), 30)
    assert leftover_processes(run_dir) == [] and outlived < 10, (
        f"ranks outlived it {outlived:.1f} s"
    )
    assert client.get_run(run_id).info.status == "RUNNING"  # nobody could end it

    ui = subprocess.Popen(
        [str(BIN / "tntrun"), "ui", "--output-root", str(tmp_path / "outputs"),
         "--port", str(free_port())],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
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
        run.data.tags["driver_lost"] == f"driver pid {driver.pid} on {socket.gethostname()} is gone"
    )
    print(f"\n[lost driver] ranks and launcher outlived the driver by {outlived:.1f} s")


def test_max_restarts_restarts_the_ranks_in_the_same_run_and_ends_like_no_failure(
    tmp_path, two_local_ranks_weights
):
    """SIGKILL of rank 1 at step 30 (epoch 2) with train.max_restarts=1: the driver restarts
    the ranks from epoch 1's checkpoint, and the final weights equal an undisturbed run's."""
    once = tmp_path / "fault-fired"  # the restarted ranks pass step 30 again
    result = tntrun_cli(tmp_path, *DETERMINISTIC, "checkpoint.min_interval_s=0",
                        "train.max_restarts=1", *fault("kill"),
                        f"+callbacks.fault.once_file={once}")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    assert "restart 1 of 1 (train.max_restarts) from epoch-0001, in the same run" in result.stdout
    run_dir = run_dir_of(result)
    client = MlflowClient(store_uri(tmp_path))
    run = client.get_run((run_dir / "mlflow_run_id").read_text())
    assert run.info.status == "FINISHED" and run.data.tags["restarts"] == "1"
    assert run.data.tags["restart.1"].startswith("rank 1 failed")
    assert (run_dir / "restarts" / "attempt-1" / "logs" / "rank.1.log").is_file()
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "restarts/attempt-1")}
    assert "restarts/attempt-1/traceback_rank_1.txt" in artifacts
    assert_same_weights(final_weights(result), two_local_ranks_weights)
