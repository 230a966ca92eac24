"""One run directory, one run: the driver holds an OS lock on ``<run_dir>/run.lock``.

Two drivers started into the same directory (``hydra.run.dir=X`` twice) would overwrite
each other's ``config.yaml`` and ``plan.json`` and feed one store run with both runs'
metrics. The driver takes ``fcntl.flock`` on the lock file before it writes anything there
and keeps it for the run's whole life; the file says who holds it (pid, host, since when),
for the one line that refuses a second run. The kernel releases a flock when its process
dies, however it dies: a lock file whose flock can be taken was left by a dead driver
(stale) and is taken over. A driver that ends well empties the file, so only a driver that
died leaves a holder behind. Nothing here waits: a held lock is refused at once.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from tntrun.contract.run_files import RUN_LOCK


class RunDirBusy(Exception):
    """Another live process holds the run directory: one line naming it."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a run directory's lock, as its lock file says."""

    pid: int
    host: str
    since: float  # wall time the lock was taken

    def __str__(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"pid {self.pid}@{self.host}, since {when}"

    @staticmethod
    def parse(text: str) -> Holder | None:
        """The holder a lock file names (None: empty, released, or not ours)."""
        try:
            pid, host, since = text.split()
            return Holder(int(pid), host, float(since))
        except ValueError:
            return None


class RunDirLock:
    """The lock of one run directory (see the module doc); a context manager once held."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / RUN_LOCK
        self._fd: int | None = None
        self.stale: Holder | None = None  # a dead driver's holder, taken over

    def acquire(self) -> RunDirLock:
        """Take the lock or raise :class:`RunDirBusy`; notes a stale holder in ``stale``."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = Holder.parse(os.pread(fd, 4096, 0).decode(errors="replace"))
            os.close(fd)
            who = str(holder) if holder else "another process"
            raise RunDirBusy(
                f"run directory {self.run_dir} is in use by a running tntrun ({who}): "
                "wait for it to end, or give this run another hydra.run.dir"
            ) from None
        self.stale = Holder.parse(os.pread(fd, 4096, 0).decode(errors="replace"))
        me = f"{os.getpid()} {socket.gethostname()} {time.time():.3f}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Empty the lock file (a clean end leaves no holder) and let go of the lock."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass  # the flock goes all the same; the next run takes a stale file over
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> RunDirLock:
        return self if self._fd is not None else self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# Locks taken before the driver runs (the CLI takes its run's before Hydra writes .hydra/
# there), by resolved run directory: the driver claims its own from here.
_TAKEN_EARLY: dict[Path, RunDirLock] = {}


def take_early(run_dir: Path) -> None:
    """Lock ``run_dir`` now, for the driver that runs there next in this process (raises
    :class:`RunDirBusy`)."""
    _TAKEN_EARLY[run_dir.resolve()] = RunDirLock(run_dir.resolve()).acquire()


def taken_early(run_dir: Path) -> RunDirLock | None:
    """The lock of ``run_dir`` taken early in this process, now the caller's to release."""
    return _TAKEN_EARLY.pop(run_dir.resolve(), None)


def live_holder(run_dir: Path) -> Holder | None:
    """The live process holding ``run_dir``'s lock, if any (a stale or absent lock, or the
    lock this process took early for the run it starts there: None).

    Probes with a shared lock, so two probes never refuse each other; a held exclusive lock
    refuses it."""
    path = run_dir / RUN_LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = Holder.parse(os.pread(fd, 4096, 0).decode(errors="replace"))
        if run_dir.resolve() in _TAKEN_EARLY:  # this process's, for the run it starts there
            return None  # (a requeued job continuing its run in the same directory)
        return holder or Holder(0, "unknown", 0.0)
    finally:
        os.close(fd)
    return None
