"""Tracking through an outage of the store (an ``http(s)://`` server gone away).

Training never waits for the store: rank 0's metrics stay in ``metrics.jsonl``
and the relay sends them, in order and once, when the server answers again.
When the ranks end, the driver retries what is left (the metrics, the outputs,
the final status) for ``tracking.outage_grace_s`` (:mod:`tntrun.tracking.delivery`).
If the store is still down then, it writes ``tracking_pending.json`` (a
:class:`Pending`) into the run directory, prints the command that replays it
(``tntrun sync <run dir>``) and exits with
:data:`~tntrun.contract.exit_codes.EXIT_TRACKING_PENDING`.

A tracker's client should fail a request to a store gone away within seconds
(:func:`tntrun.tracking.mlflow_store.bound_http_retries` does it for MLflow),
so that these loops decide how long to keep trying.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
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


def is_outage(err: BaseException, uri: str) -> bool:
    """Whether ``err`` means the remote store is unreachable (not a bad request or a bug)."""
    if not is_remote(uri):
        return False
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_ERRNOS:  # a disk here, no network
            return False
        if isinstance(seen, OSError):  # requests' connection errors and timeouts are OSErrors
            return True
        seen = seen.__cause__ or seen.__context__
    return unreachable(uri, timeout_s=2.0) is not None


def describe(err: BaseException) -> str:
    """A short reason for messages (MLflow's HTTP errors run to several hundred characters)."""
    text = str(err)
    found = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    if found:
        return found.group(0).strip()
    if "timeout" in text.lower():
        return "timed out"
    return text if len(text) <= 200 else text[:197] + "..."


def sync_line(uri: str, run_dir: Path) -> str:
    return (
        f"tntrun: the tracking store {uri} is unreachable; replay this run into it later "
        f"with: tntrun sync {shlex.quote(str(run_dir))}"
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
