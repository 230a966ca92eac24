"""``tntrun ui``: the MLflow UI over the project's store, on localhost, one worker."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from tntrun.tracking.mlflow_store import store_problems, tracking_uri
from tntrun.tracking.mlflow_tracker import MlflowTracker
from tntrun.tracking.mlflow_ui import server_command


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
    # MLflow 3's server also starts a job runner (huey consumers: 8 more processes) for GenAI
    # jobs the training UI never runs; they outlived a stopped UI by seconds.
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    if not store_problems(uri):  # runs whose driver is gone: KILLED, not RUNNING forever
        MlflowTracker.at(uri, Path(args.output_root)).end_lost_runs()
    os.execvp(command[0], command)
    return 0  # not reached
