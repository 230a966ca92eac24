"""The driver's heartbeat and the judgement of a driver as gone (in-process, real files)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers.asserts import assert_exit
from tntrun.contract import run_files
from tntrun.contract.clock import process_start_time
from tntrun.contract.driver_alive import (
    BEAT_S,
    REAP_GRACE_S,
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


@pytest.mark.slow
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


GIL_HELD_S = 4  # whole seconds (libc's sleep), well over the 2 beats the test asks for


def beat_count(path) -> int:
    return int(path.read_text().split()[-1])


@pytest.mark.slow
def test_the_heartbeat_goes_on_while_the_driver_holds_the_gil(tmp_path):
    """A driver busy in one long C call (an import loading large libraries) is not lost."""
    heartbeat = DriverHeartbeat(tmp_path)
    heartbeat.start()
    path = tmp_path / run_files.DRIVER_ALIVE
    try:
        time.sleep(2 * BEAT_S)  # the child is up and beating
        before, started = beat_count(path), time.monotonic()
        # libc's sleep called through PyDLL keeps the GIL (no thread of this process runs
        # meanwhile), as a long C call does, without spending CPU on the wait.
        ctypes.PyDLL(None).sleep(GIL_HELD_S)
        held = time.monotonic() - started
        beats = beat_count(path) - before
    finally:
        heartbeat.stop()
    assert held > 2 * BEAT_S, f"the GIL was held only {held:.1f} s: hold it longer"
    assert beats >= int(held / BEAT_S) - 1, f"{beats} beats in {held:.1f} s"
    assert path.read_text().split()[-1] == "stopped"


@pytest.mark.slow
def test_the_heartbeat_stops_with_a_killed_driver(tmp_path):
    driver = (
        "import os, signal, sys, time\n"
        "from pathlib import Path\n"
        "from tntrun.contract.driver_alive import DriverHeartbeat\n"
        "heartbeat = DriverHeartbeat(Path(sys.argv[1]))\n"
        "heartbeat.start()\n"
        "print(heartbeat._keeper.pid, flush=True)\n"
        "time.sleep(3)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", driver, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert_exit(run, -signal.SIGKILL)
    keeper = int(run.stdout)
    path = tmp_path / run_files.DRIVER_ALIVE
    assert beat_count(path) >= 1  # it beat while the driver lived
    # The keeper sees its stdin end within one beat of the driver's death.
    deadline = time.monotonic() + BEAT_S + MARGIN_S + 5
    while process_start_time(keeper) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process_start_time(keeper) is None, "the heartbeat outlived its driver"
    last = path.read_text()
    time.sleep(2 * BEAT_S)
    assert path.read_text() == last, "beats went on without a driver"


# A rank whose main thread holds the GIL in a call that does not return (a collective
# waiting on a dead peer; here libc's sleep through PyDLL), with the rank's watch thread
# and, unless told not to, its backstop process.
HELD_RANK = """
import ctypes, sys
from pathlib import Path
from tntrun.contract.driver_alive import start_backstop, watch_driver
run_dir = Path(sys.argv[1])
watch_driver(run_dir)
if sys.argv[2] == "backstop":
    start_backstop(run_dir)
print("held", flush=True)
ctypes.PyDLL(None).sleep(120)
"""


def held_rank(run_dir, backstop: bool) -> subprocess.Popen:
    rank = subprocess.Popen(
        [sys.executable, "-c", HELD_RANK, str(run_dir), "backstop" if backstop else "thread"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert rank.stdout.readline() == "held\n", rank.stderr.read()
    return rank


@pytest.mark.slow
def test_a_rank_holding_the_gil_is_killed_by_its_backstop_when_the_driver_stops(tmp_path):
    heartbeat = DriverHeartbeat(tmp_path)
    heartbeat.start()
    alone, backed = held_rank(tmp_path, backstop=False), held_rank(tmp_path, backstop=True)
    try:
        time.sleep(2 * BEAT_S)
        assert alone.poll() is None and backed.poll() is None  # a beating driver: both run
        heartbeat.stop()
        stopped = time.monotonic()
        # Seen within a poll, killed REAP_GRACE_S later (a poll's granularity).
        bound = POLL_S + REAP_GRACE_S + POLL_S + MARGIN_S
        assert backed.wait(timeout=bound) == -signal.SIGKILL, backed.stderr.read()
        assert time.monotonic() - stopped >= REAP_GRACE_S - 0.1
        assert "did not end within 5 s (held in a call): killed" in backed.stderr.read()
        # The positive control: its watch thread alone cannot end the same rank.
        assert alone.poll() is None, "the thread ended a rank holding the GIL: no backstop needed"
    finally:
        for rank in (alone, backed):
            rank.kill()
            rank.wait()


@pytest.mark.slow
def test_a_backstop_ends_with_its_rank(tmp_path):
    heartbeat = DriverHeartbeat(tmp_path)
    heartbeat.start()
    rank = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tntrun.contract import driver_alive\n"
        "driver_alive.start_backstop(Path(sys.argv[1]))\n"
        "print(driver_alive._backstop.pid, flush=True)\n"
    )
    try:
        run = subprocess.run(
            [sys.executable, "-c", rank, str(tmp_path)], capture_output=True, text=True, timeout=60
        )
        assert_exit(run, 0)
        backstop = int(run.stdout)
        deadline = time.monotonic() + POLL_S + MARGIN_S + 5
        while process_start_time(backstop) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process_start_time(backstop) is None, "the backstop outlived its rank"
    finally:
        heartbeat.stop()
