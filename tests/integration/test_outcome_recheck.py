"""Re-checking acknowledged outcomes after a reconnect (issue 22, item 8), on real PostgreSQL.

A failover with asynchronous replication is simulated by undoing, between the acknowledgement
and the reconnect, exactly what the lost transaction wrote: the job row goes back to running
under the attempt's token and its ``completed`` event disappears (the claim replicated, the
completion did not), or the execution-store row is deleted (its claim and success never reached
the replica).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tenure import App, JobContext
from tenure.core.db import Connection, connect
from tenure.core.repository import Repository
from tenure.worker.heartbeat import HeartbeatConfig
from tenure.worker.metrics import WorkerMetrics
from tenure.worker.recheck import OutcomeRecheck, RecheckConfig
from tenure.worker.runtime import Worker, WorkerConfig

pytestmark = pytest.mark.integration

WORKER = "recheck-worker"


def _lose_completion(conn: Connection, schema: str, job_id: int, token: uuid.UUID, *, still_running: bool) -> None:
    """What the promoted replica holds when the completion was not replicated."""
    conn.execute(f'DELETE FROM "{schema}".job_events WHERE job_id = %s AND event = \'completed\'', (job_id,))
    # The completion moved the job into job_history (0009): the replica still has it in jobs.
    conn.execute(f'WITH h AS (DELETE FROM "{schema}".job_history WHERE id = %s RETURNING *) '
                 f'INSERT INTO "{schema}".jobs OVERRIDING SYSTEM VALUE SELECT * FROM h', (job_id,))
    if still_running:
        conn.execute(f'UPDATE "{schema}".jobs SET status = \'running\', completed_at = NULL, lock_token = %s, '
                     f'locked_by = %s, lease_expires_at = now() + interval \'30 seconds\' WHERE id = %s',
                     (token, WORKER, job_id))
    else:  # the lease ran out on the new primary and the reaper handed the job back
        conn.execute(f'UPDATE "{schema}".jobs SET status = \'pending\', completed_at = NULL, lock_token = NULL, '
                     f'locked_by = NULL, lease_expires_at = NULL WHERE id = %s', (job_id,))


def _count(registry: CollectorRegistry, kind: str, resolution: str) -> float:
    value = registry.get_sample_value("tenure_worker_outcomes_in_doubt_total",
                                      {"kind": kind, "resolution": resolution})
    return value or 0.0


def test_recheck_rewrites_marks_in_doubt_and_leaves_kept_outcomes(conn: Connection, schema: str,
                                                                   repo: Repository) -> None:
    for n in range(3):
        repo.enqueue("t", {"n": n})
    claimed = repo.claim(WORKER, ("default",), 3, 30.0)
    assert len(claimed) == 3
    a, b, c = claimed
    done = [(j.id, j.lock_token) for j in claimed]
    assert all(repo.complete_many(WORKER, done).values())
    for key, job in (("k:a", a), ("k:c", c)):
        assert repo.execution_claim(key, job.id, job.lock_token, 30.0)["outcome"] == "claimed"
        assert repo.execution_succeed(key, job.lock_token, f"ref-{key}")

    registry = CollectorRegistry()
    recheck = OutcomeRecheck(RecheckConfig(remember=16), worker_id=WORKER,
                             counter=WorkerMetrics(registry).outcomes_in_doubt)
    recheck.completed(done)
    recheck.effect_succeeded("k:a", a.id, a.lock_token)
    recheck.effect_succeeded("k:c", c.id, c.lock_token)
    assert recheck.run_once(repo).checked == 0, "no reconnect yet: nothing to re-check"

    _lose_completion(conn, schema, a.id, a.lock_token, still_running=True)
    _lose_completion(conn, schema, b.id, b.lock_token, still_running=False)
    conn.execute(f'DELETE FROM "{schema}".job_executions WHERE idempotency_key = %s', ("k:a",))
    recheck.epoch_ended()
    assert recheck.pending
    result = recheck.run_once(repo)

    assert result.checked == 5
    assert [x.job_id for x in result.rewritten] == [a.id]
    assert [x.job_id for x in result.completions_in_doubt] == [b.id]
    assert [x.key for x in result.effects_in_doubt] == ["k:a"]
    assert repo.get_job(a.id)["status"] == "completed"  # type: ignore[index]
    assert repo.get_job(b.id)["status"] == "pending"  # type: ignore[index]
    # The lost effect is in doubt: the next attempt reconciles instead of running it as new.
    assert repo.execution_claim("k:a", a.id, uuid.uuid4(), 30.0)["outcome"] == "in_doubt"
    assert repo.execution_claim("k:c", c.id, uuid.uuid4(), 30.0)["outcome"] == "already_succeeded"
    assert _count(registry, "completion", "rewritten") == 1
    assert _count(registry, "completion", "in_doubt") == 1
    assert _count(registry, "effect", "in_doubt") == 1
    assert not recheck.pending and recheck.run_once(repo).checked == 0


def test_recheck_remembers_only_the_last_n(repo: Repository) -> None:
    recheck = OutcomeRecheck(RecheckConfig(remember=2), worker_id=WORKER)
    recheck.completed([(i, uuid.uuid4()) for i in range(5)])
    recheck.epoch_ended()
    assert recheck.run_once(repo).checked == 2


def test_recheck_leaves_a_key_held_by_another_live_claim(conn: Connection, schema: str, repo: Repository) -> None:
    mine, theirs = uuid.uuid4(), uuid.uuid4()
    assert repo.execution_claim("k:x", 1, theirs, 30.0)["outcome"] == "claimed"  # the new attempt, live
    recheck = OutcomeRecheck(worker_id=WORKER)
    recheck.effect_succeeded("k:x", 1, mine)
    recheck.epoch_ended()
    assert [e.key for e in recheck.run_once(repo).effects_in_doubt] == ["k:x"]
    row = repo.execution_get("k:x")
    assert row is not None and row["status"] == "processing" and row["lock_token"] == theirs


def test_worker_rewrites_a_completion_lost_across_its_reconnect(dsn: str, schema: str, repo: Repository) -> None:
    """End to end: the acker's connection dies after a completion was acknowledged and the
    completion is undone; the worker's next write reconnects, re-checks and writes it again."""
    app = App()
    acked = threading.Event()
    release = threading.Event()

    @app.task("t")
    def t(ctx: JobContext) -> None:
        if ctx.payload["n"] == 1:
            release.wait(30)

    registry = CollectorRegistry()
    config = WorkerConfig(concurrency=2, poll_interval=0.05, heartbeat=HeartbeatConfig(lease=30, interval=1))
    worker = Worker(app, config, dsn=dsn, schema=schema, registry=registry, worker_id=WORKER)
    original = worker.acker.recheck.completed

    def completed(done: list[tuple[int, uuid.UUID]]) -> None:
        original(done)
        if done:
            acked.set()

    worker.acker.recheck.completed = completed  # type: ignore[method-assign]
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        first = repo.enqueue("t", {"n": 0})
        assert acked.wait(30), "the first completion was never acknowledged"
        token = _completion_token(repo, first.id)
        with connect(dsn) as admin:
            _lose_completion(admin, schema, first.id, token, still_running=True)
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                          (f"tenure-ack:{WORKER}",))
        repo.enqueue("t", {"n": 1})
        release.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _count(registry, "completion", "rewritten") < 1:
            time.sleep(0.1)
        assert _count(registry, "completion", "rewritten") == 1
        row: Any = repo.get_job(first.id)
        assert row["status"] == "completed"
        assert [e["lock_token"] for e in repo.job_events(first.id) if e["event"] == "completed"] == [token]
    finally:
        release.set()
        worker.request_stop()
        thread.join(timeout=60)


def _completion_token(repo: Repository, job_id: int) -> uuid.UUID:
    tokens = [e["lock_token"] for e in repo.job_events(job_id) if e["event"] == "completed"]
    assert len(tokens) == 1
    return uuid.UUID(str(tokens[0]))
