"""Tracking through an outage of the store (an ``http(s)://`` MLflow server gone away).

Training never waits for the store: rank 0's metrics stay in ``metrics.jsonl``
and the relay sends them, in order and once, when the server answers again.
When the ranks end, the driver retries what is left (the metrics, the outputs,
the final status) for ``tracking.outage_grace_s``. If the store is still down
then, it writes ``tracking_pending.json`` into the run directory, prints the
command that replays it (``tntrun sync <run dir>``) and exits with
:data:`EXIT_TRACKING_PENDING`.

MLflow's HTTP client retries a request 7 times with backoff factor 2 (about
four minutes) before it fails; :func:`bound_http_retries` bounds one failing
request to seconds, so tntrun's own loops (the relay's every second, the end's
grace period) decide how long to keep trying.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from urllib.parse import urlparse

from tntrun.run_files import TRACKING_PENDING
from tntrun.tracking import Tracker
from tntrun.tracking.metrics_stream import MetricsRelay
from tntrun.tracking.store import store_problems

# The training succeeded but its record did not reach the store: `tntrun sync` completes it.
EXIT_TRACKING_PENDING = 3
RETRY_EVERY_S = 2.0  # between attempts to deliver the rest at the end of a run
# Defaults for MLflow's HTTP client in the driver (a variable already set wins): a refused
# connection fails after about 3 s (retries after 0 s and 2 s) instead of about 4 minutes.
HTTP_CLIENT_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",  # a server that accepts but never answers
}


def is_remote(uri: str) -> bool:
    """True for a store behind a server (``http(s)://``), the kind that can go away."""
    return urlparse(uri).scheme in ("http", "https")


def bound_http_retries(uri: str) -> None:
    """Bound MLflow's HTTP retries in this process for a remote store (see the module doc)."""
    if is_remote(uri):
        for name, value in HTTP_CLIENT_LIMITS.items():
            os.environ.setdefault(name, value)
        # One line from tntrun says the store is down, not two of urllib3's per request.
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def is_outage(err: BaseException, uri: str) -> bool:
    """Whether ``err`` means the remote store is unreachable (not a bad request or a bug)."""
    if not is_remote(uri):
        return False
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError):  # requests' connection errors and timeouts are OSErrors
            return True
        seen = seen.__cause__ or seen.__context__
    return bool(store_problems(uri, timeout_s=2.0))


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
    ) -> None:
        self.tracker, self.run_dir, self.relay = tracker, run_dir, relay
        self.status, self.stalled, self.prefix = status, stalled, prefix
        self.open_run, self.outputs_logged = open_run, outputs_logged

    def attempt(self) -> None:
        """Deliver what is left and set the status; raises the first failure."""
        from tntrun.tracking.run_record import record_outputs

        self.open_run()
        try:
            self.relay.drain()
            if not self.outputs_logged:
                record_outputs(self.tracker, self.run_dir, self.status, self.prefix, self.stalled)
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
