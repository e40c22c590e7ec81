"""Migrations applied in order give exactly schema.sql; migrating twice is a no-op."""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest

from tenure.core.db import connect
from tenure.core.embedded import bin_dir
from tenure.core.errors import SchemaTooNewError
from tenure.core.queries import migrations, schema_sql
from tenure.core.repository import JobSpec, Repository

pytestmark = pytest.mark.integration


def _dump(dsn: str, schema: str) -> str:
    out = subprocess.run([str(bin_dir() / "pg_dump"), "--schema-only", "--no-owner", "--no-privileges",
                          "-n", schema, dsn], check=True, capture_output=True, text=True).stdout
    # Functions keep the search_path they were created with (SET search_path FROM CURRENT).
    out = out.replace(f"'\"{schema}\"'", "'SCHEMA'").replace(f"'{schema}'", "'SCHEMA'")
    out = out.replace(f'"{schema}"', "SCHEMA").replace(f"{schema}.", "SCHEMA.").replace(f" {schema};", " SCHEMA;")
    lines = [ln for ln in out.splitlines() if ln and not ln.startswith("--")
             and not re.match(r"^\\(un)?restrict ", ln) and not ln.startswith("SET ")
             and "set_config('search_path'" not in ln]
    return "\n".join(lines)


def test_migrations_in_order_equal_schema_sql(dsn: str) -> None:
    a, b = f"m_{uuid.uuid4().hex[:10]}", f"s_{uuid.uuid4().hex[:10]}"
    try:
        with connect(dsn) as conn:
            Repository(conn, a).migrate()
            Repository(conn, b).apply_schema_file(schema_sql())
        dumped_migrations, dumped_schema = _dump(dsn, a), _dump(dsn, b)
        assert "CREATE TABLE SCHEMA.jobs" in dumped_migrations
        assert dumped_migrations == dumped_schema
    finally:
        with connect(dsn) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{a}" CASCADE')
            conn.execute(f'DROP SCHEMA IF EXISTS "{b}" CASCADE')


def test_migrating_twice_is_a_noop(dsn: str, schema: str) -> None:
    with connect(dsn) as conn:
        repo = Repository(conn, schema)
        before = _dump(dsn, schema)
        assert repo.migrate() == []
        assert _dump(dsn, schema) == before
        assert repo.schema_version() == len(migrations())


def test_schema_newer_than_code_is_refused(dsn: str, schema: str) -> None:
    with connect(dsn) as conn:
        conn.execute(f'INSERT INTO "{schema}".schema_migrations (version, name) VALUES (999, %s)', ("future",))
        repo = Repository(conn, schema)
        with pytest.raises(SchemaTooNewError, match="upgrade tenure"):
            repo.migrate()
        with pytest.raises(SchemaTooNewError, match="upgrade tenure"):
            repo.check_schema()


def test_unmigrated_schema_is_refused_with_a_hint(dsn: str) -> None:
    with connect(dsn) as conn:
        with pytest.raises(SchemaTooNewError, match="tenure migrate"):
            Repository(conn, f"x_{uuid.uuid4().hex[:8]}").check_schema()


def _undo_0018(conn: object, schema: str) -> None:
    """Back to version 17: no workflows or batches."""
    for stmt in ("DROP TRIGGER jobs_workflow_changed ON {s}.jobs", "DROP INDEX {s}.jobs_waiting_idx",
                 "DROP TRIGGER job_history_completed_settle ON {s}.job_history",
                 "DROP FUNCTION {s}.workflow_job_changed, {s}.workflow_jobs_completed, {s}.batch_settle, "
                 "{s}.workflow_resume, {s}.workflow_settle",
                 "DROP TABLE {s}.workflow_deps, {s}.workflow_steps, {s}.workflows, {s}.batches",
                 "DROP VIEW {s}.all_jobs",
                 "ALTER TABLE {s}.job_history DROP COLUMN workflow_id, DROP COLUMN batch_id",
                 "ALTER TABLE {s}.jobs DROP COLUMN workflow_id, DROP COLUMN batch_id",
                 "CREATE VIEW {s}.all_jobs AS SELECT * FROM {s}.jobs UNION ALL SELECT * FROM {s}.job_history"):
        conn.execute(stmt.format(s=f'"{schema}"'))  # type: ignore[attr-defined]


def _undo_0017(conn: object, schema: str) -> None:
    """Back to version 16 (0018 undone first). An enum value cannot be dropped: `waiting` stays,
    and 0017 adds it only if it is missing."""
    _undo_0018(conn, schema)


def _undo_0016(conn: object, schema: str) -> None:
    """Back to version 15: no rollup of the charts (0017 undone first)."""
    _undo_0017(conn, schema)
    for table in ("queue_wait_periods", "queue_series_periods", "queue_series_rollups"):
        conn.execute(f'DROP TABLE "{schema}".{table}')  # type: ignore[attr-defined]


def _undo_0015(conn: object, schema: str) -> None:
    """Back to version 14: no unique keys (0016 undone first)."""
    _undo_0016(conn, schema)
    for stmt in ("DROP INDEX {s}.jobs_unique_key_idx", "DROP VIEW {s}.all_jobs",
                 "ALTER TABLE {s}.job_history DROP COLUMN unique_key, DROP COLUMN unique_states",
                 "ALTER TABLE {s}.jobs DROP COLUMN unique_key, DROP COLUMN unique_states",
                 "CREATE VIEW {s}.all_jobs AS SELECT * FROM {s}.jobs UNION ALL SELECT * FROM {s}.job_history"):
        conn.execute(stmt.format(s=f'"{schema}"'))  # type: ignore[attr-defined]


def _undo_0014(conn: object, schema: str) -> None:
    """Back to version 13: no rate limits, weights or flow_claim; keyed jobs in the priority index
    (0015 undone first)."""
    _undo_0015(conn, schema)
    for stmt in ("DROP FUNCTION {s}.flow_claim", "DROP FUNCTION {s}.rate_take",
                 "DROP TABLE {s}.rate_buckets", "DROP TABLE {s}.rate_limits",
                 "DROP INDEX {s}.flow_changes_rate_limit_idx", "ALTER TABLE {s}.flow_changes DROP COLUMN rate_limit",
                 "ALTER TABLE {s}.flow_changes ALTER COLUMN queue_name SET NOT NULL",
                 "ALTER TABLE {s}.flow_keys DROP COLUMN weight, DROP COLUMN deficit",
                 "ALTER TABLE {s}.flow_keys ALTER COLUMN running SET NOT NULL",
                 "ALTER TABLE {s}.queues DROP COLUMN flow_cursor",
                 "DROP INDEX {s}.jobs_flow_level_idx, {s}.jobs_rate_ready_idx, {s}.jobs_ready_priority_idx",
                 "CREATE INDEX jobs_ready_priority_idx ON {s}.jobs (queue_name, priority DESC, available_at, id) "
                 "WHERE status = 'pending'",
                 "DROP VIEW {s}.all_jobs",
                 "ALTER TABLE {s}.job_history DROP COLUMN rate_limit, DROP COLUMN rate_units",
                 "ALTER TABLE {s}.jobs DROP COLUMN rate_limit, DROP COLUMN rate_units",
                 "CREATE VIEW {s}.all_jobs AS SELECT * FROM {s}.jobs UNION ALL SELECT * FROM {s}.job_history"):
        conn.execute(stmt.format(s=f'"{schema}"'))  # type: ignore[attr-defined]


def _undo_0013(conn: object, schema: str) -> None:
    """Back to version 12: the move tasks of `tenure sqs` in its processes only (0014 undone first)."""
    _undo_0014(conn, schema)
    conn.execute(f'DROP TABLE "{schema}".sqs_move_tasks')  # type: ignore[attr-defined]


def _undo_0012(conn: object, schema: str) -> None:
    """Back to version 11: no queue depth samples (0013 undone first)."""
    _undo_0013(conn, schema)
    conn.execute(f'DROP TABLE "{schema}".queue_depth_samples')  # type: ignore[attr-defined]


def _undo_0011(conn: object, schema: str) -> None:
    """Back to version 10: no flow keys, per-key limits or their record (0013 and 0012 undone first)."""
    _undo_0012(conn, schema)
    for stmt in ("DROP TABLE {s}.flow_keys", "DROP TABLE {s}.flow_changes",
                 "ALTER TABLE {s}.queues DROP COLUMN per_key_running",
                 "DROP VIEW {s}.all_jobs", "ALTER TABLE {s}.job_history DROP COLUMN flow_key",
                 "ALTER TABLE {s}.jobs DROP COLUMN flow_key",
                 "CREATE VIEW {s}.all_jobs AS SELECT * FROM {s}.jobs UNION ALL SELECT * FROM {s}.job_history"):
        conn.execute(stmt.format(s=f'"{schema}"'))  # type: ignore[attr-defined]


def _undo_0009(conn: object, schema: str) -> None:
    """Back to version 8: no history table, view, keys table or partition functions."""
    _undo_0011(conn, schema)
    for stmt in ("DROP VIEW {s}.all_jobs", "DROP TABLE {s}.job_history", "DROP TABLE {s}.job_keys",
                 "DROP FUNCTION {s}.job_history_ensure", "DROP FUNCTION {s}.job_history_drop_oldest"):
        conn.execute(stmt.format(s=f'"{schema}"'))  # type: ignore[attr-defined]


def _undo_0004(conn: object, schema: str) -> None:
    """Back to version 3 (the enum value stays: 0004 adds it IF NOT EXISTS), undoing the later
    migrations first (0009: the history table; 0008: the job browser's indexes; 0006: the trace
    context; 0005: the tables of `tenure sqs`)."""
    _undo_0009(conn, schema)
    for stmt in ("DROP INDEX {s}.jobs_queue_id_idx, {s}.jobs_task_id_idx, {s}.jobs_finished_idx, {s}.jobs_created_idx, "
                 "{s}.jobs_payload_idx",
                 "ALTER TABLE {s}.jobs DROP COLUMN trace_context", "DROP TABLE {s}.sqs_queues", "DROP TABLE {s}.sqs_receipts", "DROP TABLE {s}.sqs_dedup",
                 "DROP TABLE {s}.sqs_secrets","DROP TABLE {s}.queues", "DROP TABLE {s}.periodic_schedules",
                 "ALTER TABLE {s}.jobs DROP COLUMN priority", "ALTER TABLE {s}.jobs DROP COLUMN cancelled_at"):
        conn.execute(stmt.format(s=f'"{schema}"'))  # type: ignore[attr-defined]


def test_an_older_schema_is_upgraded_in_order(dsn: str, schema: str) -> None:
    """A database at version 1 (before the registry recorded leases) gains migrations 2, 3, 4 and
    later only, in order."""
    with connect(dsn) as conn:
        _undo_0004(conn, schema)
        conn.execute(f'ALTER TABLE "{schema}".workers DROP COLUMN lease_seconds')
        conn.execute(f'DROP TABLE "{schema}".reaper_cycles')
        conn.execute(f'DELETE FROM "{schema}".schema_migrations WHERE version > 1')
        repo = Repository(conn, schema)
        with pytest.raises(SchemaTooNewError, match="tenure migrate"):
            repo.check_schema()
        assert repo.migrate() == list(range(2, len(migrations()) + 1))
        repo.check_schema()
        repo.worker_register("w", host="h", pid=1, queues=["q"], concurrency=1, heartbeat_seconds=1,
                             version="t", lease_seconds=30)
        assert repo.worker_list()[0]["lease_seconds"] == 30


def test_version_10_with_jobs_gains_flow_keys(dsn: str, schema: str) -> None:
    """0011 on a populated version-10 schema: existing jobs have no flow key and are claimed as
    before; a per-key limit then holds for new keyed jobs."""
    with connect(dsn) as conn:
        _undo_0011(conn, schema)
        conn.execute(f'DELETE FROM "{schema}".schema_migrations WHERE version > 10')
        conn.execute(f"INSERT INTO \"{schema}\".jobs (task) VALUES ('old')")
        repo = Repository(conn, schema)
        assert repo.migrate() == list(range(11, len(migrations()) + 1))
        repo.enqueue_many([JobSpec("new", flow_key="k"), JobSpec("new", flow_key="k")])
        repo.flow_per_key_set("default", 1, requested_by="test")
        assert sorted((j.task, j.flow_key) for j in repo.claim("w", ["default"], 10, 30)) == [
            ("new", "k"), ("old", None)]


def test_version_11_with_jobs_gains_depth_samples(dsn: str, schema: str) -> None:
    """0012 on a populated version-11 schema: a reaper's depth sample then records the queue."""
    from tenure.reaper.depth import DepthSampler
    with connect(dsn) as conn:
        _undo_0012(conn, schema)
        conn.execute(f'DELETE FROM "{schema}".schema_migrations WHERE version > 11')
        conn.execute(f"INSERT INTO \"{schema}\".jobs (task, queue_name) VALUES ('old', 'mail')")
        repo = Repository(conn, schema)
        assert repo.migrate() == list(range(12, len(migrations()) + 1))
        assert DepthSampler().run_once(repo) == 1
        row = conn.execute(f'SELECT queue_name, ready FROM "{schema}".queue_depth_samples').fetchone()
        assert row is not None and (row["queue_name"], row["ready"]) == ("mail", 1)


def test_version_3_with_jobs_gains_job_control(dsn: str, schema: str) -> None:
    """0004 on a populated version-3 schema: existing jobs get priority 0 and can be cancelled."""
    with connect(dsn) as conn:
        _undo_0004(conn, schema)
        conn.execute(f'DELETE FROM "{schema}".schema_migrations WHERE version > 3')
        conn.execute(f"INSERT INTO \"{schema}\".jobs (task) VALUES ('old')")
        repo = Repository(conn, schema)
        assert repo.migrate() == list(range(4, len(migrations()) + 1))
        job = repo.job_list()[0]
        assert job["priority"] == 0 and job["status"] == "pending"
        assert [r["previous_status"] for r in repo.cancel([job["id"]], "test")] == ["pending"]
