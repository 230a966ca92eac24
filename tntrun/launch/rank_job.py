"""Start the ranks with the plan's launch command (horovodrun, srun or mpirun) and relay
their output.

The launcher runs in its own process group so that Ctrl-C on the driver stops
every rank it started, and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tntrun.contract.disk import DISK_MARK, disk_error_of
from tntrun.contract.rank_logs import RankLogWriter
from tntrun.launch.console_relay import ConsoleRelay, live_text
from tntrun.launch.watchdog import StallWatchdog

log = logging.getLogger(__name__)

GRACE_SECONDS = 5  # SIGINT first, SIGKILL to what is left after this
# TensorFlow's import-time messages that no log level silences and that say
# nothing about the run (CUDA plugin registration in a CPU-only process; from 2.19
# on, oneDNN's notice, logged before TF_CPP_MIN_LOG_LEVEL applies). They stay in
# the run's log file; the console skips them.
START_UP_NOISE = re.compile(
    r"Unable to register cu(DNN|BLAS|FFT) factory"
    r"|All log messages before absl::InitializeLog\(\) is called"
    r"|\] oneDNN custom operations are on\."
)


@dataclass(frozen=True)
class LaunchResult:
    """How one start of the ranks ended; the run's status is the supervisor's to decide."""

    returncode: int
    interrupted: bool  # Ctrl-C stopped the job
    stalled: str | None = None
    disk: str | None = None  # a full or failing disk under the run directory, in one line

    @property
    def ended_well(self) -> bool:
        """Every rank finished: exit 0, not interrupted, no stall, no full disk."""
        return self.returncode == 0 and not (self.interrupted or self.stalled or self.disk)

    @property
    def failed(self) -> bool:
        """The ranks ended badly by themselves (not interrupted): a restart may be due."""
        return not (self.interrupted or self.ended_well)


def _stop(process: subprocess.Popen) -> None:
    """SIGINT the launcher's process group, then SIGKILL what outlives the grace period."""
    for sig, wait in ((signal.SIGINT, GRACE_SECONDS), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _end_with_parent() -> None:
    """In the launcher's process: SIGKILL when the driver dies, even by SIGKILL (Linux's
    parent-death signal; SIGTERM, which horovodrun once outlived by 30 s in CI, can be
    caught); the ranks follow by the driver's heartbeat (driver_alive). SIGINT, which
    :func:`_stop` sends first, acts even if the driver was started with it ignored (a
    script's background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    with contextlib.suppress(OSError):  # not glibc Linux: the heartbeat alone ends the ranks
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class StallWatch:
    """Where the ranks' heartbeats are and how long silence may last (0: not watched)."""

    directory: Path
    world_size: int
    timeout: float


class RankJob:
    """The launcher process: started at once, followed later.

    Starting it first lets the ranks import TensorFlow while the driver sets up
    MLflow; :meth:`follow` then tees its output to stdout, ``log_file`` and the
    per-rank logs until it ends. With ``stall``, a watchdog ends the job when
    the ranks stop making progress.
    """

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        log_file: Path,
        rank_logs: RankLogWriter,
        stall: StallWatch | None = None,
        console: ConsoleRelay | None = None,
    ) -> None:
        self.log_file, self.rank_logs = log_file, rank_logs
        self._stalled: list[str] = []
        self._rank_disk: str | None = None  # a rank's disk error line (path, free space)
        self._logs_disk: str | None = None  # the logs' own, when the driver cannot write them
        self.console = console or ConsoleRelay()
        self.process = subprocess.Popen(
            list(command),
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            start_new_session=True,
            preexec_fn=_end_with_parent,
        )
        self._watchdog = None
        if stall is not None and stall.timeout > 0:
            self._watchdog = StallWatchdog(
                stall.directory, stall.world_size, stall.timeout, self._on_stall
            )
            self._watchdog.start()

    def _on_stall(self, message: str) -> None:
        self._stalled.append(message)
        log.info(f"tntrun: stall watchdog: {message}; stopping the job")
        _stop(self.process)

    def follow(self) -> LaunchResult:
        """Relay the job's output until it ends (or Ctrl-C stops it)."""
        process = self.process
        try:
            combined = self.log_file.open("w", buffering=1)
            try:
                assert process.stdout is not None
                for line in process.stdout:
                    if (text := live_text(line)) is not None:
                        self.console.live(text)  # for the eyes only: no log keeps it
                        continue
                    if DISK_MARK in line and self._rank_disk is None:
                        self._rank_disk = line.split(DISK_MARK, 1)[1].strip()
                    self._keep(combined, line)
                    if not START_UP_NOISE.search(line):
                        self.console.line(line)
            finally:
                with contextlib.suppress(OSError):  # a full disk: what it held is lost
                    combined.close()
            code = process.wait()
            log.debug("tntrun: the launcher ended with exit code %d", code)
            stalled = self._stalled[0] if self._stalled else None
            # The logs' own disk error fails a run only with the ranks' (they write there too).
            disk = self._rank_disk or (self._logs_disk if code else None)
            return LaunchResult(code, interrupted=False, stalled=stalled, disk=disk)
        except KeyboardInterrupt:
            _stop(process)
            return LaunchResult(process.returncode or 130, interrupted=True)
        finally:
            self.console.close()
            self.stop()

    def _keep(self, combined, line: str) -> None:
        """Write a line to the logs; a full disk stops the logging (the console goes on)
        and is the run's failure unless a rank names its own."""
        if self._logs_disk is not None:
            return
        try:
            combined.write(line)
            self.rank_logs.write(line)
        except OSError as err:
            disk = disk_error_of(err, self.log_file)
            if disk is None:
                raise
            self._logs_disk = f"the driver: {disk}"
            log.warning(f"tntrun: the ranks' logs stop: {disk}")

    def terminate(self) -> None:
        """Stop the ranks from another thread; :meth:`follow` then returns."""
        _stop(self.process)

    def stop(self) -> None:
        """Stop the watchdog and whatever still runs of the job (idempotent)."""
        if self._watchdog is not None:
            self._watchdog.stop()
        if self.process.poll() is None:
            _stop(self.process)
        self.rank_logs.close()
