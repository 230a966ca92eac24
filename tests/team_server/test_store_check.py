"""A store tntrun could not use is refused before any rank starts: exit 2, one line naming
``tracking.uri`` and the fix, no run anywhere. The stores are real: a PostgreSQL without
the database asked for, a port nobody listens on, a socket that never answers HTTP, a
file that is not a SQLite database; mysql:// needs MySQLdb, which is not installed here.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.commands import tntrun_cli
from tests.helpers.postgres import Postgres
from tntrun.contract import run_files
from tntrun.tracking.store_check import open_problems

NAMED = "tracking.uri (else $MLFLOW_TRACKING_URI, else output_root) = "


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port of 127.0.0.1 nobody listens on while the test runs."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield listening.getsockname()[1]


def assert_refused(
    result: subprocess.CompletedProcess, workdir: Path, uri_shown: str, fix: str
) -> None:
    """Exit 2, one line naming the URI and the fix, and no rank, no run directory's inputs."""
    assert_exit(result, 2)
    lines = [line for line in result.stderr.splitlines() if "tracking.uri" in line]
    assert len(lines) == 1, result.stderr
    assert f"{NAMED}{uri_shown}:" in lines[0] and fix in lines[0], lines[0]
    assert "rank 0/" not in result.stdout and "[0]<stdout>" not in result.stdout
    written = {p.name for p in (workdir / "outputs").rglob("*") if ".hydra" not in p.parts}
    assert not written & {run_files.CONFIG, run_files.PLAN, run_files.RUN_ID, run_files.LOGS}


def refuse(tmp_path: Path, uri: str) -> tuple[subprocess.CompletedProcess, float]:
    begin = time.monotonic()
    result = tntrun_cli(tmp_path, "train.epochs=1", f"tracking.uri={uri}", timeout=120)
    return result, time.monotonic() - begin


@pytest.mark.slow
def test_a_database_scheme_whose_driver_is_not_installed_is_refused(tmp_path):
    uri = "mysql://mlflow:secret@127.0.0.1/mlflow"  # SQLAlchemy's mysql:// is MySQLdb
    result, _ = refuse(tmp_path, uri)
    assert_refused(
        result, tmp_path, "mysql://mlflow:***@127.0.0.1/mlflow", "pip install mysqlclient"
    )
    assert "secret" not in result.stderr


@pytest.mark.slow
def test_a_database_server_that_cannot_be_reached_is_refused_in_seconds(tmp_path, closed_port):
    for uri, why in (
        (f"postgresql://postgres@127.0.0.1:{closed_port}/mlflow", "Connection refused"),
        ("postgresql://postgres@no-such-host.invalid/mlflow", "no-such-host.invalid:5432"),
    ):
        result, seconds = refuse(tmp_path, uri)
        assert_refused(result, tmp_path, uri, "start the server or fix the URI")
        assert why in result.stderr and seconds < 60


@pytest.mark.slow
def test_a_database_that_does_not_exist_is_refused_and_not_created(tmp_path, postgres: Postgres):
    import psycopg

    uri = postgres.uri(database="absent")
    result, _ = refuse(tmp_path, uri)
    assert_refused(result, tmp_path, uri, 'database "absent" does not exist')
    with psycopg.connect(postgres.uri()) as connection:
        names = [row[0] for row in connection.execute("SELECT datname FROM pg_database")]
    assert "absent" not in names and "mlflow" in names


@pytest.mark.slow
def test_a_server_that_accepts_but_never_answers_http_is_refused(tmp_path, silent_port):
    uri = f"http://127.0.0.1:{silent_port}"
    result, seconds = refuse(tmp_path, uri)
    assert_refused(result, tmp_path, uri, "start the server or fix the URI")
    assert "no HTTP answer" in result.stderr and seconds < 60


@pytest.mark.slow
def test_a_file_that_is_not_a_sqlite_database_is_refused_and_left_alone(tmp_path):
    notes = tmp_path / "notes.db"
    notes.write_text("a user's notes, not a database\n")
    uri = f"sqlite:///{notes}"
    result, _ = refuse(tmp_path, uri)
    assert_refused(result, tmp_path, uri, "cannot be opened as a SQLite database")
    assert notes.read_text() == "a user's notes, not a database\n"


@pytest.mark.slow
def test_a_reachable_postgresql_passes_and_a_run_finishes_in_it(tmp_path, postgres: Postgres):
    """The positive control: the check lets a usable store through (psycopg from the
    ``postgres`` extra), and MLflow opens it straight, without a server."""
    from mlflow.tracking import MlflowClient

    assert open_problems(postgres.uri()) == []
    result = tntrun_cli(
        tmp_path,
        f"tracking.uri={postgres.uri()}",
        "tracking.experiment_name=direct",
        "ranks_per_node=1",
        "train.epochs=1",
        "tracking.system_metrics=false",
        "checkpoint.every_epochs=0",
    )
    assert_succeeded(result)
    client = MlflowClient(postgres.uri())
    (run,) = client.search_runs([client.get_experiment_by_name("direct").experiment_id])
    assert run.info.status == "FINISHED" and "val_accuracy" in run.data.metrics


def test_the_check_is_bounded_by_its_timeout(silent_port):
    begin = time.monotonic()
    (problem,) = open_problems(f"http://127.0.0.1:{silent_port}", timeout_s=0.5)
    assert time.monotonic() - begin < 5 and "no HTTP answer" in problem


def test_a_sqlite_store_yet_to_be_created_and_a_real_one_pass(tmp_path):
    import sqlite3

    assert open_problems(f"sqlite:///{tmp_path / 'new.db'}") == []
    sqlite3.connect(tmp_path / "real.db").execute("CREATE TABLE t (x)").connection.close()
    assert open_problems(f"sqlite:///{tmp_path / 'real.db'}") == []
