"""A rank's requests to stop (preemption), noted from before TensorFlow's import on.

Signals (Slurm's SIGTERM to every task, ``faults.preempt_signals``) and the
driver's ``stop.request`` file (it got the signal) set one event; the trainer's
:class:`tntrun.engine.preemption.PreemptionGuard` turns it into a collective
stop. No TensorFlow here: the worker installs this first thing.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

from tntrun.contract import run_files
from tntrun.contract.stop_signals import signal_number

POLL_S = 0.25  # how often a rank looks for the driver's stop request


class StopRequests:
    """This rank's requests to stop: the given signals and the driver's request file."""

    def __init__(self, signals: list[str], run_dir: Path) -> None:
        self.event = threading.Event()
        self.why = ""
        for name in signals:
            signal.signal(signal_number(name), self._on_signal)
        self._file = run_dir / run_files.STOP_REQUEST
        threading.Thread(target=self._watch, name="tntrun-stop-request", daemon=True).start()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._request(f"{signal.Signals(signum).name} on this rank")

    def _request(self, why: str) -> None:
        if not self.event.is_set():
            self.why = why
            self.event.set()

    def _watch(self) -> None:
        while not self.event.is_set():
            if self._file.is_file():
                self._request(self._driver_reason())
            time.sleep(POLL_S)

    def _driver_reason(self) -> str:
        return f"{self._file.read_text().strip() or 'a stop request'} on the driver"

    def reason(self) -> str:
        """Why the ranks stop: this rank's request, else the driver's, else another rank's."""
        if self.why:
            return self.why
        if self._file.is_file():  # asked by the driver; another rank saw it first
            return self._driver_reason()
        return "a signal to another rank"
