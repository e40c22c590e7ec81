"""Shared fixtures: one real embedded PostgreSQL per test session, one fresh schema per test.

Set ``TENURE_TEST_DATABASE_URL`` to run against another server instead.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure.core.db import Connection, connect
from tenure.core.embedded import EmbeddedServer, ensure_server
from tenure.core.repository import Repository


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer | None]:
    if os.environ.get("TENURE_TEST_DATABASE_URL"):
        yield None
        return
    # Not under pytest's basetemp: concurrent pytest runs prune each other's basetemp folders.
    home = Path(tempfile.mkdtemp(prefix="tenure-test-pg-"))
    server = ensure_server(home / "data")
    yield server
    server.stop("immediate")
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def dsn(pg_server: EmbeddedServer | None) -> str:
    return os.environ.get("TENURE_TEST_DATABASE_URL") or (pg_server.dsn if pg_server else "")


@pytest.fixture(scope="session")
def tenure_dsn(dsn: str) -> str:
    """The tenure.testing plugin's server is this suite's server (one PostgreSQL, not two)."""
    return dsn


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with connect(dsn) as conn:
        Repository(conn, name).migrate()
    yield name
    with connect(dsn) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def conn(dsn: str) -> Iterator[Connection]:
    with connect(dsn) as c:
        yield c


@pytest.fixture
def repo(conn: Connection, schema: str) -> Repository:
    return Repository(conn, schema)
