"""The plumbing every part of the repository shares: one connection, one schema, the named
queries of ``sql/queries/*.sql`` and two ways to run them. No SQL text lives here."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from tenure.core.queries import named_queries, notify_channel
from tenure.core.repository.specs import Row


class RepositoryBase:
    """Named queries bound to one connection and one schema; each area's mixin builds on it."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str = "tenure") -> None:
        self.conn = conn
        self.schema = schema
        self._q = named_queries(schema)
        self.channel = notify_channel(schema)
        self._claim_gated = False
        """The last claim found a running limit on one of its queues: claim gated (see claim)."""

    def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[Row]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(self._q[name], params or {})
            return cur.fetchall() if cur.description else []

    def _unprepared(self, name: str, params: dict[str, Any] | None) -> list[Row]:
        """Run a query never as a prepared statement: planned each time with its parameters'
        values, so a filter's literals fold and partial indexes (and job_history's CHECK) apply;
        ``None`` sends it in the simple protocol (what a utility statement like VACUUM needs)."""
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(self._q[name], params, prepare=False)
            return cur.fetchall() if cur.description else []

    def _one(self, name: str, params: dict[str, Any] | None = None) -> Row | None:
        rows = self._rows(name, params)
        return rows[0] if rows else None
