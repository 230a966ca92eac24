"""``tntrun ui``: the MLflow UI over the project's store, on localhost, one worker."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from tntrun.planning.machine import venv_executable
from tntrun.tracking.mlflow_tracker import MlflowTracker
from tntrun.tracking.store import store_problems, tracking_uri


def server_command(uri: str, host: str = "127.0.0.1", port: int = 5000) -> list[str]:
    """``mlflow server`` over ``uri``; one worker, as SQLite wants a single writer."""
    return [
        venv_executable("mlflow"),
        "server",
        "--backend-store-uri",
        uri,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]


# MLflow 3.17's UI shows an experiment in its GenAI view (traces) or its model-training view
# (runs table) by a browser-wide switch, not by the experiment's kind tag; this selects the latter.
TRAINING_VIEW = "workflowType=machine_learning"


def run_url(experiment_id: str, run_id: str, host: str = "127.0.0.1", port: int = 5000) -> str:
    """The run's page in the UI of :func:`server_command`, in the model-training view."""
    return f"http://{host}:{port}/#/experiments/{experiment_id}/runs/{run_id}?{TRAINING_VIEW}"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="tntrun ui", description=__doc__)
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="store to show (default: $MLFLOW_TRACKING_URI or outputs/mlflow.db)",
    )
    parser.add_argument("--output-root", default="outputs", help="where the default store lives")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    uri = tracking_uri(args.tracking_uri, Path(args.output_root))
    command = server_command(uri, args.host, args.port)
    print(
        f"tntrun ui: http://{args.host}:{args.port} over {uri} (Ctrl-C stops it); runs "
        'tables: choose "Model training" at the top left (the browser keeps it)',
        flush=True,
    )
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    if not store_problems(uri):  # runs whose driver is gone: KILLED, not RUNNING forever
        MlflowTracker.at(uri, Path(args.output_root)).end_lost_runs()
    os.execvp(command[0], command)
    return 0  # not reached
