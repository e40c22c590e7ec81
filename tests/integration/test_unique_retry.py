"""Putting failed or cancelled jobs back to pending when another live job holds their unique key
(docs/unique.md, "Limits"), against a real PostgreSQL: `tenure jobs retry` (control.retry,
all-or-nothing), bulk retries and DLQ replays (the others move, the held ones are reported with
their holder), dry runs, two jobs of one call with one key, and a holder committed by a
concurrent transaction after the statement's snapshot."""

from __future__ import annotations

import threading

import pytest

from tenure import control
from tenure.core.db import Connection, connect
from tenure.core.errors import UniqueKeyHeldError
from tenure.core.repository import JobFilter, Repository
from tenure.core.unique import Unique

pytestmark = pytest.mark.integration

BY_CUSTOMER = Unique(by=["customer_id"])


def _dead(repo: Repository, customer: int) -> int:
    """A job with a unique key, dead-lettered (its key is free again with the default states)."""
    job = repo.enqueue("sync", {"customer_id": customer}, max_attempts=1, unique=BY_CUSTOMER).id
    [claimed] = repo.claim("w", ["default"], 1, 30)
    assert claimed.id == job and repo.dead_letter("w", job, claimed.lock_token, error="x", error_code="x")
    return job


def _status(repo: Repository, job: int) -> str:
    row = repo.get_job(job)
    assert row is not None
    return str(row["status"])


def test_retry_of_a_job_whose_key_is_held_names_both_and_changes_nothing(conn: Connection, repo: Repository,
                                                                           schema: str) -> None:
    held = _dead(repo, 1)
    free = _dead(repo, 2)
    holder = repo.enqueue("sync", {"customer_id": 1}, unique=BY_CUSTOMER).id
    with pytest.raises(UniqueKeyHeldError) as caught:
        control.retry(conn, [held, free], schema=schema)
    assert str(caught.value) == (f"job {held} not retried: its unique key held by job {holder} (pending); "
                                 "cancel or finish the holder first")
    assert (_status(repo, held), _status(repo, free)) == ("failed", "failed")  # all or nothing
    assert control.retry(conn, [free], schema=schema) == [free]
    repo.cancel([holder], "test")  # the key is free again: the retry goes through
    assert control.retry(conn, [held], schema=schema) == [held]


def test_cancelled_jobs_and_two_of_one_call_with_one_key(conn: Connection, repo: Repository, schema: str) -> None:
    first = repo.enqueue("sync", {"customer_id": 1, "v": 1}, unique=BY_CUSTOMER).id
    repo.cancel([first], "test")
    second = repo.enqueue("sync", {"customer_id": 1, "v": 2}, unique=BY_CUSTOMER).id
    repo.cancel([second], "test")
    plain = repo.enqueue("sync", {"customer_id": 1}).id  # no key: never held
    repo.cancel([plain], "test")
    moved, held = repo.retry_jobs_held([first, second, plain], "test")
    assert moved == [first, plain]
    assert held == {second: f"unique key held by job {first} (pending)"}
    assert _status(repo, second) == "cancelled"
    with pytest.raises(UniqueKeyHeldError, match=f"job {second} not retried: its unique key held by job {first}"):
        control.retry(conn, [second], schema=schema)


def test_bulk_retry_moves_the_others_and_reports_the_held(conn: Connection, repo: Repository, schema: str) -> None:
    jobs = [_dead(repo, c) for c in (1, 2, 3)]
    holder = repo.enqueue("sync", {"customer_id": 2}, unique=BY_CUSTOMER).id
    report = control.bulk_matching(conn, "retry", JobFilter(task="sync"), schema=schema)
    assert (report.matched, report.changed) == (3, 2)
    assert report.skipped == {jobs[1]: f"unique key held by job {holder} (pending)"}
    assert [_status(repo, j) for j in jobs] == ["pending", "failed", "pending"]
    again = control.bulk_matching(conn, "retry", JobFilter(), schema=schema, ids=[jobs[1]])
    assert (again.changed, again.skipped) == (0, report.skipped)
    assert control.bulk_matching(conn, "retry", JobFilter(), schema=schema, ids=jobs).matched == 1


def test_dlq_replay_skips_held_keys_in_dry_runs_and_real_runs(conn: Connection, repo: Repository,
                                                              schema: str) -> None:
    jobs = [_dead(repo, c) for c in (1, 2)]
    holder = repo.enqueue("sync", {"customer_id": 1}, unique=BY_CUSTOMER).id
    why = f"unique key held by job {holder} (pending)"
    dry = control.replay_matching(conn, control.DlqFilter(), schema=schema, rate=1000, dry_run=True)
    assert (dry.replayed, dry.skipped) == ([jobs[1]], [(jobs[0], why)])
    report = control.replay_matching(conn, control.DlqFilter(), schema=schema, rate=1000)
    assert (report.replayed, report.skipped) == ([jobs[1]], [(jobs[0], why)])
    assert not control.held_only(report)
    for flt in (control.DlqFilter(), JobFilter(task="sync")):
        rerun = control.replay_matching(conn, flt, schema=schema, rate=1000)
        assert (rerun.replayed, rerun.skipped) == ([], [(jobs[0], why)]) and control.held_only(rerun)
    assert [_status(repo, j) for j in jobs] == ["failed", "pending"]
    events = conn.execute(f'SELECT event FROM "{schema}".job_events WHERE job_id = %s ORDER BY id',
                          (jobs[0],)).fetchall()
    assert "replayed_from_dead_letter" not in [e["event"] for e in events]


def test_two_dead_letters_with_one_key_replay_once(conn: Connection, repo: Repository, schema: str) -> None:
    first = _dead(repo, 1)
    second = _dead(repo, 1)  # the first left the index when it dead-lettered
    dry = control.replay_matching(conn, control.DlqFilter(), schema=schema, rate=1000, dry_run=True)
    assert dry.replayed == [first] and [i for i, _ in dry.skipped] == [second]
    report = control.replay_matching(conn, control.DlqFilter(), schema=schema, rate=1000)
    assert report.replayed == [first]
    assert report.skipped == [(second, f"unique key held by job {first} (pending)")]


def test_a_holder_committed_after_the_snapshot_is_skipped_not_an_error(dsn: str, conn: Connection,
                                                                       repo: Repository, schema: str) -> None:
    """A concurrent enqueue inserts the key but has not committed when the retry runs: the
    retry's NOT EXISTS cannot see it, its update waits on the index entry, the enqueue commits
    and the index refuses the move; the repository runs the statement again, which now sees the
    holder and leaves the job out."""
    job = _dead(repo, 1)
    other = connect(dsn, autocommit=False)
    try:
        holder = Repository(other, schema).enqueue("sync", {"customer_id": 1}, unique=BY_CUSTOMER).id
        result: list[object] = []
        worker = threading.Thread(target=lambda: result.append(_retry_in_thread(dsn, schema, job)))
        worker.start()
        worker.join(1.0)
        assert worker.is_alive()  # waiting on the uncommitted index entry
        other.commit()
        worker.join(30)
    finally:
        other.close()
    assert result == [([], {job: f"unique key held by job {holder} (pending)"})]
    assert _status(repo, job) == "failed"


def _retry_in_thread(dsn: str, schema: str, job: int) -> object:
    with connect(dsn) as conn:
        return Repository(conn, schema).retry_jobs_held([job], "test")
