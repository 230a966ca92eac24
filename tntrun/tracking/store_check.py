"""Whether MLflow could open the tracking store, asked before any rank starts.

What :func:`tntrun.tracking.mlflow_store.store_problems` leaves out, because it needs a
connection or a database driver rather than a file system check: a database store
(``postgresql://``, ``mysql://``, ``mssql://``) whose driver module is not installed,
whose server does not accept connections or whose database cannot be opened; a SQLite
file that is not a database; an ``http(s)://`` address that accepts connections but
does not answer HTTP. Each is one line naming ``tracking.uri`` and the fix, found in
seconds (every connection is bounded by ``timeout_s``) and without importing MLflow:
SQLAlchemy (MLflow's own database layer) names the driver a URI needs.
"""

from __future__ import annotations

import http.client
import socket
import sqlite3
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from tntrun.tracking.mlflow_store import sqlite_path
from tntrun.tracking.outage import is_remote

WHERE = "tracking.uri (else $MLFLOW_TRACKING_URI, else output_root)"
# MLflow's database stores (mlflow.store.db.db_types, sqlite aside) and their servers' ports.
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
# Every scheme MLflow's tracking stores take (a plain path: a folder of files).
KNOWN_SCHEMES = {"", "file", "sqlite", "http", "https", "databricks", "databricks-uc", "uc"}
KNOWN_SCHEMES |= set(DEFAULT_PORTS)
# The pip package of each SQLAlchemy driver MLflow can use (the driver's module otherwise).
DRIVER_PACKAGES = {
    "psycopg": "'tntrun[postgres]'",
    "psycopg2": "psycopg2-binary",
    "mysqldb": "mysqlclient (or use mysql+pymysql:// with pip install pymysql)",
    "pymysql": "pymysql",
    "mysqlconnector": "mysql-connector-python",
    "pyodbc": "pyodbc",
    "pymssql": "pymssql",
}
# Drivers whose connect() takes a timeout in seconds as ``connect_timeout``.
CONNECT_TIMEOUT_DRIVERS = {"psycopg", "psycopg2", "pymysql", "mysqldb"}


def open_problems(uri: str, timeout_s: float = 3.0) -> list[str]:
    """Why MLflow could not open the store at ``uri`` (an empty list: nothing found)."""
    scheme = urlparse(uri).scheme.lower()
    if len(scheme) > 1 and scheme.split("+")[0] not in KNOWN_SCHEMES:  # c: is a drive
        return [
            f"{WHERE} = {uri}: MLflow has no store for {scheme}://: use sqlite:///<file>, "
            "http(s)://<server>, postgresql://..., mysql://... or a folder"
        ]
    if scheme.split("+")[0] in DEFAULT_PORTS:
        return database_problems(uri, timeout_s)
    database = sqlite_path(uri)
    if database is not None and database.exists():
        return sqlite_problems(uri, database)
    if is_remote(uri):
        return http_problems(uri, timeout_s)
    return []


def database_problems(uri: str, timeout_s: float) -> list[str]:
    """A database server's store: its driver installed, its server up, its database open."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        url = make_url(uri)
        dialect = url.get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError) as err:
        return [f"{WHERE} = {uri}: not a database URI SQLAlchemy reads ({err}); fix the URI"]
    shown = url.render_as_string(hide_password=True)
    try:
        dialect.import_dbapi()
    except ImportError as err:
        package = DRIVER_PACKAGES.get(dialect.driver, err.name or dialect.driver)
        return [
            f"{WHERE} = {shown}: its database driver {dialect.driver} is not installed "
            f"({err}); pip install {package}"
        ]
    if url.host and not url.host.startswith("/"):  # else a Unix socket: the connection tells
        port = url.port or DEFAULT_PORTS[url.get_backend_name()]
        try:
            socket.create_connection((url.host, port), timeout=timeout_s).close()
        except OSError as err:
            return [
                f"{WHERE} = {shown}: no database server answers at {url.host}:{port} "
                f"({err.strerror or err}); start the server or fix the URI"
            ]
    if dialect.driver not in CONNECT_TIMEOUT_DRIVERS:
        return []
    return _connection_problems(uri, shown, dialect.driver, timeout_s)


def _connection_problems(uri: str, shown: str, driver: str, timeout_s: float) -> list[str]:
    """The database opened with the URI's user, password and name (``SELECT 1``)."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.pool import NullPool

    seconds = max(2, round(timeout_s)) if driver.startswith("psycopg") else timeout_s
    engine = create_engine(uri, poolclass=NullPool, connect_args={"connect_timeout": seconds})
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    except SQLAlchemyError as err:
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()
        return [
            f"{WHERE} = {shown}: the database cannot be opened ({reason[0] if reason else err}); "
            "fix the user, password or database name in the URI, or create the database"
        ]
    finally:
        engine.dispose()
    return []


def sqlite_problems(uri: str, database: Path) -> list[str]:
    """An existing SQLite file MLflow would open: a database, not another kind of file."""
    try:
        connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1)
        try:
            connection.execute("PRAGMA schema_version").fetchone()
        finally:
            connection.close()
    except sqlite3.DatabaseError as err:
        if "locked" in str(err):  # another driver writes it right now: a database
            return []
        return [
            f"{WHERE} = {uri}: {database} cannot be opened as a SQLite database ({err}); "
            "point it at an MLflow database file or a new file name"
        ]
    return []


def http_problems(uri: str, timeout_s: float) -> list[str]:
    """A server that answers HTTP at ``uri`` (any status: MLflow's own requests judge it)."""
    parsed = urlparse(uri)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    unverified = ssl.create_default_context()  # whether it answers, not whom it trusts
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
    health = f"{uri.rstrip('/')}/health"
    try:
        with urllib.request.urlopen(health, timeout=timeout_s, context=unverified):
            pass
    except urllib.error.HTTPError:
        return []  # an HTTP answer
    except (OSError, ValueError, http.client.HTTPException) as err:
        reason = getattr(err, "reason", None) or err
        return [
            f"{WHERE} = {uri}: no MLflow server answers at {parsed.hostname}:{port} (it accepts "
            f"connections but gave no HTTP answer: {reason}); start the server or fix the URI"
        ]
    return []
