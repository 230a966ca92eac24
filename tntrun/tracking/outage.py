"""Tracking through an outage of the store: a server gone away, or a store that fails.

An outage is any failure to reach or write the store that a later attempt can
overcome (:func:`is_outage`, the one place that decides): an ``http(s)://`` server
that does not answer or answers 5xx, a local SQLite file deleted, made unwritable,
locked or on a full disk. Training never waits for the store: rank 0's metrics stay
in ``metrics.jsonl`` and the relay sends them, in order and once, when the store
takes them again. When the ranks end, the driver retries what is left (the metrics,
the outputs, the final status) for ``tracking.outage_grace_s``
(:mod:`tntrun.tracking.delivery`). If the store still fails then, it writes
``tracking_pending.json`` (a :class:`Pending`) into the run directory, prints the
command that replays it (``tntrun sync <run dir>``) and exits with
:data:`~tntrun.contract.exit_codes.EXIT_TRACKING_PENDING`. Anything else (a bad
request, a bug) is not retried: it surfaces.

A tracker's client should fail a request to a store gone away within seconds
(:func:`tntrun.tracking.mlflow_store.bound_http_retries` does it for MLflow),
so that these loops decide how long to keep trying.
"""

from __future__ import annotations

import errno
import json
import re
import shlex
import socket
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from urllib.parse import urlparse

from tntrun.contract.disk import DISK_ERRNOS
from tntrun.contract.run_files import TRACKING_PENDING
from tntrun.contract.run_status import RunStatus


def is_remote(uri: str) -> bool:
    """True for a store behind a server (``http(s)://``), the kind that can go away."""
    return urlparse(uri).scheme in ("http", "https")


def unreachable(uri: str, timeout_s: float) -> OSError | None:
    """Why the server of a remote store does not accept connections (None: it does, or the
    store is not behind a server)."""
    parsed = urlparse(uri)
    if not (is_remote(uri) and parsed.hostname):
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout_s).close()
    except OSError as err:
        return err
    return None


# SQLite's result codes (Python's sqlite_errorname) for a store that cannot be used now
# but may be later, or elsewhere: locked, read-only, moved or deleted, I/O or disk full,
# not openable, damaged. SQLITE_ERROR's "no such table" is a deleted store made anew, empty.
SQLITE_OUTAGES = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_READONLY",
    "SQLITE_IOERR",
    "SQLITE_FULL",
    "SQLITE_CANTOPEN",
    "SQLITE_PERM",
    "SQLITE_CORRUPT",
    "SQLITE_NOTADB",
)
# A local store's file system refusing a write (its artifacts, its database file).
STORAGE_ERRNOS = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOTDIR}
)
SERVER_ERROR = re.compile(r"error code (5\d\d)\b")  # MLflow's text for a non-JSON 5xx answer


def causes(err: BaseException) -> Iterator[BaseException]:
    """``err`` and what it was raised from or during, outermost first."""
    seen: BaseException | None = err
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def is_outage(err: BaseException, uri: str) -> bool:
    """Whether ``err`` means the store at ``uri`` cannot be reached or written now (retry
    later, or replay elsewhere), not a bad request or a bug (those surface)."""
    remote = is_remote(uri)
    for seen in causes(err):
        if isinstance(seen, sqlite3.OperationalError) and sqlite_outage(seen):
            return True
        if isinstance(seen, OSError) and remote and seen.errno in DISK_ERRNOS:
            return False  # a disk here (the run directory's): no network error
        if isinstance(seen, OSError) and (remote or seen.errno in STORAGE_ERRNOS):
            return True  # requests' connection errors and timeouts are OSErrors
        if remote and server_error(seen):
            return True
    return remote and unreachable(uri, timeout_s=2.0) is not None


def sqlite_outage(err: sqlite3.OperationalError) -> bool:
    name = getattr(err, "sqlite_errorname", "")
    if name.startswith(SQLITE_OUTAGES):
        return True
    return name == "SQLITE_ERROR" and str(err).startswith("no such table")


def server_error(err: BaseException) -> bool:
    """A 5xx answer of the server, as MLflow's client reports it (a JSON error's status, or
    its text for another body)."""
    status = getattr(err, "get_http_status_code", None)
    if type(err).__name__ == "RestException" and callable(status) and status() >= 500:
        return True
    return type(err).__name__ == "MlflowException" and bool(SERVER_ERROR.search(str(err)))


def describe(err: BaseException) -> str:
    """A short reason, one line, for messages (MLflow's errors run to several hundred
    characters and several lines: SQLite's own message is the reason)."""
    for seen in causes(err):
        if isinstance(seen, sqlite3.Error):
            return f"SQLite: {seen}"
    text = str(err)
    found = re.search(r"\[Errno -?\d+\] [^'\")\n]+", text)
    if found:
        return found.group(0).strip()
    if "timeout" in text.lower():
        return "timed out"
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


def failing(uri: str) -> str:
    """How a failing store is said: a server does not answer, a local store cannot be
    written."""
    return "does not answer" if is_remote(uri) else "cannot be written"


def working_again(uri: str) -> str:
    return "answers again" if is_remote(uri) else "can be written again"


def sync_line(uri: str, run_dir: Path) -> str:
    command = f"tntrun sync {shlex.quote(str(run_dir))}"
    if is_remote(uri):
        return (
            f"tntrun: the tracking store {uri} is unreachable; replay this run into it later "
            f"with: {command}"
        )
    return (
        f"tntrun: the tracking store {uri} cannot be written; replay this run into it once it "
        f"can, or into another with --tracking-uri, with: {command}"
    )


@dataclass
class Pending:
    """What the store has not received (``<run dir>/tracking_pending.json``)."""

    store: str
    status: RunStatus  # the final status to set
    run_id: str | None = None  # None: the run was never created
    metrics_offset: int = 0  # bytes of metrics.jsonl the run has received
    params_logged: bool = False
    outputs_logged: bool = False
    stalled: str | None = None
    prefix: str | None = None  # artifact prefix of a resumed run's outputs
    run_name: str | None = None
    parent_run_id: str | None = None
    tags: dict[str, str] | None = None  # the start tags of a run never created
    reason: str = ""

    def save(self, run_dir: Path) -> None:
        path = run_dir / TRACKING_PENDING
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps(asdict(self), indent=1) + "\n")
        partial.replace(path)

    @classmethod
    def load(cls, run_dir: Path) -> Pending | None:
        path = run_dir / TRACKING_PENDING
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        pending = cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})
        pending.status = RunStatus(pending.status)
        return pending

    @staticmethod
    def clear(run_dir: Path) -> None:
        (run_dir / TRACKING_PENDING).unlink(missing_ok=True)
