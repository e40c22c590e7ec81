"""The acknowledgement path on real PostgreSQL (issue 40): the completion statement pairs ids
with tokens by a join (one primary-key probe per id, no per-row array search), and the
heartbeat renews a finished job's lease while its completion waits on a lock, without waiting
for that lock itself."""

from __future__ import annotations

import re
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tenure.core.db import connect
from tenure.core.repository import JobSpec, Repository

pytestmark = pytest.mark.integration


def _generic_plan(conn: psycopg.Connection[Any], repo: Repository, ids: list[int], tokens: list[uuid.UUID]) -> str:
    """EXPLAIN ANALYZE of job_complete_many's generic plan (plan_cache_mode=force_generic_plan),
    rolled back."""
    text = repo._q["job_complete_many"]
    text = text.replace("%(ids)s", "$1").replace("%(tokens)s", "$2").replace("%(worker_id)s", "$3::text")
    name = f"complete_{uuid.uuid4().hex[:8]}"
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute(sql.SQL("PREPARE {} (bigint[], uuid[], text) AS ").format(sql.Identifier(name)) + sql.SQL(text))
    try:
        with conn.transaction(force_rollback=True):
            rows = conn.execute(sql.SQL(
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, BUFFERS OFF) EXECUTE {} ({}::bigint[], {}::uuid[], 'w')").format(
                sql.Identifier(name), sql.Literal(ids), sql.Literal([str(t) for t in tokens]))).fetchall()
    finally:
        conn.execute(sql.SQL("DEALLOCATE {}").format(sql.Identifier(name)))
        conn.execute("RESET plan_cache_mode")
    return "\n".join(next(iter(r.values())) if isinstance(r, dict) else r[0] for r in rows)


BACKLOG = 5_000
"""Pending jobs beside the running batch: a drain's table, not an empty one (on a table of a
page or two the planner rightly scans it whole instead of probing)."""


@pytest.mark.parametrize("batch", [100, 1000, 10_000])
def test_completion_is_one_primary_key_probe_per_id(conn: psycopg.Connection[Any], repo: Repository,
                                                    batch: int) -> None:
    """Before issue 40 each row's token was found by array_position over the whole batch
    (quadratic: a 193k backlog made one statement run for over 16 minutes)."""
    repo.enqueue_many([JobSpec("t", {"i": i, "customer": f"cus_{i:08d}"}) for i in range(batch + BACKLOG)])
    claimed = repo.claim("w", ["default"], batch, 600)
    assert len(claimed) == batch
    plan = _generic_plan(conn, repo, [j.id for j in claimed], [j.lock_token for j in claimed])
    assert "array_position" not in plan, plan
    delete = plan[plan.index("Delete on jobs j"):]
    unnest = re.search(r"->\s*Function Scan on d \(actual rows=([\d.]+) loops=(\d+)\)", delete)
    probe = re.search(r"->\s*Index Scan using jobs_pkey on jobs j \(actual rows=[\d.]+ loops=(\d+)\)\n\s*Index Cond: \(id = d\.id\)",
                      delete)
    assert unnest is not None and probe is not None, plan
    assert delete.index("Nested Loop") < unnest.start() < probe.start(), f"the batch drives the probes:\n{plan}"
    assert float(unnest.group(1)) == batch and unnest.group(2) == "1", "the batch is read once"
    assert int(probe.group(1)) == batch, f"one primary-key probe per id:\n{plan}"
    assert repo.get_job(claimed[0].id)["status"] == "running", "rolled back"  # type: ignore[index]


def test_the_heartbeat_skips_a_row_locked_by_a_pending_completion_and_renews_the_rest(
        dsn: str, schema: str, repo: Repository) -> None:
    """A completion blocked behind a lock holds its jobs' rows: the heartbeat must not wait for
    them (every other lease would go unrenewed), and must not call them lost."""
    repo.enqueue_many([JobSpec("t", {"i": i}) for i in range(2)])
    a, b = repo.claim("w", ["default"], 2, 600)
    with connect(dsn) as locker:
        locker.execute("BEGIN")
        locker.execute(f'SELECT 1 FROM "{schema}".jobs WHERE id = %s FOR UPDATE', (a.id,))
        result: list[Any] = []

        def beat() -> None:
            with connect(dsn) as c:
                result.extend(Repository(c, schema).heartbeat("w", [(a.id, a.lock_token), (b.id, b.lock_token)], 60, 3600))

        t = threading.Thread(target=beat)
        started = time.monotonic()
        t.start()
        t.join(timeout=10)
        elapsed = time.monotonic() - started
        locker.execute("ROLLBACK")
    assert not t.is_alive() and elapsed < 5, "the heartbeat did not wait for the locked row"
    outcomes = {o.id: o.outcome for o in result}
    assert outcomes == {a.id: "busy", b.id: "renewed"}


def test_a_finished_job_whose_completion_waits_keeps_its_lease(dsn: str, schema: str, repo: Repository) -> None:
    """The slow-database case end to end in one process: a lock on job_history holds the
    completion back for longer than the lease; the worker's heartbeat keeps the finished job's
    lease, the reaper cannot take it, and the completion lands once the lock goes."""
    from prometheus_client import CollectorRegistry

    from tenure.reaper.reaper import Reaper, ReaperConfig
    from tenure.worker.acker import Acker
    from tenure.worker.context import JobContext
    from tenure.worker.heartbeat import HeartbeatConfig, Heartbeater
    from tenure.worker.metrics import WorkerMetrics
    from tenure.worker.outcomes import Outcome
    from tenure.worker.slots import Slots

    repo.enqueue_many([JobSpec("t", {"i": i}) for i in range(3)])
    jobs = repo.claim("w", ["default"], 3, 2)
    repo.worker_register("w", host="h", pid=1, queues=["default"], concurrency=3, heartbeat_seconds=0.5,
                         version="test", lease_seconds=2)
    slots = Slots(3)
    metrics = WorkerMetrics(CollectorRegistry())
    ctxs = [JobContext(job=j, worker_id="w", lease_seconds=2, _repo=lambda **_: None,
                       _on_stale=lambda *_: None, _heartbeat_now=lambda: None) for j in jobs]
    slots.take_many(ctxs)
    beat = Heartbeater(HeartbeatConfig(lease=2, interval=0.5), dsn=dsn, schema=schema, worker_id="w",
                       slots=slots, metrics=metrics, on_lost=lambda *a, **k: None)
    acker = Acker(dsn=dsn, schema=schema, worker_id="w", slots=slots, metrics=metrics,
                  completed=lambda labels: metrics.completed.labels(*labels))
    reaper = Reaper(ReaperConfig(grace=0.5, interval=0.2), dsn=dsn, schema=schema, reaper_id="r")
    with connect(dsn) as locker:
        locker.execute("BEGIN")
        locker.execute(f'LOCK TABLE "{schema}".job_history IN ACCESS EXCLUSIVE MODE')
        beat.start()
        acker.start()
        for ctx in ctxs:
            slots.finish(ctx)
            acker.put(Outcome(ctx, "complete"))
        deadline = time.monotonic() + 5  # 2.5 leases of 2 s
        while time.monotonic() < deadline:
            assert reaper.run_once() == [], "a finished job is never reaped while its outcome waits"
            time.sleep(0.25)
        assert slots.unwritten == 3 and slots.free() == 0
        locker.execute("ROLLBACK")
    slots.wait_acked(time.monotonic() + 10)
    acker.stop()
    beat.stop()
    assert slots.unwritten == 0 and slots.processed == 3
    for j in jobs:
        row = repo.get_job(j.id)
        assert row is not None and row["status"] == "completed" and row["attempt_count"] == 1


def test_recording_a_lost_lease_does_not_wait_behind_a_lock_on_history(dsn: str, schema: str,
                                                                        repo: Repository) -> None:
    """The heartbeat records a lease it lost (here: a cancel) before renewing the rest; that
    record read job_history (all_jobs), so a lock there held every other lease unrenewed."""
    from tenure.worker.context import JobContext
    from tenure.worker.heartbeat import HeartbeatConfig, Heartbeater
    from tenure.worker.slots import Slots

    repo.enqueue_many([JobSpec("t", {"i": i}) for i in range(2)])
    jobs = repo.claim("w", ["default"], 2, 60)
    slots = Slots(2)
    lost: list[int] = []
    slots.take_many([JobContext(job=j, worker_id="w", lease_seconds=60, _repo=lambda **_: None,
                                _on_stale=lambda *_: None, _heartbeat_now=lambda: None) for j in jobs])
    beat = Heartbeater(HeartbeatConfig(lease=60, interval=1), dsn=dsn, schema=schema, worker_id="w",
                       slots=slots, metrics=None, on_lost=lambda ctx, *a, **k: lost.append(ctx.job.id))
    repo.cancel([jobs[0].id], "test")
    done = threading.Event()
    with connect(dsn) as locker:
        locker.execute("BEGIN")
        locker.execute(f'LOCK TABLE "{schema}".job_history IN ACCESS EXCLUSIVE MODE')
        t = threading.Thread(target=lambda: (beat.run_once(), done.set()))
        t.start()
        finished = done.wait(5)
        locker.execute("ROLLBACK")
        t.join(10)
    beat.stop()
    assert finished, "the heartbeat waited for the lock on job_history"
    assert lost == [jobs[0].id]
    events = [e["event"] for e in repo.job_events(jobs[0].id)]
    assert "heartbeat_lost" in events
