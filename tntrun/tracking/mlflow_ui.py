"""The MLflow UI over a store: the server command and a run's page in it."""

from __future__ import annotations

from tntrun.planning.machine import venv_executable

# MLflow 3.17's UI shows an experiment in its GenAI view (traces) or its model-training view
# (runs table) by a browser-wide switch, not by the experiment's kind tag; this selects the latter.
TRAINING_VIEW = "workflowType=machine_learning"


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


def is_server(uri: str) -> bool:
    """Whether ``uri`` is a tracking server, which is its own UI."""
    return uri.startswith(("http://", "https://"))


def run_url(experiment_id: str, run_id: str, base: str = "http://127.0.0.1:5000") -> str:
    """The run's page in the UI at ``base`` (by default :func:`server_command`'s), in the
    model-training view."""
    page = f"#/experiments/{experiment_id}/runs/{run_id}?{TRAINING_VIEW}"
    return f"{base.rstrip('/')}/{page}"
