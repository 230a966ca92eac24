"""Where an MLflow store is and whether it can be used, checked without importing MLflow."""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse


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
    parsed = urlparse(uri)
    if parsed.scheme in ("http", "https") and parsed.hostname:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            socket.create_connection((parsed.hostname, port), timeout=timeout_s).close()
        except OSError as err:
            return [
                f"{where} = {uri}: no MLflow server answers at {parsed.hostname}:{port} "
                f"({err.strerror or err}); start the server or fix the URI"
            ]
    return []


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
