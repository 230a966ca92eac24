"""A real PostgreSQL and a real ``mlflow server`` over it, started once per session (the
server's first start, which creates MLflow's schema, takes tens of seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.components import require_module
from tests.helpers.postgres import Postgres, postgres_down, postgres_up
from tests.helpers.team_server import TeamServer, team_server_down, team_server_up


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL cluster on a free port of 127.0.0.1 with an empty ``mlflow`` database."""
    require_module("psycopg", fix="pip install 'tntrun[postgres]' (make test installs it)")
    cluster = postgres_up()
    yield cluster
    postgres_down(cluster)


@pytest.fixture(scope="session")
def team_server(postgres: Postgres, tmp_path_factory) -> Iterator[TeamServer]:
    """``mlflow server`` over ``postgres`` with proxied artifacts in a folder of its own."""
    server = team_server_up(tmp_path_factory.mktemp("team-server"), postgres.uri(driver="psycopg"))
    yield server
    team_server_down(server)
