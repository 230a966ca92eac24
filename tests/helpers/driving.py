"""tntrun driven as a user drives it: in its own session, its output read line by line,
faults injected into its ranks, Ctrl-C; and the checks that its run ended as it should and
left no process behind (the failure tests, on one host, on two hosts and under Slurm)."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import NamedTuple

from mlflow.tracking import MlflowClient

from tests.helpers.bounds import AFTER_CTRL_C_S, AFTER_DRIVER_KILLED_S
from tests.helpers.commands import start_tntrun, stop_session
from tests.helpers.processes import (
    HELD,
    Hold,
    Process,
    describe,
    processes_while_running,
    wait_until_no_process_left,
)
from tests.helpers.runs import run_dir_of, store_uri

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
        self.process = start_tntrun(
            tmp_path, *self.hold.overrides(), *args, preexec_fn=ignore_sigint
        )
        self.lines: list[str] = []
        self.seen: list[Process] = []

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc) -> None:
        stop_session(self.process)  # alive only if the test failed: its ranks follow it

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


def run_reading(
    tmp_path: Path, args: tuple[str, ...], on_line=None, marker: str = "injecting fault"
) -> tuple[int, str, float]:
    """tntrun to its end, its output read line by line (``on_line`` called on each); the exit
    code, the output and the seconds from the first line with ``marker`` to the end."""
    process = start_tntrun(tmp_path, *args)
    lines, fault_at = [], None
    try:
        for line in process.stdout:
            lines.append(line)
            if fault_at is None and marker in line:
                fault_at = time.monotonic()
            if on_line is not None:
                on_line(line)
        code = process.wait(timeout=600)
    finally:
        stop_session(process)
    return code, "".join(lines), time.monotonic() - (fault_at or time.monotonic())


def assert_nothing_left(run_dir, seen: list[Process], since: float, bound: float) -> float:
    """No process of the run left ``bound`` s after ``since`` at the latest; the seconds."""
    seconds, left = wait_until_no_process_left(run_dir, seen, since, bound)
    assert not left, f"left {seconds:.1f} s after the end:\n{describe(left)}"
    return seconds


def the_run(tmp_path, output):
    run_dir = run_dir_of(subprocess.CompletedProcess([], 0, output, ""))
    client = MlflowClient(store_uri(tmp_path))
    return run_dir, client, client.get_run((run_dir / "run_id").read_text())


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
    assert ran.seconds < AFTER_CTRL_C_S, f"ranks took {ran.seconds:.1f} s to stop"
    assert ran.code == 130, ran.output[-3000:]  # 128 + SIGINT, as shells expect
    exited = time.monotonic()
    run_dir, _, run = the_run(tmp_path, ran.output)
    assert run.info.status == "KILLED"
    assert_nothing_left(run_dir, ran.seen, exited, settle_s)
    return ran


class Lost(NamedTuple):
    run_id: str
    outlived: float  # seconds the run's processes outlived the driver's SIGKILL


def sigkill_the_driver(tmp_path, driver: Driver) -> Lost:
    """SIGKILL ``driver`` after epoch 1's checkpoint (its output still read: no broken pipe
    helps); assert that every process of its run ends within AFTER_DRIVER_KILLED_S."""
    assert driver.read_until("checkpoint saved: epoch 1") is not None, driver.output[-3000:]
    # The driver opens the MLflow run in a thread while the ranks train: on a busy machine
    # its line may come after epoch 1's checkpoint.
    if "MLflow run " not in driver.output:
        assert driver.read_until("MLflow run ") is not None, driver.output[-3000:]
    threading.Thread(target=driver.read_until, args=(None,), daemon=True).start()
    (run_id,) = re.findall(r"MLflow run (\w+) in", driver.output)
    client = MlflowClient(store_uri(tmp_path))
    run_dir = client.get_run(run_id).data.tags["run_dir"]
    driver.process.kill()
    outlived = assert_nothing_left(run_dir, driver.seen, time.monotonic(), 60)
    assert outlived < AFTER_DRIVER_KILLED_S, f"ranks outlived it {outlived:.1f} s"
    assert client.get_run(run_id).info.status == "RUNNING"  # nobody could end it
    return Lost(run_id, outlived)
