"""A new SQLite store copied from the cached empty one is the store MLflow makes itself."""

from __future__ import annotations

import contextlib
import sqlite3

from mlflow.tracking import MlflowClient

from tntrun.tracking.fresh_store import empty_store, start_empty


def schema_of(database) -> list[tuple[str, ...]]:
    """Each table and index with its definition's lines in sorted order (MLflow's migrations
    write a table's constraints in an order that changes between two makings), and the
    schema's revision."""
    with contextlib.closing(sqlite3.connect(database)) as store:
        schema = store.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
        revision = store.execute("SELECT version_num FROM alembic_version").fetchall()
    lines = [
        (name, *sorted(line.strip(" ,") for line in (sql or "").splitlines()))
        for name, sql in schema
    ]
    return [*lines, *revision]


def experiments_of(database) -> list[tuple[str, str, str]]:
    """The store's experiments after one is made and a run logs in it, with where each keeps
    its artifacts (MLflow's default: ``mlruns`` beside the process's working folder)."""
    client = MlflowClient(f"sqlite:///{database}")
    run = client.create_run(client.create_experiment("trained"))
    client.log_metric(run.info.run_id, "loss", 0.5)
    return sorted(
        (found.experiment_id, found.name, found.artifact_location)
        for found in client.search_experiments()
    )


def test_a_copied_store_equals_one_mlflow_made_and_opens_with_its_own_default(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    made, copied = tmp_path / "made" / "mlflow.db", tmp_path / "copied" / "mlflow.db"
    for folder in (made.parent, copied.parent, tmp_path / "elsewhere"):
        folder.mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the empty store is made from another folder
    assert start_empty(copied)
    assert empty_store().parent == tmp_path / "cache" / "tntrun"

    monkeypatch.chdir(tmp_path)
    MlflowClient(f"sqlite:///{made}").search_experiments(max_results=1)
    assert schema_of(copied) == schema_of(made)
    experiments = experiments_of(copied)
    assert experiments == experiments_of(made)
    assert [(number, name) for number, name, _ in experiments] == [
        ("0", "Default"),
        ("1", "trained"),
    ]


def test_a_file_that_is_there_is_never_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    database = tmp_path / "mlflow.db"
    database.write_text("not a database\n")

    assert not start_empty(database)
    assert database.read_text() == "not a database\n"
    assert not (tmp_path / "cache").exists()


def test_an_unwritable_cache_leaves_the_store_to_mlflow(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.write_text("a file where the cache folder would be\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    database = tmp_path / "mlflow.db"

    assert not start_empty(database)
    assert not database.exists()
