"""Tracking through an outage of the store (an ``http(s)://`` server gone away).

Training never waits for the store: rank 0's metrics stay in ``metrics.jsonl``
and the relay sends them, in order and once, when the server answers again.
When the ranks end, the driver retries what is left (the metrics, the outputs,
the final status) for ``tracking.outage_grace_s``. If the store is still down
then, it writes ``tracking_pending.json`` into the run directory, prints the
command that replays it (``tntrun sync <run dir>``) and exits with
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
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from tntrun.contract.run_files import TRACKING_PENDING
from tntrun.tracking import Tracker
from tntrun.tracking.metrics_stream import MetricsRelay

if TYPE_CHECKING:
    from tntrun.tracking.logged_model import ModelPublishing

# The training succeeded but its record did not reach the store: `tntrun sync` completes it.
RETRY_EVERY_S = 2.0  # between attempts to deliver the rest at the end of a run


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
    status: str  # the final status to set
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
        return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})

    @staticmethod
    def clear(run_dir: Path) -> None:
        (run_dir / TRACKING_PENDING).unlink(missing_ok=True)


class Delivery:
    """The rest of a run's record: metrics past the relay's offset, the outputs, the status.

    ``open_run`` creates the run (and logs its params) if that has not happened yet;
    each attempt repeats only what has not reached the store.
    """

    def __init__(
        self,
        tracker: Tracker,
        run_dir: Path,
        relay: MetricsRelay,
        status: str,
        stalled: str | None = None,
        prefix: str | None = None,
        open_run: Callable[[], None] = lambda: None,
        outputs_logged: bool = False,
        models: ModelPublishing | None = None,  # a FINISHED run's models (None: not logged)
    ) -> None:
        self.tracker, self.run_dir, self.relay = tracker, run_dir, relay
        self.status, self.stalled, self.prefix = status, stalled, prefix
        self.open_run, self.outputs_logged = open_run, outputs_logged
        self.models = models

    def attempt(self) -> None:
        """Deliver what is left and set the status; raises the first failure."""
        from tntrun.tracking.run_record import record_outputs

        self.open_run()
        try:
            self.relay.drain()
            if not self.outputs_logged:
                record_outputs(self.tracker, self.run_dir, self.status, self.prefix, self.stalled)
                if self.models is not None:
                    self.models.record(self.tracker, self.run_dir, self.status)
                self.outputs_logged = True
        except Exception as err:
            if not is_outage(err, self.tracker.store):  # a bad output: the status all the same
                self.tracker.finish(self.status)
            raise
        self.tracker.finish(self.status)

    def within(self, grace_s: float) -> BaseException | None:
        """Attempt until everything is delivered (None) or ``grace_s`` has passed (the
        outage's last error). Other errors are raised; Ctrl-C stops waiting."""
        deadline = time.monotonic() + max(0.0, grace_s)
        while True:
            try:
                self.attempt()
                return None
            except Exception as err:
                if not is_outage(err, self.tracker.store):
                    raise
                last = err
            left = deadline - time.monotonic()
            if left <= 0:
                return last
            try:
                time.sleep(min(RETRY_EVERY_S, left))
            except KeyboardInterrupt:
                return last
