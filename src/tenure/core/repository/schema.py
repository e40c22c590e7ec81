"""Migrations and the schema version check; the claim statistics a starting worker refreshes and
the hot table's vacuum (reaper/vacuum.py decides when)."""

from __future__ import annotations

import psycopg

from tenure.core.errors import SchemaTooNewError
from tenure.core.queries import migrations, quote_ident
from tenure.core.repository.base import RepositoryBase

STATS_STALE_MIN_ROWS = 1000
"""Rows changed since the jobs table's last analyze before a starting worker refreshes its statistics."""
STATS_STALE_FRACTION = 0.2
"""... and at least this fraction of the table (autovacuum's own default threshold is 0.1)."""


class SchemaQueries(RepositoryBase):
    """Create, upgrade and check the schema."""

    def schema_version(self) -> int:
        """Highest applied migration, 0 for an empty schema."""
        table = f"{quote_ident(self.schema)}.schema_migrations"
        present = self._one("migration_table_exists", {"table": table})
        if not present or not present["present"]:
            return 0
        row = self._one("migration_version")
        return int(row["version"]) if row else 0

    def check_schema(self) -> None:
        """Refuse to run against a schema that is missing or newer than this code."""
        version, known = self.schema_version(), len(migrations())
        if version > known:
            raise SchemaTooNewError(
                f"schema {self.schema!r} is at version {version} but this tenure knows {known}: upgrade tenure")
        if version < known:
            raise SchemaTooNewError(
                f"schema {self.schema!r} is at version {version}, expected {known}: run `tenure migrate`")

    def refresh_stale_claim_statistics(self, *, min_rows: int = STATS_STALE_MIN_ROWS,
                                       fraction: float = STATS_STALE_FRACTION) -> bool:
        """``ANALYZE`` the jobs table if at least ``min_rows`` rows, and ``fraction`` of the
        table, changed since its last analyze; True if it ran.

        Why: without statistics (a bulk enqueue that autovacuum has not analyzed yet, up to a
        minute) the planner serves the claim's priority lane by sorting every pending row
        instead of reading the first ``limit`` of jobs_ready_priority_idx in order: 4.7 ms
        against 1 ms per claim of 100 at a 20k backlog (docs/performance.md). Called once when
        a worker starts, which is when a backlog meets new workers (a scale-up from zero).
        Workers starting together analyze once: they serialise on an advisory lock and look
        again behind it, so the others find fresh statistics (two 40k-row analyses cost 2 ×
        170 ms of database CPU at once). Limits: waits at most 200 ms for another worker's
        analysis or a vacuum already running, then gives up; a role that may not analyze the
        table gets PostgreSQL's warning, nothing else."""
        params = {"min_rows": min_rows, "fraction": fraction}
        row = self._one("job_table_stats_stale", params)
        if not row or not row["stale"]:
            return False
        try:
            with self.conn.transaction():
                self._rows("job_table_analyze_lock", {"schema": self.schema})
                row = self._one("job_table_stats_stale", params)
                if not row or not row["stale"]:
                    return False
                self._rows("job_table_analyze")
        except psycopg.errors.LockNotAvailable:
            return False
        return True

    def job_table_dead_rows(self) -> tuple[int, int, bool]:
        """(dead, live, may_vacuum) of the jobs table, from the cumulative statistics."""
        row = self._one("job_table_dead_rows")
        if not row:
            return 0, 0, False
        return int(row["dead"]), int(row["live"]), bool(row["may_vacuum"])

    def job_table_vacuum(self) -> bool:
        """``VACUUM`` the jobs table unless another caller of this schema is vacuuming it (a
        session advisory lock, not waited for); True if this call ran it. Needs an autocommit
        connection. Another vacuum of the table (autovacuum's) makes PostgreSQL skip it with a
        warning instead of waiting. Takes as long as the table and its indexes take to scan."""
        lock = {"schema": self.schema}
        row = self._one("job_table_vacuum_lock", lock)
        if not row or not row["taken"]:
            return False
        try:
            self._unprepared("job_table_vacuum", None)
        finally:
            self._one("job_table_vacuum_unlock", lock)
        return True

    def migrate(self) -> list[int]:
        """Apply pending migrations in order, each in its own transaction; idempotent.

        Concurrent callers serialise on an advisory lock. Refuses a schema newer than the code.
        """
        applied: list[int] = []
        known = migrations()
        while True:
            # One transaction per migration, each under the lock: a later migration may use what
            # an earlier one added (an enum value, say) only once that is committed.
            with self.conn.transaction():
                self._rows("migration_lock", {"schema": self.schema})
                self._rows("migration_schema_create")
                current = self.schema_version()
                if current > len(known):
                    raise SchemaTooNewError(
                        f"schema {self.schema!r} is at version {current} but this tenure knows "
                        f"{len(known)}: upgrade tenure")
                pending = [m for m in known if m[0] > current]
                if not pending:
                    return applied
                version, name, sql = pending[0]
                self._rows("migration_search_path")
                with self.conn.cursor() as cur:
                    cur.execute(sql.encode())  # a numbered migration file from sql/migrations
                self._rows("migration_record", {"version": version, "name": name})
                applied.append(version)

    def apply_schema_file(self, sql: str) -> None:
        """Create the schema from ``schema.sql`` directly (tests compare it with the migrations)."""
        with self.conn.transaction():
            self._rows("migration_schema_create")
            self._rows("migration_search_path")
            with self.conn.cursor() as cur:
                cur.execute(sql.encode())
