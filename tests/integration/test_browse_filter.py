"""The job browser's filter on status and on "finished since", as rewritten for the partial indexes
(one literal per status; finished as per-status ranges): the same jobs as the plain definitions,
on jobs taken through the real claim, completion, dead-letter, cancel and retry paths."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tenure.core.repository import JobFilter, Repository

pytestmark = pytest.mark.integration

STATUSES = ("pending", "running", "completed", "failed", "cancelled")


def _ids(repo: Repository, flt: JobFilter) -> set[int]:
    return {int(str(r["id"])) for r in repo.job_browse(flt, limit=100)}


@pytest.fixture
def jobs(repo: Repository) -> dict[str, int]:
    """One job in each state, plus a dead-lettered job retried back to pending (its failed_at cleared)."""
    made = {name: repo.enqueue("browse.t", {"name": name}, queue="browse").id
            for name in ("completed", "failed", "retried", "cancelled", "running", "pending")}
    claimed = {c.id: c for c in repo.claim("w1", ["browse"], 5, 30.0)}
    assert set(claimed) == {made[n] for n in ("completed", "failed", "retried", "cancelled", "running")}
    assert repo.complete_many("w1", [(made["completed"], claimed[made["completed"]].lock_token)])
    for name in ("failed", "retried"):
        assert repo.dead_letter("w1", made[name], claimed[made[name]].lock_token, error="boom", error_code="E")
    repo.cancel([made["cancelled"]], "tester")
    assert repo.retry_jobs([made["retried"]], "tester") == [made["retried"]]
    return made


def test_each_status_matches_exactly_its_jobs(repo: Repository, jobs: dict[str, int]) -> None:
    expected = {"pending": {jobs["pending"], jobs["retried"]}, "running": {jobs["running"]},
                "completed": {jobs["completed"]}, "failed": {jobs["failed"]}, "cancelled": {jobs["cancelled"]}}
    for status in STATUSES:
        assert _ids(repo, JobFilter(status=status)) == expected[status], status
    assert _ids(repo, JobFilter(status="no-such-status")) == set()


def test_finished_since_is_the_terminal_jobs_in_the_window(repo: Repository, jobs: dict[str, int]) -> None:
    finished = {jobs["completed"], jobs["failed"], jobs["cancelled"]}
    hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    assert _ids(repo, JobFilter(finished_after=hour_ago)) == finished
    assert _ids(repo, JobFilter(finished_within=3600.0)) == finished
    later = datetime.now(timezone.utc) + timedelta(minutes=5)
    assert _ids(repo, JobFilter(finished_after=later)) == set()
    assert _ids(repo, JobFilter(finished_after=hour_ago, status="failed")) == {jobs["failed"]}


def test_payload_filter_finds_jobs_in_every_state(conn: object, repo: Repository, jobs: dict[str, int]) -> None:
    """The payload index leaves running rows out (0010: a claim writes none of its entries); the
    filter still finds a running job, and reads jobs through the two indexes, not a scan."""
    for name, job_id in jobs.items():
        assert _ids(repo, JobFilter(payload=f'{{"name": "{name}"}}')) == {job_id}, name
    assert _ids(repo, JobFilter(payload='{"name": "nobody"}')) == set()
    index = conn.execute(  # type: ignore[attr-defined]
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = 'jobs_payload_idx'",
        (repo.schema,)).fetchone()
    assert index is not None and "WHERE (status <> 'running'" in next(iter(index.values())), index
    conn.execute("SET enable_seqscan = off")  # type: ignore[attr-defined]
    try:
        plan = "\n".join(next(iter(r.values())) for r in conn.execute(  # type: ignore[attr-defined]
            "EXPLAIN " + repo._q["job_browse"], {**JobFilter(payload='{"name": "running"}').params(),
                                                   "before_id": None, "limit": 50}).fetchall())
    finally:
        conn.execute("RESET enable_seqscan")  # type: ignore[attr-defined]
    assert "jobs_payload_idx" in plan and "Index Scan on jobs_running_" in plan and "Seq Scan on jobs" not in plan, plan
