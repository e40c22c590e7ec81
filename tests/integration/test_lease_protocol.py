"""The lease protocol against a real PostgreSQL: atomic claim, token fencing, heartbeats."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure
from tenure.core.db import connect
from tenure.core.repository import JobSpec, ReapDecision, Repository

pytestmark = pytest.mark.integration


def _reap_all(repo: Repository, grace: float = 0.0) -> list[int]:
    return [r.id for r in repo.reap("test-reaper", grace=grace, batch=1000,
                                    decide=lambda c: ReapDecision(dead=False, delay=0.0))]


def _events(repo: Repository, job_id: int) -> list[str]:
    return [e["event"] for e in repo.job_events(job_id)]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.integers(1, 300), claimers=st.integers(2, 8), batch=st.integers(1, 50))
def test_two_workers_never_hold_the_same_job(dsn: str, jobs: int, claimers: int, batch: int) -> None:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with connect(dsn) as conn:
        repo = Repository(conn, schema)
        repo.migrate()
        repo.enqueue_many([JobSpec("noop", {"i": i}) for i in range(jobs)])
    claims: list[tuple[int, uuid.UUID, str]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(claimers)

    def claimer(n: int) -> None:
        with connect(dsn) as c:
            r = Repository(c, schema)
            barrier.wait()
            while True:
                got = r.claim(f"w{n}", ["default"], batch, 30)
                if not got:
                    return
                with lock:
                    claims.extend((j.id, j.lock_token, f"w{n}") for j in got)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(claimers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        ids = Counter(c[0] for c in claims)
        assert len(ids) == jobs, "every job claimed"
        assert max(ids.values()) == 1, "no job claimed twice while leased"
        assert len({c[1] for c in claims}) == len(claims), "tokens are unique per claim"
        with connect(dsn) as c:
            rows = c.execute(f'SELECT id, locked_by, lock_token FROM "{schema}".jobs').fetchall()
        owner = {c[0]: (c[2], c[1]) for c in claims}
        assert all(owner[r["id"]] == (r["locked_by"], r["lock_token"]) for r in rows)
    finally:
        with connect(dsn) as c:
            c.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_claim_sets_lease_from_db_clock_and_fresh_token(repo: Repository) -> None:
    job_id = repo.enqueue("t", {"x": 1}).id
    [job] = repo.claim("w1", ["default"], 10, 30)
    row = repo.get_job(job_id)
    assert row is not None and row["status"] == "running"
    assert row["attempt_count"] == 1 and job.attempt == 1
    assert row["locked_by"] == "w1" and row["lock_token"] == job.lock_token
    lease = (row["lease_expires_at"] - row["started_at"]).total_seconds()
    assert lease == pytest.approx(30, abs=0.01)
    assert row["last_heartbeat_at"] == row["started_at"]
    assert repo.claim("w2", ["default"], 10, 30) == []


def test_fence_is_strictly_increasing_across_claims(repo: Repository) -> None:
    repo.enqueue("t")
    fences = []
    for _ in range(3):
        [job] = repo.claim("w", ["default"], 1, 30)
        fences.append(job.fence)
        assert repo.release("w", job.id, job.lock_token)
    assert fences == sorted(fences) and len(set(fences)) == 3


@pytest.mark.parametrize("stale_write", ["complete", "heartbeat", "retry", "dead_letter", "checkpoint"])
def test_stale_worker_cannot_write_after_its_lease_moved(repo: Repository, stale_write: str) -> None:
    """Seed 000 'Mengapa lock_token penting?': A claims, A's lease expires, B claims, A writes."""
    job_id = repo.enqueue("t").id
    [a] = repo.claim("worker-a", ["default"], 1, 0.2)
    time.sleep(0.3)
    assert _reap_all(repo) == [job_id]
    [b] = repo.claim("worker-b", ["default"], 1, 30)
    assert b.id == job_id and b.lock_token != a.lock_token
    before = repo.get_job(job_id)

    if stale_write == "complete":
        assert repo.complete_many("worker-a", [(job_id, a.lock_token)]) == {job_id: False}
    elif stale_write == "heartbeat":
        [outcome] = repo.heartbeat("worker-a", [(job_id, a.lock_token)], 30, 3600)
        assert outcome.outcome == "lost"
        repo.record_stale_write(job_id, a.lock_token, "worker-a", "heartbeat")  # what the heartbeater does
    elif stale_write == "retry":
        assert not repo.retry("worker-a", job_id, a.lock_token, delay=0, error="x", error_code="timeout")
    elif stale_write == "dead_letter":
        assert not repo.dead_letter("worker-a", job_id, a.lock_token, error="x", error_code="permanent")
    else:
        assert not repo.checkpoint("worker-a", job_id, a.lock_token, "step1", {})

    after = repo.get_job(job_id)
    assert after == {**before, "db_now": after["db_now"]} if after and before else False
    assert after["status"] == "running" and after["lock_token"] == b.lock_token and after["locked_by"] == "worker-b"
    events = _events(repo, job_id)
    if stale_write == "complete":
        assert "stale_completion_rejected" in events
    elif stale_write != "heartbeat":
        assert "stale_write_rejected" in events
    # Issue 12: the rejection names the stale attempt's own number (never null).
    [rejected] = [e for e in repo.job_events(job_id) if e["lock_token"] == a.lock_token
                  and e["event"] in ("stale_completion_rejected", "stale_write_rejected", "heartbeat_lost")]
    assert rejected["attempt"] == a.attempt == 1
    # B still owns it and can finish.
    assert repo.complete_many("worker-b", [(job_id, b.lock_token)]) == {job_id: True}
    assert events.count("completed") == 0 and _events(repo, job_id).count("completed") == 1


def test_heartbeat_renews_from_db_clock_in_one_statement(repo: Repository) -> None:
    repo.enqueue_many([JobSpec("t") for _ in range(5)])
    jobs = repo.claim("w", ["default"], 5, 1)
    time.sleep(0.2)
    outcomes = repo.heartbeat("w", [(j.id, j.lock_token) for j in jobs], 10, 3600)
    assert {o.outcome for o in outcomes} == {"renewed"}
    for j in jobs:
        row = repo.get_job(j.id)
        assert row is not None
        remaining = (row["lease_expires_at"] - row["db_now"]).total_seconds()
        assert 9 < remaining <= 10


def test_heartbeat_extension_is_bounded_by_max_total_lease(repo: Repository) -> None:
    """R4 / engram#1496: a hung handler with a live heartbeat cannot hold its job forever."""
    job_id = repo.enqueue("t").id
    [job] = repo.claim("w", ["default"], 1, 0.4)
    [first] = repo.heartbeat("w", [(job_id, job.lock_token)], 0.4, 0.6)
    assert first.outcome == "renewed"
    assert first.remaining_seconds is not None and first.remaining_seconds <= 0.6
    time.sleep(0.7)
    [late] = repo.heartbeat("w", [(job_id, job.lock_token)], 0.4, 0.6)
    assert late.outcome == "max_lease_reached"
    time.sleep(0.1)
    assert _reap_all(repo) == [job_id]


def test_complete_is_batched_and_rejects_only_stale_rows(repo: Repository) -> None:
    repo.enqueue_many([JobSpec("t") for _ in range(4)])
    jobs = repo.claim("w", ["default"], 4, 30)
    done = [(j.id, j.lock_token) for j in jobs[:3]] + [(jobs[3].id, uuid.uuid4())]
    result = repo.complete_many("w", done)
    assert [result[j.id] for j in jobs] == [True, True, True, False]
    assert repo.get_job(jobs[3].id)["status"] == "running"  # type: ignore[index]


def test_release_returns_job_without_using_an_attempt(repo: Repository) -> None:
    job_id = repo.enqueue("t").id
    [job] = repo.claim("w", ["default"], 1, 30)
    assert repo.release("w", job_id, job.lock_token)
    row = repo.get_job(job_id)
    assert row is not None and row["status"] == "pending" and row["attempt_count"] == 0
    assert row["lock_token"] is None and "released" in _events(repo, job_id)


def test_enqueue_idempotency_key_returns_existing_job(repo: Repository) -> None:
    first = repo.enqueue("send", {"a": 1}, idempotency_key="invoice:1:email:v1")
    second = repo.enqueue("send", {"a": 2}, idempotency_key="invoice:1:email:v1")
    assert first.created and not second.created and first.id == second.id
    assert repo.enqueue_many([JobSpec("send", idempotency_key="invoice:1:email:v1"),
                              JobSpec("send", idempotency_key="invoice:2:email:v1")]) == 1


def test_enqueue_in_callers_transaction_is_an_outbox(dsn: str, schema: str) -> None:
    """R17: the job exists only if the business transaction commits."""
    with connect(dsn, autocommit=False) as conn:
        tenure.enqueue(conn, "ship", {"order": 1}, schema=schema)
        conn.rollback()
        tenure.enqueue(conn, "ship", {"order": 2}, schema=schema)
        with connect(dsn) as other:
            assert other.execute(f'SELECT count(*) AS n FROM "{schema}".jobs').fetchone()["n"] == 0  # type: ignore[index]
        conn.commit()
    with connect(dsn) as other:
        rows = other.execute(f'SELECT payload FROM "{schema}".jobs').fetchall()
    assert [r["payload"] for r in rows] == [{"order": 2}]


def test_enqueue_notifies_listeners_on_commit(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{schema}_jobs"')
        with connect(dsn) as conn:
            Repository(conn, schema).enqueue("t", queue="emails")
        notes = list(listener.notifies(timeout=2, stop_after=1))
    assert [n.payload for n in notes] == ["emails"]


def test_delayed_job_is_not_claimed_early(repo: Repository) -> None:
    repo.enqueue("t", delay=0.5)
    assert repo.claim("w", ["default"], 1, 30) == []
    time.sleep(0.6)
    assert len(repo.claim("w", ["default"], 1, 30)) == 1


def test_queue_stats_reports_lease_health(repo: Repository) -> None:
    repo.enqueue_many([JobSpec("t") for _ in range(3)] + [JobSpec("t", delay=60)])
    jobs = repo.claim("w", ["default"], 2, 0.1)
    time.sleep(0.3)
    [s] = repo.queue_stats("default")
    assert (s.ready, s.scheduled, s.running, s.running_expired) == (1, 1, 2, 2)
    assert s.oldest_running_age_seconds >= 0.3 and s.heartbeat_lag_max_seconds >= 0.3
    assert repo.queue_stats("other") == []
    assert jobs


def test_outbox_enqueue_counts_dedup_checks_and_hits(dsn: str, schema: str) -> None:
    from prometheus_client import REGISTRY
    labels = {"queue": "default", "task": "dedup_probe", "source": "enqueue"}
    before = REGISTRY.get_sample_value("tenure_dedup_hits_total", labels) or 0.0
    with connect(dsn) as conn:
        for _ in range(3):
            tenure.enqueue(conn, "dedup_probe", {}, schema=schema, idempotency_key="probe:1:v1")
    assert REGISTRY.get_sample_value("tenure_dedup_checks_total", labels) >= 3
    assert REGISTRY.get_sample_value("tenure_dedup_hits_total", labels) == before + 2


def test_queue_stats_reports_queues_with_only_completed_jobs(repo: Repository) -> None:
    repo.enqueue("t", queue="done_only")
    [job] = repo.claim("w", ["done_only"], 1, 30)
    repo.complete_many("w", [(job.id, job.lock_token)])
    [s] = repo.queue_stats("done_only")
    assert (s.queue, s.completed, s.ready, s.running) == ("done_only", 1, 0, 0)
    assert repo.queue_stats("done_only", completed=False) == []
    assert repo.queue_stats(completed={"done_only": 7})[0].completed == 7


def test_queue_stats_keeps_reaped_totals_of_a_queue_with_only_completed_jobs(repo: Repository) -> None:
    repo.enqueue("t", queue="recovered")
    repo.claim("dead", ["recovered"], 1, 0.05)
    time.sleep(0.1)
    assert len(_reap_all(repo)) == 1
    [job] = repo.claim("alive", ["recovered"], 1, 30)
    repo.complete_many("alive", [(job.id, job.lock_token)])
    [s] = repo.queue_stats("recovered")
    assert (s.completed, s.reaped_total, s.running) == (1, 1, 0)
