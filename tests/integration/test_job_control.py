"""Job control against a real PostgreSQL: priorities (and the starvation bound), pause/resume,
the global running limit inside the claim, cancel through the lease path, retry and listing."""

from __future__ import annotations

import uuid

import pytest

import tenure
from support.claimers import race_claimers
from tenure import control
from tenure.core.db import Connection, connect
from tenure.core.errors import ConfigError
from tenure.core.repository import JobSpec, Repository

pytestmark = pytest.mark.integration


def _events(repo: Repository, job_id: int) -> list[str]:
    return [e["event"] for e in repo.job_events(job_id)]


def _age(conn: Connection, schema: str, job_id: int, seconds: float) -> None:
    """Make a job look ready for `seconds` already (test setup only)."""
    conn.execute(f'UPDATE "{schema}".jobs SET available_at = now() - make_interval(secs => %s) WHERE id = %s',
                 (seconds, job_id))


def test_claim_orders_by_priority_higher_first(repo: Repository) -> None:
    low = repo.enqueue("t", priority=-5).id
    mid = repo.enqueue("t").id
    high = repo.enqueue("t", priority=10).id
    mid2 = repo.enqueue("t").id
    order = [j.id for j in repo.claim("w", ["default"], 10, 30)]
    assert order == [high, mid, mid2, low]
    assert [j.priority for j in repo.claim("w", ["default"], 10, 30)] == []


def test_priority_out_of_range_is_refused_before_any_write(repo: Repository) -> None:
    with pytest.raises(ConfigError, match="out of range"):
        repo.enqueue("t", priority=101)
    with pytest.raises(ConfigError, match="out of range"):
        repo.enqueue_many([JobSpec("t"), JobSpec("t", priority=-101)])
    with pytest.raises(ConfigError, match="integer"):
        repo.enqueue("t", priority=1.5)  # type: ignore[arg-type]
    assert repo.job_list() == []


def test_starvation_is_bounded_by_aging(repo: Repository, conn: Connection, schema: str) -> None:
    """A low-priority job ready longer than the aging bound is claimed before any fresh
    higher-priority job, however many of those keep arriving."""
    starving = repo.enqueue("t", priority=-100).id
    repo.enqueue_many([JobSpec("t", priority=100) for _ in range(50)])
    first = repo.claim("w", ["default"], 5, 30, aging=300)
    assert starving not in [j.id for j in first]  # young: priority order
    _age(conn, schema, starving, 301)
    second = repo.claim("w", ["default"], 5, 30, aging=300)
    assert second[0].id == starving
    assert all(j.priority == 100 for j in second[1:]) and len(second) == 5


def test_paused_queue_is_not_claimed_until_resumed(repo: Repository, conn: Connection, schema: str) -> None:
    a = repo.enqueue("t", queue="a").id
    b = repo.enqueue("t", queue="b").id
    row = control.set_paused(conn, "a", True, schema=schema, requested_by="test")
    assert row["paused"] and not row["was_paused"]
    assert [j.id for j in repo.claim("w", ["a", "b"], 10, 30)] == [b]
    assert control.set_paused(conn, "a", True, schema=schema)["was_paused"]  # idempotent
    control.set_paused(conn, "a", False, schema=schema)
    assert [j.id for j in repo.claim("w", ["a", "b"], 10, 30)] == [a]
    listed = {q["queue"]: q for q in control.list_queues(conn, schema=schema)}
    assert listed["a"]["paused"] is False and listed["a"]["running"] == 1


def test_max_running_caps_claims_across_workers(repo: Repository, conn: Connection, schema: str) -> None:
    repo.enqueue_many([JobSpec("t") for _ in range(10)])
    control.set_max_running(conn, "default", 3, schema=schema)
    first = repo.claim("w1", ["default"], 10, 30)
    assert len(first) == 3
    assert repo.claim("w2", ["default"], 10, 30) == []
    repo.complete_many("w1", [(first[0].id, first[0].lock_token)])
    assert len(repo.claim("w2", ["default"], 10, 30)) == 1
    control.set_max_running(conn, "default", 0, schema=schema)  # 0 removes the limit
    assert len(repo.claim("w2", ["default"], 10, 30)) == 6
    with pytest.raises(ConfigError):
        control.set_max_running(conn, "default", -1, schema=schema)


def test_limit_set_between_claims_is_honoured_in_queue_order(repo: Repository, conn: Connection,
                                                              schema: str) -> None:
    """A repository that claimed without a gate meets a limit set meanwhile: the ungated claim
    takes nothing, the gated one caps the limited queue and keeps the order of the queues; once
    the limit is gone every queue is claimed in full again."""
    a = [repo.enqueue("t", queue="a").id for _ in range(4)]
    b = [repo.enqueue("t", queue="b").id for _ in range(4)]
    assert [j.id for j in repo.claim("w", ["a", "b"], 1, 30)] == a[:1]  # no limit yet: ungated
    control.set_max_running(conn, "a", 2, schema=schema)
    assert [j.id for j in repo.claim("w", ["a", "b"], 3, 30)] == [a[1], *b[:2]]
    assert [j.id for j in repo.claim("w", ["a", "b"], 3, 30)] == b[2:]
    control.set_max_running(conn, "a", 0, schema=schema)
    assert [j.id for j in repo.claim("w", ["a", "b"], 3, 30)] == a[2:]
    assert repo.claim("w", ["a", "b"], 3, 30) == []


def test_max_running_holds_under_concurrent_claimers(dsn: str, schema: str) -> None:
    """8 claimers race for one queue limited to 5: the running count never exceeds 5."""
    with connect(dsn) as conn:
        Repository(conn, schema).enqueue_many([JobSpec("t") for _ in range(400)])
        control.set_max_running(conn, "default", 5, schema=schema)
    peaks = race_claimers(dsn, schema, claimers=8, batch=20, total=400,
                          sample_sql=f"SELECT count(*) AS n FROM \"{schema}\".jobs WHERE status = 'running'")
    assert peaks and max(peaks) <= 5
    assert max(peaks) >= 2  # the limit, not a lack of concurrency, held the count down


def test_cancel_pending_and_running_through_the_lease_path(repo: Repository, conn: Connection,
                                                          schema: str) -> None:
    pending = repo.enqueue("t", queue="p").id
    running = repo.enqueue("t").id
    done = repo.enqueue("t", queue="c").id
    [job] = repo.claim("w", ["default"], 1, 30)
    [cjob] = repo.claim("w", ["c"], 1, 30)
    repo.complete_many("w", [(cjob.id, cjob.lock_token)])

    report = tenure.cancel(conn, [pending, running, done], schema=schema, requested_by="alice")
    assert report.cancelled == [pending] and report.revoked == [running]
    assert report.skipped == {done: "completed"}
    assert repo.get_job(running)["status"] == "cancelled"  # type: ignore[index]
    # The owner's next heartbeat learns it; its later writes are rejected and audited.
    [hb] = repo.heartbeat("w", [(job.id, job.lock_token)], 30, 3600)
    assert hb.outcome == "cancelled"
    assert repo.complete_many("w", [(job.id, job.lock_token)]) == {job.id: False}
    assert not repo.retry("w", job.id, job.lock_token, delay=0, error="x", error_code="x")
    events = repo.job_events(running)
    cancel_event = next(e for e in events if e["event"] == "cancelled")
    assert cancel_event["detail"]["requested_by"] == "alice"
    assert cancel_event["detail"]["previous_status"] == "running"
    assert cancel_event["lock_token"] == job.lock_token  # the revoked token
    assert {"stale_completion_rejected", "stale_write_rejected"} <= {e["event"] for e in events}
    assert repo.get_job(running)["status"] == "cancelled"  # type: ignore[index]
    assert repo.claim("w", ["default", "p"], 10, 30) == []


def test_strict_cancel_changes_nothing_on_a_bad_id(repo: Repository, conn: Connection, schema: str) -> None:
    a = repo.enqueue("t").id
    with pytest.raises(ConfigError, match="no job 99999"):
        control.cancel(conn, [a, 99999], schema=schema, strict=True)
    assert repo.get_job(a)["status"] == "pending"  # type: ignore[index]
    control.cancel(conn, [a], schema=schema, strict=True)
    with pytest.raises(ConfigError, match="is cancelled"):
        control.cancel(conn, [a], schema=schema, strict=True)
    assert _events(repo, a).count("cancelled") == 1


def test_retry_puts_failed_and_cancelled_jobs_back(repo: Repository, conn: Connection, schema: str) -> None:
    a = repo.enqueue("t", max_attempts=1).id
    [job] = repo.claim("w", ["default"], 1, 30)
    assert repo.dead_letter("w", a, job.lock_token, error="boom", error_code="permanent")
    b = repo.enqueue("t").id
    control.cancel(conn, [b], schema=schema)
    c = repo.enqueue("t").id
    with pytest.raises(ConfigError, match=f"job {c} is pending"):
        control.retry(conn, [a, b, c], schema=schema)
    assert repo.get_job(a)["status"] == "failed"  # type: ignore[index]
    with pytest.raises(ConfigError, match="fails validation"):
        control.retry(conn, [a], schema=schema, validate=lambda row: "bad payload")
    assert control.retry(conn, [a, b], schema=schema, requested_by="bob") == [a, b]
    for i in (a, b):
        row = repo.get_job(i)
        assert row is not None and row["status"] == "pending" and row["attempt_count"] == 0
        assert "retried_by_request" in _events(repo, i)


def test_list_filters_and_pages(repo: Repository, conn: Connection, schema: str) -> None:
    ids = [repo.enqueue("t", queue="q1" if i % 2 else "q2").id for i in range(7)]
    repo.enqueue("other", queue="q1")
    control.cancel(conn, [ids[1]], schema=schema)
    page, cursor = control.list_jobs(conn, schema=schema, queue="q1", task="t", limit=2)
    assert [r["id"] for r in page] == [ids[5], ids[3]] and cursor == ids[3]
    page, cursor = control.list_jobs(conn, schema=schema, queue="q1", task="t", limit=2, cursor=cursor)
    assert [r["id"] for r in page] == [ids[1]] and cursor is None
    assert page[0]["status"] == "cancelled"
    cancelled, _ = control.list_jobs(conn, schema=schema, status="cancelled")
    assert [r["id"] for r in cancelled] == [ids[1]]
    recent, _ = control.list_jobs(conn, schema=schema, created_since=3600)
    assert len(recent) == 8
    assert control.list_jobs(conn, schema=schema, failed_since=3600)[0] == []
    with pytest.raises(ConfigError):
        control.list_jobs(conn, schema=schema, status="bogus")


def test_cancel_is_exported_and_unknown_schema_name_is_refused() -> None:
    assert tenure.cancel is control.cancel
    with pytest.raises(ConfigError):
        Repository(None, f"Bad-{uuid.uuid4().hex}")  # type: ignore[arg-type]


def test_prune_removes_old_cancelled_jobs_only(repo: Repository, conn: Connection, schema: str) -> None:
    old, fresh, pending = (repo.enqueue("t").id for _ in range(3))
    control.cancel(conn, [old, fresh], schema=schema)
    conn.execute(f"UPDATE \"{schema}\".jobs SET cancelled_at = now() - interval '8 days' WHERE id = %s", (old,))
    assert repo.prune_cancelled(7 * 86400) == 1
    assert repo.get_job(old) is None and repo.job_events(old) == []
    assert repo.get_job(fresh) is not None and repo.get_job(pending) is not None
