"""The driver's heartbeat and the judgement of a driver as gone (in-process, real files)."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from tntrun.contract import run_files
from tntrun.contract.clock import process_start_time
from tntrun.contract.driver_alive import (
    BEAT_S,
    DriverHeartbeat,
    driver_tags,
    lost_driver,
    watch_driver,
)

POLL_S = BEAT_S / 2  # how often a rank's watch reads the heartbeat
MARGIN_S = 1.0  # a thread's wake-up can lag this much on a busy 2-core machine


def watched(run_dir, lost_after: float) -> tuple[threading.Event, list[str]]:
    """A rank's watch whose verdict is recorded instead of ending this process."""
    lost, why = threading.Event(), []
    watch_driver(run_dir, lambda reason: (why.append(reason), lost.set()), lost_after)
    return lost, why


def test_the_ranks_watch_notices_a_silent_driver_within_the_bound(tmp_path):
    heartbeat = DriverHeartbeat(tmp_path)  # never started: a driver SIGKILLed after one beat
    path = tmp_path / run_files.DRIVER_ALIVE
    lost, why = watched(tmp_path, lost_after=2.0)
    for count in range(1, 8):  # it beats for 3.5 s, then falls silent without a last word
        time.sleep(0.5)
        heartbeat.beat(count)
    assert not lost.is_set(), "a beating driver was judged gone"
    silent = time.monotonic()
    # The watch sees the last beat up to one poll late, then judges at its first poll past
    # lost_after: never sooner than lost_after (less the write-to-clock gap), at most two
    # polls later.
    latest = 2.0 + 2 * POLL_S + MARGIN_S
    assert lost.wait(latest), "a silent driver was not noticed"
    assert 2.0 - 0.1 <= time.monotonic() - silent < latest
    assert len(why) == 1 and why[0].startswith(f"the driver is gone (no heartbeat in {path} for")


def test_a_stopped_driver_ends_its_ranks_at_once(tmp_path):
    heartbeat = DriverHeartbeat(tmp_path)
    heartbeat.start()
    lost, why = watched(tmp_path, lost_after=60.0)
    assert not lost.wait(1.5)
    heartbeat.stop()
    assert lost.wait(POLL_S + MARGIN_S), "the stopped beat was not noticed within a poll"
    assert why == [f"the driver stopped the run ({tmp_path / run_files.DRIVER_ALIVE})"]


def test_no_heartbeat_file_no_watch(tmp_path):
    assert watch_driver(tmp_path) is None  # a rank started by hand


@pytest.mark.slow
def test_this_host_judges_by_pid_and_start_time():
    assert lost_driver(driver_tags()) is None  # this process
    child = subprocess.Popen(["sleep", "30"])
    tags = {
        **driver_tags(),
        "driver_pid": str(child.pid),
        "driver_started": f"{process_start_time(child.pid):.2f}",
    }
    assert lost_driver(tags) is None
    child.kill()  # a zombie until reaped: already gone
    time.sleep(0.2)
    assert lost_driver(tags) == f"driver pid {child.pid} on {tags['driver_host']} is gone"
    child.wait()
    assert lost_driver(tags) is not None
    # The pid taken by another process later: a different start time.
    reused = {**driver_tags(), "driver_started": f"{process_start_time() - 100:.2f}"}
    assert lost_driver(reused) == f"driver pid {os.getpid()} on {reused['driver_host']} is gone"


def test_another_host_judges_by_the_heartbeats_age(tmp_path):
    tags = {
        "driver_host": "elsewhere",
        "driver_pid": "1",
        "driver_started": "0",
        "run_dir": str(tmp_path),
    }
    assert lost_driver(tags) is None  # no heartbeat visible: cannot tell
    (tmp_path / run_files.DRIVER_ALIVE).write_text("elsewhere 1 7\n")
    assert lost_driver(tags) is None
    later = time.time() + 121
    assert lost_driver(tags, now=later).startswith("driver pid 1 on elsewhere is gone (no heart")
    assert lost_driver({"driver_host": "x"}) is None  # recorded by an older tntrun
