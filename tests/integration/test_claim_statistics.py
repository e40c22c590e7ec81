"""A starting worker refreshes the jobs table's statistics after a bulk enqueue (issue 13).

Without them the planner serves the claim's priority lane by sorting every pending row; with
them it reads the first ``limit`` rows of jobs_ready_priority_idx (docs/performance.md)."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry

from tenure import App, JobContext
from tenure.core.db import Connection, connect
from tenure.core.repository import JobSpec, Repository
from tenure.worker.runtime import Worker, WorkerConfig

pytestmark = pytest.mark.integration


def _flush_stats(conn: Connection) -> None:
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")  # the flush happens at the end of a statement's transaction


def _last_analyze(conn: Connection, schema: str) -> object:
    row = conn.execute("SELECT last_analyze FROM pg_stat_user_tables WHERE relid = to_regclass(%s)",
                       (f'"{schema}".jobs',)).fetchone()
    return row["last_analyze"] if row else None


def _claim_plan(repo: Repository, conn: Connection) -> str:
    params = {"queues": ["default"], "limit": 100, "lease": 30.0, "worker_id": "w", "aging": 300.0,
              "gated": False}
    rows = conn.execute("EXPLAIN (COSTS OFF) " + repo._q["job_claim"], params).fetchall()
    return "\n".join(str(next(iter(r.values()))) for r in rows)


def test_stale_statistics_are_refreshed_once_and_the_claim_reads_the_priority_index(
        conn: Connection, repo: Repository, schema: str) -> None:
    repo.enqueue_many([JobSpec("t", {}) for _ in range(3000)])
    _flush_stats(conn)
    assert _last_analyze(conn, schema) is None
    assert repo.refresh_stale_claim_statistics() is True
    assert _last_analyze(conn, schema) is not None
    _flush_stats(conn)
    assert repo.refresh_stale_claim_statistics() is False, "fresh statistics are not analyzed again"
    plan = _claim_plan(repo, conn)
    assert "jobs_ready_priority_idx" in plan, plan


def test_small_changes_leave_the_statistics_alone(conn: Connection, repo: Repository) -> None:
    repo.enqueue_many([JobSpec("t", {}) for _ in range(50)])
    _flush_stats(conn)
    assert repo.refresh_stale_claim_statistics() is False


def test_a_starting_worker_refreshes_them(dsn: str, conn: Connection, repo: Repository, schema: str) -> None:
    app = App()

    @app.task("t")
    def t(ctx: JobContext) -> None:
        return None

    repo.enqueue_many([JobSpec("t", {}) for _ in range(2000)])
    _flush_stats(conn)
    worker = Worker(app, WorkerConfig(concurrency=8, poll_interval=0.05, burst=True), dsn=dsn, schema=schema,
                    registry=CollectorRegistry())
    assert worker.run() == 2000
    assert _last_analyze(conn, schema) is not None


def test_workers_starting_together_analyze_once(dsn: str, conn: Connection, repo: Repository,
                                                schema: str) -> None:
    """The second starter waits behind the first one's analysis, looks again and skips its own."""
    repo.enqueue_many([JobSpec("t", {}) for _ in range(3000)])
    _flush_stats(conn)
    results: list[bool] = []
    with connect(dsn) as first, connect(dsn) as second:
        with first.transaction():
            Repository(first, schema)._rows("job_table_analyze_lock", {"schema": schema})
            second_pid = second.info.backend_pid
            waiter = threading.Thread(
                target=lambda: results.append(Repository(second, schema).refresh_stale_claim_statistics()))
            waiter.start()
            deadline = time.monotonic() + 5
            while not conn.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted "
                                   "AND locktype = 'advisory') AS w", (second_pid,)).fetchone()["w"]:
                assert time.monotonic() < deadline, "the second starter never waited for the first"
                time.sleep(0.005)
            Repository(first, schema)._rows("job_table_analyze")
        waiter.join(timeout=5)
    assert results == [False], "statistics fresh behind the lock: not analyzed a second time"
    assert _last_analyze(conn, schema) is not None
