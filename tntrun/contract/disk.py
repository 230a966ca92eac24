"""A full (or failing) disk under the run directory, named in one line on both sides.

A rank that cannot write its checkpoint, metrics or heartbeat prints one line starting with
:data:`DISK_MARK` (the path and the free space) and fails; the driver, which sees every
rank's line even when it cannot write them to the logs, ends the run FAILED with the
``failure.disk`` tag. It is never the tracking store's fault: the store may sit on
another disk, and an ENOSPC is no network error.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})
# TensorFlow's file writers raise their own error types; their text carries the OS's words.
DISK_TEXTS = {os.strerror(number): number for number in DISK_ERRNOS}
DISK_MARK = "tntrun: disk error: "  # a rank's line naming the failure (the driver reads it)


class DiskError(OSError):
    """A write under the run directory failed for want of space (or a failing disk)."""

    def __init__(self, number: int, path: Path) -> None:
        super().__init__(number, os.strerror(number), str(path))
        self.line = f"{os.strerror(number)} writing {path} ({free_space(path)})"

    def __str__(self) -> str:
        return self.line


def disk_errno(err: BaseException) -> tuple[int, str | None] | None:
    """The disk errno behind ``err`` (its causes included) and the file it names, if any."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_ERRNOS:
            return seen.errno, seen.filename if isinstance(seen.filename, str) else None
        text = str(seen)
        for words, number in DISK_TEXTS.items():
            if words in text:
                return number, None
        seen = seen.__cause__ or seen.__context__
    return None


def disk_error_of(err: BaseException, path: Path) -> DiskError | None:
    """``err`` as a :class:`DiskError` naming the file (or ``path``), or None: not a disk's."""
    if isinstance(err, DiskError):
        return err
    found = disk_errno(err)
    if found is None:
        return None
    number, filename = found
    return DiskError(number, Path(filename) if filename else path)


def free_space(path: Path) -> str:
    """How much is free on the filesystem holding ``path`` (its nearest existing folder)."""
    where = Path(path)
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        usage = shutil.disk_usage(where)
    except OSError as err:
        return f"free space unknown: {err.strerror}"
    mount = where.resolve()
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    return f"{size(usage.free)} free of {size(usage.total)} on {mount}"


def size(count: float) -> str:
    """Bytes for people: 0 B, 12.5 MiB, 3.1 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"
