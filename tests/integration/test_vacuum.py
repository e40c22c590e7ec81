"""The hot table's vacuum (reaper/vacuum.py) against a real server: it vacuums when the dead rows
reach its thresholds, one caller per schema at a time, and never without them."""

from __future__ import annotations

import time

import pytest

from tenure.core.db import Connection, connect
from tenure.core.repository import JobSpec, Repository
from tenure.reaper.vacuum import HotTableVacuum, VacuumConfig

pytestmark = pytest.mark.integration

WORKER = "vacuum-worker"


def _churn(repo: Repository, n: int) -> None:
    """n jobs enqueued, claimed and completed: each leaves two dead row versions in jobs."""
    repo.enqueue_many([JobSpec("t", {"i": i}) for i in range(n)])
    claimed = repo.claim(WORKER, ("default",), n, 30.0)
    assert len(claimed) == n
    assert all(repo.complete_many(WORKER, [(j.id, j.lock_token) for j in claimed]).values())


def _dead_rows(repo: Repository, at_least: int) -> int:
    """The statistics' dead rows, once they show at least ``at_least`` (backends report them
    within about a second)."""
    deadline = time.monotonic() + 10
    while True:
        dead, _live, _may = repo.job_table_dead_rows()
        if dead >= at_least or time.monotonic() > deadline:
            return dead
        time.sleep(0.2)


def _last_vacuum(conn: Connection, schema: str) -> object:
    row = conn.execute("SELECT last_vacuum FROM pg_stat_user_tables WHERE relid = %s::regclass",
                       (f'"{schema}".jobs',)).fetchone()
    assert row is not None
    return row["last_vacuum"]


def test_vacuums_once_dead_rows_reach_the_threshold(repo: Repository, conn: Connection, schema: str) -> None:
    _churn(repo, 200)
    assert _dead_rows(repo, 300) >= 300
    keeper = HotTableVacuum(VacuumConfig(dead_rows=10_000))
    assert keeper.run_once(repo).vacuumed is False  # below the threshold: nothing runs
    assert _last_vacuum(conn, schema) is None

    cycle = HotTableVacuum(VacuumConfig(dead_rows=100, dead_fraction=0.0)).run_once(repo)
    assert cycle.vacuumed and cycle.dead >= 300
    assert _last_vacuum(conn, schema) is not None
    dead, _live, _may = repo.job_table_dead_rows()
    assert dead < 300  # the vacuum removed them (and reported so to the statistics)


def test_one_vacuumer_per_schema(repo: Repository, dsn: str, schema: str) -> None:
    _churn(repo, 100)
    _dead_rows(repo, 150)
    with connect(dsn) as other:
        taken = other.execute("SELECT pg_try_advisory_lock(hashtext('tenure-vacuum:' || %s)) AS taken, "
                              "pg_backend_pid() AS pid", (schema,)).fetchone()
        assert taken is not None and taken["taken"]
        assert repo.job_table_vacuum() is False  # another worker holds the schema's vacuum lock
    # The server ends a session shortly after its client closed it (later on a loaded machine).
    deadline = time.monotonic() + 10
    while repo.conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (taken["pid"],)).fetchone():
        assert time.monotonic() < deadline, "the other session never ended"
        time.sleep(0.05)
    assert repo.job_table_vacuum() is True  # its session ended, so the lock is free again

