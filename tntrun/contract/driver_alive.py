"""Whether the driver of a run is still alive: its heartbeat file and its process.

While its ranks run, the driver (through a child process) rewrites
``<run dir>/driver.alive`` ("<host> <pid> <beat>") every second, and its last beat
says ``stopped``. Each rank watches the
file from a thread and ends itself at once on ``stopped`` (Ctrl-C, a stall: a rank
on another host, which horovodrun's ssh leaves running, ends within half a second),
or when the file has not changed for :data:`LOST_AFTER_S` seconds: a SIGKILLed
driver (the OOM killer, Slurm's KillWait) takes its ranks along within seconds, on
every host (the run directory is shared), instead of leaving them training for nobody.
A rank whose thread cannot run (its main thread holding the GIL in a call blocked on a
dead peer) is killed by its backstop process a few seconds later (:func:`start_backstop`).

Later tntrun commands judge a RUNNING run's driver from the tags it recorded
(host, pid, start time) and the same file: :func:`lost_driver`.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tntrun.contract import run_files
from tntrun.contract.clock import process_start_time
from tntrun.contract.exit_codes import EXIT_DRIVER_LOST

BEAT_S = 1.0
LOST_AFTER_S = 5.0  # a rank ends this long after the driver's last beat
STALE_AFTER_S = 120.0  # another host's driver is judged gone by its file's age only
STOPPED = "stopped"  # the driver's last beat: its ranks end now
REAP_GRACE_S = 5.0  # a rank's watch thread, when it can run, ends the rank within a poll


def driver_tags() -> dict[str, str]:
    """This driver process, as a run records it (:func:`lost_driver` reads it back)."""
    return {
        "driver_host": socket.gethostname(),
        "driver_pid": str(os.getpid()),
        "driver_started": f"{process_start_time():.2f}",
    }


class DriverHeartbeat:
    """The driver's side: beat until :meth:`stop`, which leaves a ``stopped`` beat.

    The beats come from a small child process, not a thread: a driver thread can be held
    for seconds by the GIL (an import loading large libraries while the MLflow run opens on a
    busy machine), and ranks that took that silence for a lost driver ended a healthy run.
    The child beats while its stdin stays open, so it stops when the driver closes it or dies.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / run_files.DRIVER_ALIVE
        self._identity = f"{socket.gethostname()} {os.getpid()}"
        self._keeper: subprocess.Popen[bytes] | None = None
        self.beat(0)

    def beat(self, count: int | str) -> None:
        write_beat(self.path, self._identity, count)

    def start(self) -> None:
        command = [sys.executable, "-m", __name__, str(self.path), self._identity]
        self._keeper = subprocess.Popen(command, stdin=subprocess.PIPE)

    def stop(self) -> None:
        """Beat no more; any rank still running (on any host) ends at once."""
        if self._keeper is not None:
            assert self._keeper.stdin is not None
            self._keeper.stdin.close()
            try:
                self._keeper.wait(timeout=LOST_AFTER_S)
            except subprocess.TimeoutExpired:  # stuck writing to a hung file system
                self._keeper.kill()
                self._keeper.wait()
        with contextlib.suppress(OSError):
            self.beat(STOPPED)


def write_beat(path: Path, identity: str, count: int | str) -> None:
    """A new beat, whole (written aside, renamed); on a full disk, over the old one in
    place, which needs no new block, so the ranks live to report the disk themselves."""
    beat = f"{identity} {count}\n"
    partial = path.with_suffix(".tmp")
    try:
        partial.write_text(beat)
        partial.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        with path.open("r+") as old:
            old.write(beat)
            old.truncate()


def keep_beating(path: Path, identity: str) -> None:
    """The heartbeat child: a beat every :data:`BEAT_S` until stdin ends (closed by the
    driver, or by the kernel when the driver dies). Signals aimed at the driver's process
    group (Ctrl-C, a preemption) are the driver's to handle, not this process's."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    count = 0
    while not select.select([sys.stdin], [], [], BEAT_S)[0]:
        count += 1
        with contextlib.suppress(OSError):  # a full disk: the ranks will judge
            write_beat(path, identity, count)


class BeatWatch:
    """Reads the driver's heartbeat file and judges it: why the ranks must end (its
    ``stopped`` beat, or no new beat for ``lost_after`` seconds), else None."""

    def __init__(self, path: Path, lost_after: float) -> None:
        self.path, self.lost_after = path, lost_after
        self._last: str | None = None
        self._changed = time.monotonic()

    def verdict(self) -> str | None:
        try:
            beat = self.path.read_text()
        except OSError:
            beat = self._last
        now = time.monotonic()
        if beat is not None and beat.split()[-1:] == [STOPPED]:
            return f"the driver stopped the run ({self.path})"
        if beat != self._last:
            self._last, self._changed = beat, now
        elif now - self._changed >= self.lost_after:
            silence = f"no heartbeat in {self.path} for {now - self._changed:.0f} s"
            return f"the driver is gone ({silence})"
        return None


def watch_driver(
    run_dir: Path, on_lost: Callable[[str], None] | None = None, lost_after: float = LOST_AFTER_S
) -> threading.Thread | None:
    """The ranks' side: a thread calling ``on_lost(why)`` (default: end this process)
    once the driver stopped, or its heartbeat has not changed for ``lost_after`` seconds.
    None without a heartbeat (a rank started by hand)."""
    path = run_dir / run_files.DRIVER_ALIVE
    if not path.exists():
        return None

    def lost(why: str) -> None:
        print(f"tntrun: {why}: this rank stops", file=sys.stderr, flush=True)
        os._exit(EXIT_DRIVER_LOST)

    def watch() -> None:
        beats = BeatWatch(path, lost_after)
        while (why := beats.verdict()) is None:
            time.sleep(BEAT_S / 2)
        (on_lost or lost)(why)

    thread = threading.Thread(target=watch, name="tntrun-driver-watch", daemon=True)
    thread.start()
    return thread


_backstop: subprocess.Popen[bytes] | None = None  # held: its stdin open while this rank lives


def start_backstop(run_dir: Path, lost_after: float = LOST_AFTER_S) -> bool:
    """A small process that SIGKILLs this rank :data:`REAP_GRACE_S` after the driver's stop
    or silence, if the watch thread has not ended it by then: a thread needs the GIL, which
    a main thread can hold inside a call blocked on a dead peer (a collective waiting out
    ``horovod.gloo_timeout_s``), and a SIGTERM's Python handler needs it too; the thread's
    last words can block on a stderr nobody reads any more (its ssh session gone). The process
    needs nothing of the rank's; it ends with the rank (its stdin closes). False without a
    heartbeat (a rank started by hand)."""
    global _backstop
    path = run_dir / run_files.DRIVER_ALIVE
    if not path.exists():
        return False
    command = [sys.executable, "-m", __name__, "--backstop", str(path), str(os.getpid())]
    _backstop = subprocess.Popen([*command, f"{lost_after:g}"], stdin=subprocess.PIPE)
    return True


def reap_when_lost(path: Path, rank_pid: int, lost_after: float) -> None:
    """The backstop process: judge the beats as the rank's watch does, and kill the rank
    if it still runs :data:`REAP_GRACE_S` after the verdict; return when the rank ends."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)  # the rank's to handle, not this process's
    beats, due = BeatWatch(path, lost_after), None
    while not select.select([sys.stdin], [], [], BEAT_S / 2)[0]:
        if due is None:
            if (why := beats.verdict()) is not None:
                due = time.monotonic() + REAP_GRACE_S
        elif time.monotonic() >= due:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rank_pid, signal.SIGKILL)
            # After the kill: a stderr nobody reads (an ssh session gone) may block a write,
            # as it may have blocked the rank's own last words.
            print(
                f"tntrun: {why}, and rank pid {rank_pid} did not end within "
                f"{REAP_GRACE_S:g} s (held in a call): killed",
                file=sys.stderr,
                flush=True,
            )
            return


def lost_driver(
    tags: dict[str, str], here: str | None = None, now: float | None = None
) -> str | None:
    """Why the driver that recorded ``tags`` is gone, or None if it may still be running.

    On this host its pid must still be the same process (same start time); on another
    host only the heartbeat file's age tells (older than :data:`STALE_AFTER_S`).
    """
    host, pid, started = (tags.get(k) for k in ("driver_host", "driver_pid", "driver_started"))
    if not (host and pid and started):
        return None  # recorded by an older tntrun: nothing to judge by
    if host == (here or socket.gethostname()):
        alive_since = process_start_time(int(pid))
        if alive_since is not None and abs(alive_since - float(started)) < 2.0:
            return None
        return f"driver pid {pid} on {host} is gone"
    alive = Path(tags.get("run_dir", "")) / run_files.DRIVER_ALIVE
    try:
        age = (now or time.time()) - alive.stat().st_mtime
    except OSError:
        return None  # its run directory is not visible here
    if age > STALE_AFTER_S:
        return f"driver pid {pid} on {host} is gone (no heartbeat for {age:.0f} s)"
    return None


if __name__ == "__main__":
    if sys.argv[1] == "--backstop":
        reap_when_lost(Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        keep_beating(Path(sys.argv[1]), sys.argv[2])
