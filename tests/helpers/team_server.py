"""A team's MLflow server: ``mlflow server`` over PostgreSQL, serving its artifacts itself.

``--artifacts-destination`` makes it the artifacts' proxy: runs created through it get
``mlflow-artifacts:`` locations, and the files land in that folder, written by the
server, so drivers and ranks never need it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.commands import clean_env, free_port, start_in_session
from tests.helpers.paths import BIN

WORKERS = 2  # concurrent drivers' requests are served in parallel, as a team's would be
HEALTHY_WITHIN_S = 180  # its first start creates MLflow's schema in PostgreSQL


@dataclass
class TeamServer:
    """A running server: its URL, the folder its artifacts land in, its process."""

    url: str
    artifacts: Path
    log: Path
    process: subprocess.Popen
    started_in_s: float


def team_server_up(folder: Path, database_uri: str) -> TeamServer:
    """Start ``mlflow server`` over ``database_uri`` with its artifacts in ``folder``/artifacts
    and wait until its ``/health`` answers."""
    artifacts, log = folder / "artifacts", folder / "server.log"
    artifacts.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [
        str(BIN / "mlflow"),
        "server",
        "--backend-store-uri",
        database_uri,
        "--artifacts-destination",
        str(artifacts),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(WORKERS),
    ]
    env = {
        **clean_env(),
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",  # no job runner beside the server
    }
    begin = time.monotonic()
    with log.open("w") as output:
        # In its own session: its workers in its own group, stopped together.
        process = start_in_session(command, folder, env, stdout=output, stderr=subprocess.STDOUT)
    server = TeamServer(f"http://127.0.0.1:{port}", artifacts, log, process, 0.0)
    try:
        server.started_in_s = _wait_healthy(server, begin)
    except BaseException:
        team_server_down(server)
        raise
    return server


def _wait_healthy(server: TeamServer, begin: float) -> float:
    """Seconds from ``begin`` until ``/health`` says OK."""
    while time.monotonic() - begin < HEALTHY_WITHIN_S:
        if server.process.poll() is not None:
            raise AssertionError(f"mlflow server exited:\n{server.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=2) as response:
                if response.read().strip() == b"OK":
                    return time.monotonic() - begin
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"mlflow server not healthy within {HEALTHY_WITHIN_S} s")


def team_server_down(server: TeamServer) -> None:
    """Stop the server and its workers: SIGTERM, and SIGKILL for what is left after 30 s."""
    with suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        server.process.wait(timeout=30)
    with suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGKILL)  # a worker that outlived its parent
    server.process.wait(timeout=30)
