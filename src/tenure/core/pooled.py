"""The base of the request-serving processes, `tenure ui` and `tenure sqs`: a connection pool,
the stop state (:mod:`tenure.core.shutdown`) and a LISTEN thread (:class:`ListenLoop`), with
the ``open`` / ``close`` / ``repo`` / ``health`` each app uses.

The pool's connections are autocommit and read text as text (the options of
:func:`tenure.core.db.connect`, which a pool would not apply by itself); each is named
``application_name``. Limits: :meth:`PooledService.open` waits at most
:data:`POOL_OPEN_TIMEOUT_SECONDS` for the first connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from tenure.core.db import connection_options
from tenure.core.repository import SchemaStore
from tenure.core.service import ListenLoop
from tenure.core.shutdown import Shutdown

POOL_OPEN_TIMEOUT_SECONDS = 30.0
"""How long :meth:`PooledService.open` waits for the pool's first connection."""
LISTEN_JOIN_SECONDS = 2.0
"""How long :meth:`PooledService.close` waits for the LISTEN thread to close its connection."""

StoreT = TypeVar("StoreT", bound=SchemaStore)
"""The face of the repository an app's requests use (at least the schema area: :meth:`PooledService.open`)."""


class PooledService(Generic[StoreT]):
    """What one server process shares between requests: the pool, the stop state, and the
    LISTEN thread (:attr:`listener`, started by the app's lifespan on the event loop).

    Subclasses set :attr:`listener`, define :meth:`store` (a ``Repository`` on a pooled
    connection, declared as the face of the areas the app uses) and may extend :meth:`on_open`
    (run once, with a pooled repository, after the schema check) and :meth:`close`."""

    def __init__(self, *, dsn: str, schema: str, application_name: str, pool_size: int,
                 statement_timeout_seconds: float | None = None) -> None:
        self.schema = schema
        kwargs: dict[str, Any] = {**connection_options(dsn), "autocommit": True, "application_name": application_name}
        if statement_timeout_seconds is not None:
            kwargs["options"] = f"-c statement_timeout={int(statement_timeout_seconds * 1000)}"
        self.pool: ConnectionPool[Any] = ConnectionPool(
            dsn, min_size=1, max_size=pool_size, open=False, name=application_name, kwargs=kwargs,
            connection_class=psycopg.Connection)
        self.shutdown = Shutdown()
        self.listener: ListenLoop | None = None
        self.opened = False

    def open(self) -> None:
        """Open the pool; the schema must be current; then :meth:`on_open`. Idempotent."""
        if self.opened:
            return
        self.pool.open(wait=True, timeout=POOL_OPEN_TIMEOUT_SECONDS)
        with self.repo() as repo:
            repo.check_schema()
            self.on_open(repo)
        self.opened = True

    def on_open(self, repo: StoreT) -> None:
        """What a subclass loads once the pool is open (nothing here)."""

    def close(self) -> None:
        """Stop the LISTEN thread (waiting up to :data:`LISTEN_JOIN_SECONDS`) and close the pool."""
        if self.listener is not None:
            self.listener.stop_and_join(LISTEN_JOIN_SECONDS)
        self.pool.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self.pool.connection() as conn:
            yield conn

    @contextmanager
    def repo(self) -> Iterator[StoreT]:
        with self.pool.connection() as conn:
            yield self.store(conn)

    def store(self, conn: psycopg.Connection[Any]) -> StoreT:
        """The repository on ``conn``, as the app's face of it."""
        raise NotImplementedError

    def health(self) -> tuple[int, str]:
        """``/healthz``: 200 ``ok`` while serving, 503 ``stopping`` from SIGTERM on (readiness
        fails before the drain)."""
        if self.shutdown.stopping:
            return 503, "stopping\n"
        return 200, "ok\n"
