"""What counts as an outage of the tracking store (retried, then left to ``tntrun sync``)
and what is a bug (it surfaces): real SQLite errors of a locked, read-only or emptied
database, a local file system's refusals, and a real HTTP server's 5xx answers to
MLflow's client, all in-process. The whole story with real ranks: test_store_faults."""

from __future__ import annotations

import errno
import http.server
import json
import logging
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tntrun.tracking.mlflow_store import quiet_store_errors
from tntrun.tracking.outage import describe, is_outage, sync_line


def sqlite_error(run) -> sqlite3.Error:
    with pytest.raises(sqlite3.Error) as raised:
        run()
    return raised.value


@pytest.fixture
def database(tmp_path) -> Path:
    path = tmp_path / "mlflow.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE metrics (key TEXT UNIQUE, value REAL)")
    return path


def test_sqlite_errors_of_a_store_that_cannot_be_used_now_are_outages(database):
    uri = f"sqlite:///{database}"
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the database
    locked = sqlite3.connect(database, timeout=0)
    busy = sqlite_error(lambda: locked.execute("SELECT * FROM metrics"))
    holder.execute("COMMIT")
    read_only = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    readonly = sqlite_error(lambda: read_only.execute("INSERT INTO metrics VALUES ('a', 1)"))
    emptied = sqlite3.connect(database.with_name("new.db"))  # a deleted store, opened anew
    missing = sqlite_error(lambda: emptied.execute("INSERT INTO metrics VALUES ('a', 1)"))
    for err, reason in (
        (busy, "SQLite: database is locked"),
        (readonly, "SQLite: attempt to write a readonly database"),
        (missing, "SQLite: no such table: metrics"),
    ):
        wrapped = RuntimeError("(sqlite3.OperationalError) ...\n[SQL: INSERT ...]")
        wrapped.__cause__ = err  # as MLflow raises it: an MlflowException from SQLAlchemy's
        assert is_outage(err, uri) and is_outage(wrapped, uri), err
        assert describe(wrapped) == reason


def test_bad_sql_a_broken_constraint_and_other_errors_are_bugs_that_surface(database):
    uri = f"sqlite:///{database}"
    connection = sqlite3.connect(database)
    connection.execute("INSERT INTO metrics VALUES ('a', 1)")
    duplicate = sqlite_error(lambda: connection.execute("INSERT INTO metrics VALUES ('a', 2)"))
    syntax = sqlite_error(lambda: connection.execute("INSERT INTO metrics VALUE ('b', 2)"))
    column = sqlite_error(lambda: connection.execute("SELECT nothing FROM metrics"))
    for err in (duplicate, syntax, column, ValueError("bad value"), KeyError("run")):
        assert not is_outage(err, uri), err
    # The store's file system refusing writes is an outage; a file of the run missing is not.
    for code in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO):
        assert is_outage(OSError(code, "refused"), uri)
    assert not is_outage(FileNotFoundError(errno.ENOENT, "no such file"), uri)
    assert sync_line(uri, Path("/r/a")) == (
        f"tntrun: the tracking store {uri} cannot be written; replay this run into it once it "
        "can, or into another with --tracking-uri, with: tntrun sync /r/a"
    )


class Answers(http.server.BaseHTTPRequestHandler):
    """An HTTP server that answers every request with the status and body it is told."""

    status, body, content_type = 503, b"upstream down", "text/plain"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(self.status)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    thread.join()


@pytest.mark.parametrize(
    ("status", "body", "content_type", "outage"),
    [
        # MLflow's client retries these (its forcelist) and fails with urllib3's error
        (503, b"upstream down", "text/plain", True),  # a proxy before a server gone away
        (500, b'{"error_code": "INTERNAL_ERROR", "message": "db"}', "application/json", True),
        # and answers these at once: its MlflowException, its RestException
        (507, b"insufficient storage", "text/plain", True),
        (501, b'{"error_code": "INTERNAL_ERROR", "message": "no"}', "application/json", True),
        (404, b'{"error_code": "RESOURCE_DOES_NOT_EXIST"}', "application/json", False),
        (400, b'{"error_code": "INVALID_PARAMETER_VALUE"}', "application/json", False),
    ],
)
def test_a_servers_5xx_answer_is_an_outage_and_its_4xx_a_bad_request(
    server, monkeypatch, status, body, content_type, outage
):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # one answer, no backoff
    monkeypatch.setattr(Answers, "status", status)
    monkeypatch.setattr(Answers, "body", body)
    monkeypatch.setattr(Answers, "content_type", content_type)
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    with pytest.raises(Exception) as raised:
        MlflowClient(uri).get_run("0" * 32)
    assert is_outage(raised.value, uri) is outage, repr(raised.value)


def test_mlflows_logged_copy_of_an_error_it_raises_stays_off_the_console(caplog):
    quiet_store_errors()
    logger = logging.getLogger("mlflow.store.db.utils")
    shown: list[logging.LogRecord] = []

    class Console(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            shown.append(record)

    console = Console()
    logger.addHandler(console)
    try:
        with caplog.at_level(logging.DEBUG, logger="tntrun.tracking.store"):
            try:
                raise sqlite3.OperationalError("database is locked")
            except sqlite3.OperationalError:
                logger.exception("SQLAlchemy database error. The following exception is caught.")
            logger.error("a plain error stays")
    finally:
        logger.removeHandler(console)
    assert [record.getMessage() for record in shown] == ["a plain error stays"]
    (kept,) = [r for r in caplog.records if r.name == "tntrun.tracking.store"]
    assert kept.levelno == logging.DEBUG and kept.exc_info is not None  # the debug log's


def test_the_pending_record_names_a_local_store_as_it_was(tmp_path):
    from tntrun.tracking.outage import Pending

    pending = Pending(f"sqlite:///{tmp_path}/mlflow.db", "FINISHED", "abc", 12)
    pending.reason = describe(sqlite3.OperationalError("disk I/O error"))
    pending.save(tmp_path)
    saved = json.loads((tmp_path / "tracking_pending.json").read_text())
    assert saved["reason"] == "SQLite: disk I/O error" and saved["metrics_offset"] == 12


def test_a_deleted_sqlite_store_leaves_the_rest_pending_past_what_it_took(tmp_path, capfd):
    """In-process, MLflow's real SQL store: the relay delivers two lines, the store's file
    is deleted, the end leaves the rest pending from there, with no traceback (the replay,
    with real ranks: test_store_faults)."""
    from tntrun.contract import run_files
    from tntrun.contract.metrics import MetricsWriter
    from tntrun.contract.run_status import RunStatus
    from tntrun.tracking.delivery import Delivery, deliver_or_leave_pending
    from tntrun.tracking.metrics_stream import MetricsRelay
    from tntrun.tracking.mlflow_tracker import MlflowTracker
    from tntrun.tracking.outage import Pending

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / run_files.CONFIG).write_text("seed: 1\n")
    database = tmp_path / "store" / "mlflow.db"
    tracker = MlflowTracker.at(f"sqlite:///{database}", tmp_path)
    run_id = tracker.start("r", {})
    writer = MetricsWriter(run_dir)
    relay = MetricsRelay(run_dir / run_files.METRICS, tracker.log_metrics)
    for step in range(2):
        writer.log({"loss": 1.0 / (step + 1), "accuracy": 0.5}, step)
    assert relay.drain() == 2
    database.unlink()  # a store deleted mid-run
    for step in range(2, 5):
        writer.log({"loss": 1.0 / (step + 1), "accuracy": 0.5}, step)
    writer.close()
    assert not relay.try_drain() and relay.offset > 0  # the first two lines stay delivered
    delivery = Delivery(tracker, run_dir, relay, RunStatus.FINISHED)
    pending = deliver_or_leave_pending(
        delivery, 0.0, lambda: Pending(tracker.store, RunStatus.FINISHED, run_id)
    )
    assert pending is not None and pending.reason.startswith("SQLite: ")
    assert Pending.load(run_dir) == pending and pending.metrics_offset == relay.offset
    assert "Traceback" not in capfd.readouterr().err  # MLflow's copies went to DEBUG
