"""A tracking server that goes away mid-run: training goes on, nothing is lost or doubled.

Real processes only: an ``mlflow server`` over SQLite on a free port, killed with
SIGKILL while a Horovod rank trains, restarted on the same store (or not, and
``tntrun sync`` replays the run later). One rank (``ranks_per_node=1``): what is relayed
is rank 0's record and the driver's, the same with any number of ranks, and a second rank
would only cost CPU. The relay's bookkeeping is tested on its own first.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import (
    clean_env,
    free_port,
    start_in_session,
    tntrun_command,
    tntrun_sync,
)
from tests.helpers.pace import PACE
from tests.helpers.records import (
    assert_delivered_whole,
    assert_each_sample_once,
    assert_record_whole,
    expected_counts,
    host_samples,
    recorded_counts,
)
from tntrun.contract import run_files
from tntrun.contract.exit_codes import EXIT_TRACKING_PENDING
from tntrun.contract.metrics import MetricsWriter, last_values
from tntrun.tracking.metrics_stream import MetricsRelay
from tntrun.tracking.mlflow_tracker import MlflowTracker
from tntrun.tracking.mlflow_ui import server_command
from tntrun.tracking.outage import Pending, describe, is_outage, sync_line


def test_a_failed_send_keeps_its_lines_for_the_next_one_in_order_and_once(tmp_path):
    writer = MetricsWriter(tmp_path)
    delivered: list[tuple[str, int]] = []
    down = [True]
    events: list[str] = []

    def send(points):
        if down[0]:
            raise ConnectionRefusedError(111, "Connection refused")
        delivered.extend((key, step) for key, _, _, step in points)

    relay = MetricsRelay(
        tmp_path / run_files.METRICS,
        send,
        max_points=5,
        on_failure=lambda err: events.append(f"down: {describe(err)}"),
        on_recovery=lambda lines: events.append(f"back: {lines}"),
    )
    for step in range(4):
        writer.log({"a": step, "b": step, "c": step}, step)
    for _ in range(3):  # the store is down: nothing moves, one report
        assert not relay.try_drain()
    assert relay.offset == 0 and delivered == []
    down[0] = False
    writer.log({"a": 9}, 9)
    assert relay.try_drain()
    writer.close()
    assert delivered == [(k, s) for s in range(4) for k in "abc"] + [("a", 9)]
    assert events == ["down: [Errno 111] Connection refused", "back: 5"]
    assert relay.offset == (tmp_path / run_files.METRICS).stat().st_size
    assert relay.try_drain() and relay.lines_sent == 5  # nothing sent twice


def test_a_send_failing_halfway_resends_only_the_lines_not_accepted(tmp_path):
    writer = MetricsWriter(tmp_path)
    for step in range(3):
        writer.log({"a": step, "b": step}, step)
    writer.close()
    calls: list[list[int]] = []

    def send(points):  # accepts the first batch (two lines of 2 points), then fails
        calls.append(sorted({step for *_, step in points}))
        if len(calls) == 2:
            raise TimeoutError("timed out")

    relay = MetricsRelay(tmp_path / run_files.METRICS, send, max_points=4)
    with pytest.raises(TimeoutError):
        relay.drain()
    assert calls == [[0, 1], [2]] and relay.lines_sent == 0
    assert relay.drain() == 1 and calls[-1] == [2]
    assert last_values(tmp_path / run_files.METRICS) == {"a": 2.0, "b": 2.0}


def test_pending_record_round_trip_and_outage_classification(tmp_path):
    pending = Pending("http://127.0.0.1:9", "FINISHED", "abc", 120, tags={"world_size": "2"})
    pending.save(tmp_path)
    assert Pending.load(tmp_path) == pending
    Pending.clear(tmp_path)
    assert Pending.load(tmp_path) is None
    wrapped = RuntimeError("API request failed")
    wrapped.__context__ = ConnectionRefusedError(111, "Connection refused")
    assert is_outage(wrapped, "http://127.0.0.1:9")
    assert not is_outage(wrapped, f"sqlite:///{tmp_path}/mlflow.db")  # a local store: a bug
    assert is_outage(ValueError("no answer"), "http://127.0.0.1:9")  # nothing listens there
    assert sync_line("http://h:5000", Path("/r/a b")) == (
        "tntrun: the tracking store http://h:5000 is unreachable; replay this run into it "
        "later with: tntrun sync '/r/a b'"
    )


# --- real servers and ranks -------------------------------------------------------------


class MlflowServer:
    """``mlflow server`` over a SQLite store in ``folder``, on a fixed port across restarts."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, seconds: float = 90) -> float:
        """Start and wait until healthy; the seconds it took."""
        begin = time.monotonic()
        env = {
            **clean_env(),
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        command = server_command(f"sqlite:///{self.folder / 'mlflow.db'}", port=self.port)
        log = (self.folder / "server.log").open("a")
        self.process = start_in_session(
            command, self.folder, env, stdout=log, stderr=subprocess.STDOUT
        )
        while time.monotonic() - begin < seconds:
            assert self.process.poll() is None, (self.folder / "server.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.read().strip() == b"OK":
                        return time.monotonic() - begin
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"mlflow server at {self.url} not healthy within {seconds} s")

    def up(self) -> None:
        """Start the server unless it runs (an earlier test of the module left it up)."""
        if self.process is None or self.process.poll() is not None:
            self.start()

    def kill(self) -> None:
        """SIGKILL the server and its workers (a crash, not a shutdown)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """One server for the module's tests, each of which crashes and restarts it: the one a
    test restarts serves the next (a start costs about 7 CPU-s). They share its store and
    read only their own runs there, by id."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    yield server
    server.kill()


def start_run(tmp_path: Path, server: MlflowServer, *args: str) -> tuple[subprocess.Popen, Path]:
    log = (tmp_path / "tntrun.log").open("w")
    command = tntrun_command(
        tmp_path,
        f"tracking.uri={server.url}",
        "tracking.log_every_steps=5",
        "ranks_per_node=1",
        *args,
    )
    process = start_in_session(command, tmp_path, stdout=log, stderr=subprocess.STDOUT, text=True)
    return process, tmp_path / "tntrun.log"


def wait_for_training(tmp_path: Path, process: subprocess.Popen, lines: int) -> Path:
    """The run directory, once its run exists and rank 0 wrote ``lines`` metric lines."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, (tmp_path / "tntrun.log").read_text()[-3000:]
        for run_id in (tmp_path / "outputs" / "runs").glob(f"*/*/{run_files.RUN_ID}"):
            metrics = run_id.parent / run_files.METRICS
            if metrics.exists() and metrics.read_text().count("\n") >= lines:
                return run_id.parent
        time.sleep(0.1)
    raise AssertionError("training did not start within 120 s")


def metric_lines(run_dir: Path) -> int:
    return (run_dir / run_files.METRICS).read_text().count("\n")


def wait_for_output(log: Path, text: str, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while text not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


@pytest.mark.slow
def test_metrics_written_while_the_server_is_down_reach_the_run_once_it_is_back(
    tmp_path, mlflow_server
):
    from mlflow.tracking import MlflowClient

    mlflow_server.up()
    begin = time.monotonic()
    (tmp_path / "pace.py").write_text(PACE)
    until = tmp_path / "full-speed"
    process, log = start_run(
        tmp_path,
        mlflow_server,
        "train.epochs=20",
        "tracking.outage_grace_s=90",
        "tracking.system_metrics_interval_s=1",
        "+callbacks.pace._target_=pace.Pace",
        "+callbacks.pace.ranks=master_only",
        "+callbacks.pace.step_s=0.1",
        f"+callbacks.pace.until={until}",
        "+callbacks.pace.hold_at_step=400",  # of 440: training outlasts the outage, however long
    )
    run_dir = wait_for_training(tmp_path, process, lines=5)
    mlflow_server.kill()
    down_at, lines_at_kill, down_ms = time.monotonic(), metric_lines(run_dir), time.time() * 1000
    wait_for_output(log, "does not answer", process)
    mlflow_server.start()  # 5 to 25 s here: the outage
    up_ms = time.time() * 1000
    outage_s, lines_at_return = time.monotonic() - down_at, metric_lines(run_dir)
    wait_for_output(log, "metric lines caught up", process)  # the relay, while training runs
    lines_caught_up = metric_lines(run_dir)
    until.touch()
    assert process.wait(timeout=180) == 0, log.read_text()[-3000:]
    wall_s, output = time.monotonic() - begin, log.read_text()
    print(
        f"outage {outage_s:.1f} s; metric lines: {lines_at_kill} at the kill, {lines_at_return} "
        f"at the return, {lines_caught_up} when caught up, {metric_lines(run_dir)} in all; "
        f"tntrun {wall_s:.1f} s"
    )

    assert lines_at_return > lines_at_kill  # training went on and rank 0 kept writing
    assert metric_lines(run_dir) > lines_caught_up  # and went on after the relay caught up
    assert "Traceback" not in output and "waiting up to" not in output  # nothing left at the end
    _, samples = assert_record_whole(MlflowClient(mlflow_server.url), run_dir, 300)
    assert any(down_ms < sample["t"] < up_ms for sample in samples)  # sampled through it
    assert not (run_dir / run_files.TRACKING_PENDING).exists()


@pytest.mark.slow
def test_a_server_that_stays_away_leaves_the_run_to_tntrun_sync(tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    mlflow_server.up()
    begin = time.monotonic()
    process, log = start_run(
        tmp_path,
        mlflow_server,
        "train.epochs=15",
        "tracking.outage_grace_s=2",
        "tracking.system_metrics_interval_s=1",
    )
    run_dir = wait_for_training(tmp_path, process, lines=3)
    mlflow_server.kill()
    assert process.wait(timeout=180) == EXIT_TRACKING_PENDING, log.read_text()[-3000:]
    run_s, output = time.monotonic() - begin, log.read_text().splitlines()
    assert output[-1] == sync_line(mlflow_server.url, run_dir)
    assert "tntrun: run FINISHED" in output and "tntrun: final val_accuracy:" in "\n".join(output)
    pending = Pending.load(run_dir)
    run_id = (run_dir / run_files.RUN_ID).read_text()
    assert pending is not None and pending.status == "FINISHED" and pending.run_id == run_id
    assert pending.metrics_offset < (run_dir / run_files.METRICS).stat().st_size
    copy = tmp_path / "copy"  # the same run directory, replayed below into a store without it
    shutil.copytree(run_dir, copy)

    restart_s = mlflow_server.start()
    client = MlflowClient(mlflow_server.url)
    assert client.get_run(run_id).info.status == "RUNNING"  # nothing could end it meanwhile
    with pytest.raises(LookupError) as missing:  # a run not in a store that answers ...
        MlflowTracker.at(mlflow_server.url, tmp_path).attach("0" * 32)
    assert not is_outage(missing.value, mlflow_server.url)  # ... is not an outage
    begin = time.monotonic()
    result = tntrun_sync(tmp_path, run_dir)
    sync_s = time.monotonic() - begin
    print(
        f"tntrun {run_s:.1f} s (exit 3), server back after {restart_s:.1f} s, sync {sync_s:.1f} s:"
    )
    print(result.stdout.strip())
    assert_succeeded(result)
    assert "metric lines, the outputs and status FINISHED delivered" in result.stdout
    # FINISHED, every point and sample (what the driver could not) once, the model once.
    assert_delivered_whole(mlflow_server.url, run_dir, 0)
    expected = expected_counts(run_dir)
    assert not (run_dir / run_files.TRACKING_PENDING).exists()
    again = tntrun_sync(tmp_path, run_dir)
    assert_succeeded(again)
    assert "nothing to replay" in again.stdout
    assert recorded_counts(client, run_id, expected) == expected  # idempotent
    assert_each_sample_once(client, run_id, host_samples(run_dir))

    assert_sync_makes_the_run_anew(tmp_path, copy, run_id, expected)


def assert_sync_makes_the_run_anew(tmp_path: Path, copy: Path, run_id: str, expected) -> None:
    """A store that never had the run (``copy``, a copy of its run directory): sync creates
    it with its params and every metric point (``expected``) and sample."""
    from mlflow.tracking import MlflowClient

    other = f"sqlite:///{tmp_path / 'other.db'}"
    result = tntrun_sync(tmp_path, copy, "--tracking-uri", other)
    assert_succeeded(result)
    other_client = MlflowClient(other)
    new_id = (copy / run_files.RUN_ID).read_text()
    assert new_id != run_id
    created = other_client.get_run(new_id)
    assert created.info.status == "FINISHED"
    assert created.data.params["plan.world_size"] == "1"
    assert_each_sample_once(other_client, new_id, host_samples(copy))  # every one, anew
    assert recorded_counts(other_client, new_id, expected) == expected
