"""Preemption on the driver: a stop signal becomes a checkpoint, not a lost run.

On a signal of ``faults.preempt_signals`` (Slurm's SIGTERM when it preempts,
requeues or cancels a job; ``sbatch --signal=B:USR1@60`` before a time limit)
the driver writes ``stop.request`` into the run directory: the ranks stop
together at one step, rank 0 checkpoints it, and they exit. The driver keeps
relaying until they are gone (at most ``faults.preempt_grace_s``), then ends the
run KILLED with the tag ``preempted``. A second signal, or one before any rank
started, stops at once, as Ctrl-C does. A signal after the run's last training step
(rank 0 wrote ``trained``) stops nothing: there is nothing left to checkpoint, so the
ranks save the trained model and the run ends with the status it reached (at most
``faults.preempt_grace_s`` later, else the ranks are stopped); while the driver writes
the run's record (:func:`record_first`) a signal waits for that too. After a time-limit signal
(any but SIGTERM) the driver asks the cluster environment to requeue the job
(Slurm's ``scontrol requeue``, as submitit does: :mod:`tntrun.environments`);
the requeued job continues the same run (``resume=auto``).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tntrun.contract import run_files
from tntrun.contract.stop_signals import signal_number

log = logging.getLogger(__name__)


class StopOnSignals:
    """The driver's handling of stop signals while a run is launched."""

    def __init__(
        self,
        run_dir: Path,
        signals: list[str],
        grace_s: float,
        ranks_running: Callable[[], bool],
        stop_ranks: Callable[[], None],
    ) -> None:
        self.request_file = run_dir / run_files.STOP_REQUEST
        self.trained_file = run_dir / run_files.TRAINED
        self.signals = {signal_number(name) for name in signals}
        self.grace_s, self.ranks_running, self.stop_ranks = grace_s, ranks_running, stop_ranks
        self.received: signal.Signals | None = None  # the signal that asked for a checkpoint
        self.interrupted_by: signal.Signals | None = None  # the one that stopped at once
        self.after_training: signal.Signals | None = None  # one after the last step: noted
        self._deadline: threading.Timer | None = None

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Handle the signals (and SIGTERM, as an interrupt if not among them) meanwhile."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = self.signals | {signal.SIGTERM, signal.SIGINT}
        previous = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self._deadline is not None:  # the ranks are gone: nothing left to stop
                self._deadline.cancel()

    def _on_signal(self, signum: int, frame: Any) -> None:
        sig = signal.Signals(signum)
        if self.ranks_running() and self.trained_file.is_file():
            self._note_after_training(sig)
            return
        if sig not in self.signals or self.received is not None or not self.ranks_running():
            self.interrupted_by = sig
            raise KeyboardInterrupt  # stop now: Ctrl-C's path
        self.received = sig
        self.request_file.write_text(sig.name)
        log.warning(
            f"tntrun: {sig.name}: the ranks stop at the next step they agree on, checkpoint "
            f"it and exit (up to {self.grace_s:g} s, faults.preempt_grace_s; signal again to "
            "stop at once)"
        )
        self._start_deadline()

    def _note_after_training(self, sig: signal.Signals) -> None:
        """A signal once training is over: the ranks finish (the model saved) within the
        grace period; the run keeps the status it reaches."""
        if self.after_training is None:
            log.warning(
                f"tntrun: {sig.name} after the last training step: the ranks save the trained "
                f"model and the run ends as it stands (up to {self.grace_s:g} s, "
                "faults.preempt_grace_s)"
            )
            if self._deadline is None:
                self._start_deadline()
        self.after_training = sig

    def _start_deadline(self) -> None:
        self._deadline = threading.Timer(self.grace_s, self._too_late)
        self._deadline.daemon = True
        self._deadline.start()

    def _too_late(self) -> None:
        log.warning(
            f"tntrun: the ranks did not stop within {self.grace_s:g} s "
            "(faults.preempt_grace_s); stopping them"
        )
        self.stop_ranks()


@contextmanager
def record_first() -> Iterator[list[signal.Signals]]:
    """While the driver writes the run's record (bounded by ``tracking.outage_grace_s``):
    SIGTERM and SIGINT wait for it, noted in the list yielded, so a run that ended is never
    left half-recorded by a signal (what the store did not take is left for
    ``tntrun sync``)."""
    noted: list[signal.Signals] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def note(signum: int, frame: Any) -> None:
        sig = signal.Signals(signum)
        if not noted:
            log.warning(f"tntrun: {sig.name}: the run has ended; its record is written first")
        noted.append(sig)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield noted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
