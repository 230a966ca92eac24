"""The driver's heartbeat and the judgement of a driver as gone (in-process, real files)."""

from __future__ import annotations

import os
import subprocess
import threading
import time

from tntrun import run_files
from tntrun.launch.clock import process_start_time
from tntrun.launch.driver_alive import DriverHeartbeat, driver_tags, lost_driver, watch_driver


def test_the_ranks_watch_notices_a_silent_driver_within_the_bound(tmp_path):
    heartbeat = DriverHeartbeat(tmp_path)
    heartbeat.start()
    lost = threading.Event()
    silence: list[float] = []
    watch_driver(tmp_path, lambda s: (silence.append(s), lost.set()), lost_after=2.0)
    assert not lost.wait(3.5), "a beating driver was judged gone"
    heartbeat.stop()
    stopped = time.monotonic()
    assert lost.wait(5.0), "a silent driver was not noticed"
    assert 2.0 <= silence[0] < 3.5 and time.monotonic() - stopped < 4.0


def test_no_heartbeat_file_no_watch(tmp_path):
    assert watch_driver(tmp_path) is None  # a rank started by hand


def test_this_host_judges_by_pid_and_start_time():
    assert lost_driver(driver_tags()) is None  # this process
    child = subprocess.Popen(["sleep", "30"])
    tags = {**driver_tags(), "driver_pid": str(child.pid),
            "driver_started": f"{process_start_time(child.pid):.2f}"}  # fmt: skip
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
    tags = {"driver_host": "elsewhere", "driver_pid": "1", "driver_started": "0",
            "run_dir": str(tmp_path)}  # fmt: skip
    assert lost_driver(tags) is None  # no heartbeat visible: cannot tell
    (tmp_path / run_files.DRIVER_ALIVE).write_text("elsewhere 1 7\n")
    assert lost_driver(tags) is None
    later = time.time() + 121
    assert lost_driver(tags, now=later).startswith("driver pid 1 on elsewhere is gone (no heart")
    assert lost_driver({"driver_host": "x"}) is None  # recorded by an older tntrun
