"""A real PostgreSQL (Debian's ``postgresql``) in a temporary folder, as a team's store.

``initdb`` writes a fresh cluster, ``pg_ctl`` starts it on a free port of 127.0.0.1 and
stops it. PostgreSQL refuses to run as root, so under root (the tests' user here and
in CI) its programs run as the ``postgres`` user Debian's package creates, in a folder
of its own under /tmp (pytest's temporary folders are private to root).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import free_port
from tests.helpers.components import missing

FIX = "apt-get install postgresql"
DATABASE = "mlflow"
# A throwaway cluster: durability settings off, so that start-up and MLflow's migrations
# do not wait for the disk.
FAST = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"


@dataclass(frozen=True)
class Postgres:
    """A running cluster: its programs, its folder, where it listens."""

    bin: Path
    folder: Path
    port: int
    user: str = "postgres"

    def uri(self, database: str = DATABASE, driver: str = "") -> str:
        """The SQLAlchemy URI of ``database`` (``driver``: e.g. ``psycopg``; none: the
        default, which SQLAlchemy 2.1 maps to psycopg 3)."""
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        return f"{scheme}://{self.user}@127.0.0.1:{self.port}/{database}"


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's program folder (Debian keeps them off PATH)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if not found:
        missing("PostgreSQL's initdb (/usr/lib/postgresql/*/bin/initdb)", FIX)
    return found[-1].parent


def _as_owner(command: list[str]) -> list[str]:
    """``command`` run as ``postgres`` under root, as this user elsewhere."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _owner() -> pwd.struct_passwd | None:
    """The user PostgreSQL runs as under root (None: this user)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        missing("the postgres user", FIX)


def _run(command: list[str], timeout: float = 120) -> None:
    done = subprocess.run(_as_owner(command), capture_output=True, text=True, timeout=timeout)
    assert_succeeded(done)


def postgres_up() -> Postgres:
    """A new cluster with an empty ``mlflow`` database, started and accepting connections."""
    programs = postgres_bin()
    owner = _owner()
    folder = Path(tempfile.mkdtemp(prefix="tntrun-postgres-"))  # no spaces: split below
    if owner is not None:
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    cluster = Postgres(programs, folder, free_port())
    data, log = folder / "data", folder / "postgres.log"
    listen = f"-h 127.0.0.1 -p {cluster.port} -k {folder} {FAST}"
    try:
        _run(
            [
                f"{programs}/initdb",
                *f"-D {data} -U postgres -A trust -E UTF8".split(),
                "--locale=C.UTF-8",
                "--no-sync",
            ]
        )
        _run([f"{programs}/pg_ctl", *f"-D {data} -l {log} -w -t 60 start -o".split(), listen])
        _run(
            [
                f"{programs}/createdb",
                *f"-h 127.0.0.1 -p {cluster.port} -U postgres".split(),
                DATABASE,
            ]
        )
    except BaseException:
        postgres_down(cluster)
        raise
    return cluster


def postgres_down(cluster: Postgres) -> None:
    """Stop the cluster (fast shutdown: open connections are closed) and remove its folder."""
    data = cluster.folder / "data"
    try:
        if (data / "postmaster.pid").exists():
            _run([f"{cluster.bin}/pg_ctl", *f"-D {data} -m fast -w stop".split()])
    finally:
        shutil.rmtree(cluster.folder, ignore_errors=True)
