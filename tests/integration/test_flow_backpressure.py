"""Back-pressure from a handler against a real PostgreSQL (issue 38, item 4): ``job_rate_limited``
hands the job back without using its attempt, available after the delay by the database clock,
records a ``rate_limited`` event, and empties and pauses the named limit's bucket (the job's
key's for a per-key limit) in the same statement, as a CAS on the attempt's token: a stale
attempt changes nothing and its refused write is recorded. A paused bucket holds back every
other job that consumes it until the pause ends.

Rate limits and jobs' limits are set with plain SQL here, so this file tests the write alone."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from tenure.core.db import Connection
from tenure.core.repository import JobSpec, ReapDecision, Repository

pytestmark = pytest.mark.integration


def _rate(conn: Connection, schema: str, name: str, per_key: bool = False, per_second: float = 10) -> None:
    conn.execute(f'INSERT INTO "{schema}".rate_limits (name, per_second, burst, per_key) VALUES (%s, %s, 10, %s)',
                 (name, per_second, per_key))


def _buckets(conn: Connection, schema: str) -> dict[tuple[str, str], dict[str, Any]]:
    rows = conn.execute(f'SELECT b.*, now() AS db_now FROM "{schema}".rate_buckets b').fetchall()
    return {(str(r["limit_name"]), str(r["flow_key"])): dict(r) for r in rows}


def _seconds(delta: timedelta) -> float:
    return delta.total_seconds()


def test_the_attempt_is_handed_back_uncounted_and_the_bucket_paused(repo: Repository, conn: Connection,
                                                                     schema: str) -> None:
    _rate(conn, schema, "api")
    job_id = repo.enqueue("t", max_attempts=1).id
    [job] = repo.claim("w", ["default"], 1, 30)
    assert job.attempt == 1
    assert repo.rate_limit_known("api") and not repo.rate_limit_known("apj")
    assert repo.rate_limited("w", job_id, job.lock_token, delay=30, limit="api", reason="retry after 30s, limit api",
                             queue="default")
    row = repo.get_job(job_id)
    assert row is not None and row["status"] == "pending" and row["attempt_count"] == 0
    assert row["lock_token"] is None and row["locked_by"] is None and row["lease_expires_at"] is None
    assert 29 < _seconds(row["available_at"] - row["db_now"]) <= 30
    [event] = [e for e in repo.job_events(job_id) if e["event"] == "rate_limited"]
    assert event["lock_token"] == job.lock_token and event["worker_id"] == "w" and event["attempt"] == 0
    assert event["reason"] == "retry after 30s, limit api"
    assert event["detail"]["retry_after"] == 30 and event["detail"]["limit"] == "api"
    assert event["detail"]["fence"] == job.fence, "the event is the attempt's record"
    bucket = _buckets(conn, schema)[("api", "")]
    assert bucket["tokens"] == 0 and bucket["refilled_at"] == bucket["paused_until"]
    assert 29 < _seconds(bucket["paused_until"] - bucket["db_now"]) <= 30
    assert _seconds(bucket["paused_until"] - row["available_at"]) == 0, "one clock, one statement"
    assert repo.claim("w", ["default"], 1, 30) == [], "not available before the delay"


def test_without_a_limit_only_the_job_waits(repo: Repository, conn: Connection, schema: str) -> None:
    _rate(conn, schema, "api")
    job_id = repo.enqueue("t").id
    [job] = repo.claim("w", ["default"], 1, 30)
    assert repo.rate_limited("w", job_id, job.lock_token, delay=0, reason="retry after 0s")
    assert _buckets(conn, schema) == {}
    [event] = [e for e in repo.job_events(job_id) if e["event"] == "rate_limited"]
    assert event["detail"]["limit"] is None and event["detail"]["retry_after"] == 0
    [again] = repo.claim("w", ["default"], 1, 30)
    assert again.id == job_id and again.attempt == 1, "a delay of 0: claimable at once, the attempt not counted"


def test_a_per_key_limit_pauses_the_bucket_of_the_jobs_key(repo: Repository, conn: Connection, schema: str) -> None:
    _rate(conn, schema, "per-tenant", per_key=True)
    keyed = repo.enqueue("t", flow_key="tenant:a").id
    unkeyed = repo.enqueue("t").id
    jobs = {j.id: j for j in repo.claim("w", ["default"], 2, 30)}
    assert repo.rate_limited("w", keyed, jobs[keyed].lock_token, delay=60, limit="per-tenant")
    assert repo.rate_limited("w", unkeyed, jobs[unkeyed].lock_token, delay=5, limit="per-tenant")
    buckets = _buckets(conn, schema)
    assert set(buckets) == {("per-tenant", "tenant:a"), ("per-tenant", "")}
    assert 59 < _seconds(buckets["per-tenant", "tenant:a"]["paused_until"] - buckets["per-tenant", "tenant:a"]["db_now"])
    assert _seconds(buckets["per-tenant", ""]["paused_until"] - buckets["per-tenant", ""]["db_now"]) <= 5


def test_an_existing_bucket_is_emptied_and_a_longer_pause_kept(repo: Repository, conn: Connection,
                                                                 schema: str) -> None:
    _rate(conn, schema, "api")
    conn.execute(f'INSERT INTO "{schema}".rate_buckets (limit_name, tokens) VALUES (%s, 10)', ("api",))
    repo.enqueue_many([JobSpec("t") for _ in range(2)])
    a, b = repo.claim("w", ["default"], 2, 30)
    assert repo.rate_limited("w", a.id, a.lock_token, delay=60, limit="api")
    long_pause = _buckets(conn, schema)["api", ""]["paused_until"]
    assert repo.rate_limited("w", b.id, b.lock_token, delay=1, limit="api")
    bucket = _buckets(conn, schema)["api", ""]
    assert bucket["tokens"] == 0 and bucket["paused_until"] == long_pause == bucket["refilled_at"]


def test_a_stale_attempt_changes_nothing_and_its_refusal_is_recorded(repo: Repository, conn: Connection,
                                                                       schema: str) -> None:
    _rate(conn, schema, "api")
    job_id = repo.enqueue("t").id
    [a] = repo.claim("worker-a", ["default"], 1, 0.2)
    time.sleep(0.3)
    assert [r.id for r in repo.reap("r", grace=0, batch=10, decide=lambda c: ReapDecision(dead=False, delay=0))] \
        == [job_id]
    [b] = repo.claim("worker-b", ["default"], 1, 30)
    before = repo.get_job(job_id)
    assert not repo.rate_limited("worker-a", job_id, a.lock_token, delay=30, limit="api", queue="default")
    assert not repo.rate_limited("worker-a", job_id, b.lock_token, delay=30, limit="api"), "the token's worker too"
    after = repo.get_job(job_id)
    assert before is not None and after == {**before, "db_now": after["db_now"] if after else None}
    assert after is not None and after["lock_token"] == b.lock_token and after["attempt_count"] == 2
    assert _buckets(conn, schema) == {}, "no bucket paused"
    events = repo.job_events(job_id)
    assert "rate_limited" not in [e["event"] for e in events]
    refused = [e for e in events if e["event"] == "stale_write_rejected"]
    assert [(e["lock_token"], e["attempt"], e["detail"]["operation"]) for e in refused] \
        == [(a.lock_token, 1, "rate_limited"), (b.lock_token, 2, "rate_limited")]
    assert repo.complete_many("worker-b", [(job_id, b.lock_token)]) == {job_id: True}


def test_a_limit_deleted_meanwhile_pauses_nothing(repo: Repository, conn: Connection, schema: str) -> None:
    _rate(conn, schema, "gone")
    job_id = repo.enqueue("t").id
    [job] = repo.claim("w", ["default"], 1, 30)
    conn.execute(f'DELETE FROM "{schema}".rate_limits')
    assert repo.rate_limited("w", job_id, job.lock_token, delay=1, limit="gone")
    assert _buckets(conn, schema) == {}
    assert repo.get_job(job_id)["status"] == "pending"  # type: ignore[index]


def test_a_paused_bucket_holds_back_the_other_jobs_that_consume_it(repo: Repository, conn: Connection,
                                                                     schema: str) -> None:
    """2 tokens a second, refilled from the end of a 1 s pause: the first job goes 1.5 s after it."""
    _rate(conn, schema, "api", per_second=2)
    repo.enqueue_many([JobSpec("t", {"i": i}) for i in range(3)])
    free = repo.enqueue("t", {"free": True}, queue="other").id
    conn.execute(f"UPDATE \"{schema}\".jobs SET rate_limit = 'api' WHERE queue_name = 'default'")
    [first] = repo.claim("w", ["default"], 1, 30)
    paused = time.monotonic()
    assert repo.rate_limited("w", first.id, first.lock_token, delay=1.0, limit="api")
    assert repo.claim("w", ["default"], 3, 30) == [], "the bucket is paused: nothing that consumes it goes"
    assert [j.id for j in repo.claim("w", ["other"], 3, 30)] == [free], "a job without the limit is not held"
    got: list[Any] = []
    while not got and time.monotonic() - paused < 10:
        got = repo.claim("w", ["default"], 3, 30)
        time.sleep(0.02)
    waited = time.monotonic() - paused
    assert len(got) == 1 and 1.45 <= waited < 5, (got, waited)
    while len(got) < 3 and time.monotonic() - paused < 10:  # then one every half second
        got += repo.claim("w", ["default"], 3, 30)
        time.sleep(0.02)
    assert {j.id: j.attempt for j in got}[first.id] == 1, "the handed-back attempt was not counted"
    assert time.monotonic() - paused >= 2.45
