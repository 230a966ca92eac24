"""A new SQLite tracking store starts as a copy of an empty one, not from MLflow's migrations.

MLflow makes a new store's schema by running each of its Alembic migrations on the fresh
file, one commit each: 1.5-2 CPU-s, more on a busy disk, paid by the first run in every
new output folder (and by each test's own store). The first store a given MLflow version
makes is kept, emptied, in tntrun's cache; each later new store is a copy of it. The copy
leaves out the Default experiment, which MLflow adds back when it opens the store, with
this store's own artifact root; MLflow still opens and verifies every store itself (its
schema revision must be MLflow's head).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from tntrun.contract.user_cache import cache_dir

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT_ID = 0  # MLflow's Default experiment: made again on opening


def start_empty(database: Path) -> bool:
    """Make the missing (or empty) SQLite file ``database`` a copy of the empty store of this
    MLflow version, creating that once; whether it did. Call under the store's lock."""
    if database.exists() and database.stat().st_size > 0:
        return False
    try:
        template = empty_store()
        partial = database.with_name(f".{database.name}.partial")
        shutil.copyfile(template, partial)
        partial.replace(database)
    except (OSError, sqlite3.Error) as err:  # MLflow makes the store itself, as without this
        log.debug("tntrun: no copy of an empty MLflow store for %s: %s", database, err)
        return False
    return True


def empty_store() -> Path:
    """The cached empty store of the installed MLflow, made by MLflow in a scratch folder
    the first time (parallel first makers each rename a whole file into place)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    template = cache_dir() / f"mlflow-{mlflow.__version__}-empty-store.db"
    if template.is_file():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=template.parent) as scratch:
        made = Path(scratch) / "store.db"
        MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments(max_results=1)
        with contextlib.closing(sqlite3.connect(made)) as store, store:
            store.execute(
                "DELETE FROM experiments WHERE experiment_id = ?", (DEFAULT_EXPERIMENT_ID,)
            )
        os.replace(made, template)
    return template
