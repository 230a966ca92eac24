"""Where an MLflow store is and whether it can be used, checked without importing MLflow.

MLflow's HTTP client retries a request 7 times with backoff factor 2 (about
four minutes) before it fails; :func:`bound_http_retries` bounds one failing
request to seconds, so tntrun's own loops (the relay's every second, the end's
grace period, :mod:`tntrun.tracking.outage`) decide how long to keep trying.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from tntrun.tracking.outage import is_remote, unreachable

# MLflow's SQL store logs each database error with its traceback (ERROR, on its own stderr
# handler) before raising it: tntrun classifies the raised error (an outage, or a bug that
# surfaces), so the record goes to tntrun's DEBUG log instead of the console.
DB_ERRORS_LOGGER = "mlflow.store.db.utils"
# Defaults for MLflow's HTTP client in the driver (a variable already set wins): a refused
# connection fails after about 3 s (retries after 0 s and 2 s) instead of about 4 minutes.
HTTP_CLIENT_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",  # a server that accepts but never answers
}


def tracking_uri(configured: str | None, output_root: Path) -> str:
    """Config value, else ``$MLFLOW_TRACKING_URI``, else the SQLite store under output_root."""
    if configured:
        return configured
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(output_root / 'mlflow.db').resolve()}"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI (None for other stores)."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def store_problems(uri: str, timeout_s: float = 3.0) -> list[str]:
    """Why the tracking store at ``uri`` cannot be used, checked without importing MLflow
    (so before any rank starts): a SQLite file that cannot be created or written, or an
    HTTP server that does not accept connections. Other stores are not checked."""
    where = "tracking.uri (else $MLFLOW_TRACKING_URI, else output_root)"
    database = sqlite_path(uri)
    if database is not None:
        try:
            database.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            return [
                f"{where} = {uri}: cannot create {database.parent} ({err.strerror}); "
                "point it at a writable folder"
            ]
        target = database if database.exists() else database.parent
        if not os.access(target, os.W_OK):
            return [f"{where} = {uri}: {target} is not writable; point it at a writable folder"]
        return []
    err = unreachable(uri, timeout_s)
    if err is not None:
        parsed = urlparse(uri)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        return [
            f"{where} = {uri}: no MLflow server answers at {parsed.hostname}:{port} "
            f"({err.strerror or err}); start the server or fix the URI"
        ]
    return []


def bound_http_retries(uri: str) -> None:
    """Bound MLflow's HTTP retries in this process for a remote store (see the module doc)."""
    if is_remote(uri):
        for name, value in HTTP_CLIENT_LIMITS.items():
            os.environ.setdefault(name, value)
        # One line from tntrun says the store is down, not two of urllib3's per request.
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Serialise first use of a SQLite store across processes.

    MLflow creates the schema on first access; concurrent drivers racing on a
    fresh file fail half-way through the migrations. A file lock beside the
    database lets one create it while the others wait.
    """
    database = sqlite_path(uri)
    if database is None:
        yield
        return
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{database}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class RaisedErrorsToDebug(logging.Filter):
    """Keep a library's logged-and-raised errors off the console: each becomes a DEBUG
    record of ``tntrun.tracking.store`` (the job log with ``hydra.verbose=tntrun``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info:
            return True
        debug = logging.getLogger("tntrun.tracking.store")
        debug.debug("%s: %s", record.name, record.getMessage(), exc_info=record.exc_info)
        return False


def quiet_store_errors() -> None:
    """Install :class:`RaisedErrorsToDebug` on MLflow's SQL store logger (once MLflow is
    imported: its import sets up that logger)."""
    logger = logging.getLogger(DB_ERRORS_LOGGER)
    if not any(isinstance(found, RaisedErrorsToDebug) for found in logger.filters):
        logger.addFilter(RaisedErrorsToDebug())
