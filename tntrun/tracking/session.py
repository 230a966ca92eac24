"""The driver's MLflow work while the ranks run, in one lower-priority thread.

Creating the run costs seconds of CPU (importing MLflow, opening the store)
at the very moment the ranks import TensorFlow on the same cores. Done in a
thread with a raised ``nice`` value, it takes mostly the CPU the ranks leave
idle, so they reach their first step about as soon as they would without
tntrun; the run appears in MLflow a little later (here: still before the
first epoch ends). Once the run exists, the same thread
relays rank 0's metrics and the hosts' system metrics until :meth:`close`.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress

from tntrun.contract.run_status import RunStatus
from tntrun.tracking import Tracker

NICENESS = 10  # nice +10: ~10 % of a core against a busy rank, so the ranks go first


def lower_thread_priority(by: int) -> None:
    """Add ``by`` to the calling thread's nice value (Linux schedules threads one by one)."""
    if not sys.platform.startswith("linux"):
        return
    thread = threading.get_native_id()
    with suppress(OSError):  # not permitted here: run at normal priority
        os.setpriority(
            os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + by)
        )


class TrackingSession:
    """Open the run, then keep ``while_running(tracker)`` entered until :meth:`close`.

    ``open_run`` creates (or reopens) the MLflow run and returns its tracker
    and artifact prefix. If it fails, ``on_error`` is called (the driver stops
    the ranks) and :meth:`close` re-raises the error.
    """

    def __init__(
        self,
        open_run: Callable[[], tuple[Tracker, str | None]],
        while_running: Callable[[Tracker], AbstractContextManager],
        on_error: Callable[[], None],
        niceness: int = NICENESS,
    ) -> None:
        self._open_run, self._while_running = open_run, while_running
        self._on_error, self._niceness = on_error, niceness
        self.tracker: Tracker | None = None
        self.prefix: str | None = None
        self._error: BaseException | None = None
        self._abandoned = False  # the driver stopped waiting (a second Ctrl-C)
        self._ended = False
        self._lock = threading.Lock()  # one of the two threads ends an abandoned run
        self._job_ended = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tntrun-tracking")
        self._thread.start()

    def _run(self) -> None:
        lower_thread_priority(self._niceness)
        try:
            tracker, self.prefix = self._open_run()
            self.tracker = tracker
            with self._while_running(tracker):
                self._job_ended.wait()
        except BaseException as err:  # handed to the main thread by close()
            self._error = err
            self._on_error()
        with self._lock:
            self._ended = True
            if self._abandoned and self.tracker is not None and self.tracker.run_id:
                self.tracker.finish(RunStatus.KILLED)  # nobody else will: never leave it RUNNING

    def close(self) -> None:
        """Let the relay send what is left, wait for the thread, re-raise its error."""
        self._job_ended.set()
        try:
            self._thread.join()
        except KeyboardInterrupt:
            with self._lock:
                self._abandoned = not self._ended
            raise
        if self._error is not None:
            raise self._error

    @property
    def abandoned(self) -> bool:
        """True when the thread, not the driver, ends the run (the driver stopped waiting)."""
        return self._abandoned
