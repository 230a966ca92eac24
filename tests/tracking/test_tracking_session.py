"""The driver's lower-priority MLflow thread: run creation, errors, Ctrl-C."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from tntrun.config.schema import TrackingConfig
from tntrun.tracking import TrackerSettings
from tntrun.tracking.mlflow_tracker import MlflowTracker
from tntrun.tracking.session import TrackingSession, lower_thread_priority


def _new_run(tmp_path: Path):
    def start() -> tuple[MlflowTracker, str | None]:
        tracker = MlflowTracker(
            TrackerSettings(
                TrackingConfig(
                    uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment_name="session"
                ),
                tmp_path,
            )
        )
        tracker.start("run", {})
        return tracker, "prefix"

    return start


def test_lowers_only_its_own_thread():
    seen: list[int] = []

    def worker() -> None:
        lower_thread_priority(7)
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    before = os.getpriority(os.PRIO_PROCESS, 0)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [min(before + 7, 19)]
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


def test_opens_the_run_at_lower_priority_and_relays_until_closed(tmp_path):
    entered: list[tuple[str, int]] = []
    exited = threading.Event()

    @contextmanager
    def while_running(tracker: MlflowTracker):
        priority = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        entered.append((tracker.run_id, priority))
        yield
        exited.set()

    session = TrackingSession(_new_run(tmp_path), while_running, on_error=lambda: None)
    session.close()
    assert exited.is_set()
    assert session.prefix == "prefix" and session.tracker is not None
    assert entered == [(session.tracker.run_id, min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10))]
    assert session.tracker.client.get_run(session.tracker.run_id).info.status == "RUNNING"


def test_a_failure_to_open_the_run_stops_the_ranks_and_reaches_the_driver():
    stopped = threading.Event()

    def broken() -> tuple[MlflowTracker, str | None]:
        raise RuntimeError("store unreachable")

    session = TrackingSession(broken, lambda tracker: None, on_error=stopped.set)
    with pytest.raises(RuntimeError, match="store unreachable"):
        session.close()
    assert stopped.is_set()


def test_a_driver_that_stops_waiting_leaves_no_run_running(tmp_path, monkeypatch):
    release = threading.Event()
    start = _new_run(tmp_path)

    def slow_start() -> tuple[MlflowTracker, str | None]:
        release.wait(30)  # still importing MLflow when the second Ctrl-C arrives
        return start()

    session = TrackingSession(slow_start, lambda tracker: _nothing(), on_error=lambda: None)
    thread = session._thread
    monkeypatch.setattr(thread, "join", _interrupted)
    with pytest.raises(KeyboardInterrupt):
        session.close()
    assert session.abandoned
    release.set()
    threading.Thread.join(thread, 30)
    tracker = session.tracker
    assert tracker is not None
    assert tracker.client.get_run(tracker.run_id).info.status == "KILLED"


@contextmanager
def _nothing():
    yield


def _interrupted(*args: object) -> None:
    raise KeyboardInterrupt
