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
from typing import NamedTuple

import pytest
from mlflow.tracking import MlflowClient

from tests.bounds import AFTER_CTRL_C_S, AFTER_DRIVER_KILLED_S, AFTER_RANK_FAILURE_S, after_stall_s
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
from tests.processes import (
    HELD,
    Hold,
    Process,
    describe,
    processes_while_running,
    wait_until_no_process_left,
)

pytestmark = pytest.mark.slow
# A checkpoint every epoch (not every 60 s): the failure tests check that it stays usable.
LONG_RUN = ("train.epochs=50", "tracking.system_metrics=false", "checkpoint.min_interval_s=0")


def fault(kind: str, rank: int = 1, step: int = 30) -> tuple[str, ...]:
    return (
        "+callbacks.fault._target_=tntrun.engine.faults.InjectFault",
        "+callbacks.fault.ranks=all_ranks",
        f"+callbacks.fault.rank={rank}",
        f"+callbacks.fault.at_step={step}",
        f"+callbacks.fault.kind={kind}",
    )


LOCAL = ("driver", "horovodrun")  # found beside the ranks of a run on this host
WORLD_SIZE = 2


def ignore_sigint() -> None:
    """Start tntrun as a script's background job starts it (POSIX shells without job
    control ignore SIGINT there): Ctrl-C and tntrun's own stop of the launcher must work
    whatever disposition the driver inherits, and whoever started pytest."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Driver:
    """``tntrun`` in its own session, its output read line by line. Rank 0 is held at
    HOLD_STEP while the positive control searches the run's processes (``seen``): each
    rank and ``roles``, this process as the driver; a failed test kills the session."""

    def __init__(self, tmp_path, args, roles: tuple[str, ...] = LOCAL) -> None:
        self.hold, self.roles = Hold(tmp_path), roles
        self.process = subprocess.Popen(
            tntrun_command(tmp_path, *self.hold.overrides(), *args),
            cwd=tmp_path,
            env=clean_env(),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=ignore_sigint,
        )
        self.lines: list[str] = []
        self.seen: list[Process] = []

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:  # the test failed: its ranks follow the driver
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def read_until(self, marker: str | None, then=None) -> float | None:
        """Read up to the line with ``marker`` (None: to the end; then call ``then``) and
        search the run's processes while rank 0 is held; when ``marker`` was printed."""
        for line in self.process.stdout:
            self.lines.append(line)
            if HELD in line and not self.seen:
                self.seen = processes_while_running(self.hold.run_dir(), WORLD_SIZE, *self.roles)
                drivers = [p.pid for p in self.seen if p.role == "driver"]
                assert drivers == [self.process.pid], describe(self.seen)
                self.hold.release()
            if marker is not None and marker in line:
                assert self.seen, f"{marker!r} before rank 0 was held:\n{self.output[-3000:]}"
                marked = time.monotonic()
                if then is not None:
                    then(self.process)
                return marked
        return None


class Ran(NamedTuple):
    code: int
    seconds: float  # from the marker to the driver's exit
    output: str
    seen: list[Process]  # the run's processes found while it ran (the positive control)


def run_until(tmp_path, args, marker: str, then=None, roles: tuple[str, ...] = LOCAL) -> Ran:
    """Run tntrun; note when ``marker`` is printed (and call ``then``); return timings."""
    with Driver(tmp_path, args, roles) as driver:
        marked = driver.read_until(marker, then)
        driver.read_until(None)
        code = driver.process.wait(timeout=120)
    ended = time.monotonic()
    assert marked is not None, f"never saw {marker!r}:\n{driver.output[-3000:]}"
    return Ran(code, ended - marked, driver.output, driver.seen)


def assert_nothing_left(run_dir, seen: list[Process], since: float, bound: float) -> float:
    """No process of the run left ``bound`` s after ``since`` at the latest; the seconds."""
    seconds, left = wait_until_no_process_left(run_dir, seen, since, bound)
    assert not left, f"left {seconds:.1f} s after the end:\n{describe(left)}"
    return seconds


def the_run(tmp_path, output):
    run_dir = run_dir_of(subprocess.CompletedProcess([], 0, output, ""))
    client = MlflowClient(store_uri(tmp_path))
    return run_dir, client, client.get_run((run_dir / "mlflow_run_id").read_text())


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

    resumed = tntrun_cli(tmp_path, f"resume={run_dir}", "train.epochs=2", "callbacks={}")
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "at epoch 1" in resumed.stdout
    assert client.get_run(run.info.run_id).info.status == "FINISHED"


def assert_ctrl_c_stops_every_rank(
    tmp_path, *overrides: str, settle_s=0.0, roles: tuple[str, ...] = LOCAL
) -> Ran:
    """SIGINT to the driver after epoch 1's checkpoint: KILLED, no process of the run left
    (``settle_s`` after the driver's exit: a rank on another host ends by its last beat)."""
    ran = run_until(
        tmp_path,
        (*overrides, *LONG_RUN),
        "checkpoint saved: epoch 1",
        then=lambda driver: driver.send_signal(signal.SIGINT),
        roles=roles,
    )
    assert ran.code != 0 and ran.seconds < AFTER_CTRL_C_S, f"ranks took {ran.seconds:.1f} s to stop"
    exited = time.monotonic()
    run_dir, _, run = the_run(tmp_path, ran.output)
    assert run.info.status == "KILLED"
    assert_nothing_left(run_dir, ran.seen, exited, settle_s)
    return ran


def test_ctrl_c_stops_every_rank(tmp_path):
    assert_ctrl_c_stops_every_rank(tmp_path)


# Longer than any legitimate pause of this run on a busy machine: the first step's tracing
# (10 s seen at load 7) and rank 0 held while the positive control searches /proc.
STALL_TIMEOUT_S = 30.0


def test_the_watchdog_names_a_stalled_rank(tmp_path):
    stall = f"train.stall_timeout_s={STALL_TIMEOUT_S}"
    code, seconds, output, seen = run_until(
        tmp_path, (*LONG_RUN, stall, *fault("stall")), "injecting fault"
    )
    assert code != 0 and seconds < after_stall_s(STALL_TIMEOUT_S), f"{seconds:.1f} s"
    assert "stall watchdog: rank 1 stalled at step 30" in output
    run_dir, _, run = the_run(tmp_path, output)
    assert run.info.status == "FAILED"
    assert run.data.tags["failure.stalled"].startswith("rank 1 stalled at step 30")
    assert_nothing_left(run_dir, seen, time.monotonic(), 0)
    assert os.path.exists(run_dir / "checkpoints" / "epoch-0001")


def test_a_sigkilled_driver_takes_its_ranks_along_and_a_later_command_ends_its_run(tmp_path):
    """SIGKILL of the driver (the OOM killer, Slurm's KillWait): its heartbeat stops, the ranks
    and horovodrun end within LOST_AFTER_S of its last beat (their output is still read: no
    broken pipe helps), and
    ``tntrun ui`` on the same store ends the run KILLED with ``driver_lost``."""
    with Driver(tmp_path, LONG_RUN) as driver:
        assert driver.read_until("checkpoint saved: epoch 1") is not None, driver.output[-3000:]
        threading.Thread(target=driver.read_until, args=(None,), daemon=True).start()
        (run_id,) = re.findall(r"MLflow run (\w+) in", driver.output)
        client = MlflowClient(store_uri(tmp_path))
        run_dir = client.get_run(run_id).data.tags["run_dir"]
        driver.process.kill()
        outlived = assert_nothing_left(run_dir, driver.seen, time.monotonic(), 60)
        assert outlived < AFTER_DRIVER_KILLED_S, f"ranks outlived it {outlived:.1f} s"
    assert client.get_run(run_id).info.status == "RUNNING"  # nobody could end it

    ui = subprocess.Popen(
        [
            str(BIN / "tntrun"),
            "ui",
            "--output-root",
            str(tmp_path / "outputs"),
            "--port",
            str(free_port()),
        ],
        cwd=tmp_path,
        env=clean_env(),
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
    print(f"\n[lost driver] ranks and launcher outlived the driver by {outlived:.1f} s")


def test_max_restarts_restarts_the_ranks_in_the_same_run_and_ends_like_no_failure(
    tmp_path, two_local_ranks_weights
):
    """SIGKILL of rank 1 at step 30 (epoch 2) with train.max_restarts=1: the driver restarts
    the ranks from epoch 1's checkpoint, and the final weights equal an undisturbed run's."""
    once = tmp_path / "fault-fired"  # the restarted ranks pass step 30 again
    result = tntrun_cli(
        tmp_path,
        *DETERMINISTIC,
        "checkpoint.min_interval_s=0",
        "train.max_restarts=1",
        *fault("kill"),
        f"+callbacks.fault.once_file={once}",
    )
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
