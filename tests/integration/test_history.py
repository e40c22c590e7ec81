"""Where finished jobs live (0009): completions move jobs into job_history's day partitions,
readers see both tables, keys keep deduplicating, pre-0009 rows move in batches, retention drops
whole partitions; `jobs`, `job_history` and `all_jobs` keep the same columns."""

from __future__ import annotations

import argparse
import re
import uuid

import pytest

from tenure.cli.history import cmd_history_move
from tenure.cli.prune import cmd_prune
from tenure.core.db import Connection
from tenure.core.queries import named_queries
from tenure.core.repository import JobFilter, Repository

pytestmark = pytest.mark.integration

WORKER = "history-worker"


def _where(conn: Connection, schema: str, job_id: int) -> str:
    """The table that holds the job's row: jobs, job_history_default or a day partition."""
    row = conn.execute(f'SELECT tableoid::regclass::text AS t FROM "{schema}".jobs WHERE id = %s '
                       f'UNION ALL SELECT tableoid::regclass::text FROM "{schema}".job_history WHERE id = %s',
                       (job_id, job_id)).fetchone()
    assert row is not None
    return str(row["t"]).split(".")[-1].strip('"')


def _complete_one(repo: Repository, task: str = "t", **kwargs: object) -> int:
    job_id = repo.enqueue(task, {"n": 1}, **kwargs).id  # type: ignore[arg-type]
    (job,) = repo.claim(WORKER, ("default",), 1, 30.0)
    assert job.id == job_id
    assert repo.complete_many(WORKER, [(job.id, job.lock_token)]) == {job.id: True}
    return job_id


def _legacy_completed(conn: Connection, schema: str, n: int, *, days_ago: float, key_prefix: str | None = None) -> list[int]:
    """Completed rows as a pre-0009 tenure left them: in jobs, keys not in job_keys."""
    rows = conn.execute(
        f"INSERT INTO \"{schema}\".jobs (task, status, completed_at, idempotency_key) "
        f"SELECT 'old', 'completed', now() - make_interval(days => %s) + make_interval(secs => g), "
        f"CASE WHEN %s::text IS NULL THEN NULL ELSE %s::text || g END FROM generate_series(1, %s) g RETURNING id",
        (int(days_ago), key_prefix, key_prefix, n)).fetchall()
    return [int(r["id"]) for r in rows]


def test_a_completion_moves_the_job_and_every_reader_still_finds_it(conn: Connection, schema: str,
                                                                     repo: Repository) -> None:
    repo.history_ensure()
    job_id = _complete_one(repo)
    assert _where(conn, schema, job_id).startswith("job_history_p"), "lands in today's day partition"
    assert conn.execute(f'SELECT count(*) AS n FROM "{schema}".jobs').fetchone()["n"] == 0  # type: ignore[index]
    job = repo.get_job(job_id)
    assert job is not None and job["status"] == "completed" and job["completed_at"] is not None
    assert job["lock_token"] is None and job["attempt_count"] == 1
    assert [r["id"] for r in repo.job_list(status="completed")] == [job_id]
    assert repo.completed_counts() == {"default": 1}
    assert [r["id"] for r in repo.job_browse(JobFilter(status="completed"), limit=10)] == [job_id]
    assert [e["event"] for e in repo.job_events(job_id)] == ["completed"]
    assert repo.job_statuses([job_id])[job_id]["status"] == "completed"


def test_a_stale_completion_after_the_move_is_refused_and_audited(conn: Connection, schema: str,
                                                                 repo: Repository) -> None:
    job_id = _complete_one(repo)
    assert repo.complete_many(WORKER, [(job_id, uuid.uuid4())]) == {job_id: False}
    events = repo.job_events(job_id)
    assert [e["event"] for e in events] == ["completed", "stale_completion_rejected"]
    row = conn.execute(f"SELECT queue_name FROM \"{schema}\".job_events WHERE event = 'stale_completion_rejected'").fetchone()
    assert row is not None and row["queue_name"] == "default", "the queue is found in history"


def test_an_idempotency_key_keeps_deduplicating_after_its_job_moved(repo: Repository) -> None:
    first = _complete_one(repo, idempotency_key="order-7")
    again = repo.enqueue("t", {"n": 2}, idempotency_key="order-7")
    assert (again.id, again.created) == (first, False)
    from tenure.core.repository import JobSpec
    assert repo.enqueue_many([JobSpec("t", {}, idempotency_key="order-7"),
                              JobSpec("t", {}, idempotency_key="order-8")]) == 1


def test_a_key_whose_job_was_deleted_by_hand_is_free_again(conn: Connection, schema: str, repo: Repository) -> None:
    job = repo.enqueue("t", {}, idempotency_key="gone")
    conn.execute(f'DELETE FROM "{schema}".jobs WHERE id = %s', (job.id,))
    again = repo.enqueue("t", {}, idempotency_key="gone")
    assert again.created and again.id != job.id


def test_pre_0009_completed_rows_move_in_batches_with_their_partitions_and_keys(conn: Connection, schema: str,
                                                                                repo: Repository) -> None:
    ids = _legacy_completed(conn, schema, 25, days_ago=3, key_prefix="legacy-")
    pending = repo.enqueue("t", {}).id
    moved, after = [], 0
    for _ in range(4):
        n, after = repo.history_move_batch(10, after_id=after)
        moved.append(n)
    assert moved == [10, 10, 5, 0]
    assert conn.execute(f"SELECT count(*) AS n FROM \"{schema}\".jobs WHERE status = 'completed'").fetchone()["n"] == 0  # type: ignore[index]
    assert {_where(conn, schema, i) for i in ids} <= {p.name for p in repo.history_partitions()} - {"job_history_default"}
    assert _where(conn, schema, pending) == "jobs"
    dup = repo.enqueue("t", {}, idempotency_key="legacy-3")
    assert not dup.created and dup.id == ids[2], "a moved legacy key still deduplicates"


def test_retention_drops_whole_day_partitions_with_events_and_keys(conn: Connection, schema: str,
                                                                  repo: Repository) -> None:
    old = _legacy_completed(conn, schema, 5, days_ago=10, key_prefix="old-")
    conn.execute(f"INSERT INTO \"{schema}\".job_events (job_id, queue_name, event) SELECT id, 'default', 'completed' "
                 f"FROM unnest(%s::bigint[]) id", (old,))
    repo.history_move_batch(100)  # (moved, last id)
    repo.history_ensure()
    recent = _complete_one(repo, idempotency_key="new-1")
    before = {p.name for p in repo.history_partitions()}
    assert repo.history_drop_oldest(5 * 86400) == 5
    assert repo.history_drop_oldest(5 * 86400) is None
    after = {p.name for p in repo.history_partitions()}
    assert len(before - after) == 1
    assert repo.get_job(old[0]) is None and repo.get_job(recent) is not None
    assert conn.execute(f'SELECT count(*) AS n FROM "{schema}".job_events WHERE job_id = ANY(%s)', (old,)).fetchone()["n"] == 0  # type: ignore[index]
    fresh = repo.enqueue("t", {}, idempotency_key="old-1")
    assert fresh.created, "a pruned job's key is free again"
    assert not repo.enqueue("t", {}, idempotency_key="new-1").created


def test_a_completion_without_its_day_partition_lands_in_default_and_moves_later(conn: Connection, schema: str,
                                                                                repo: Repository) -> None:
    job_id = _complete_one(repo)
    assert _where(conn, schema, job_id) == "job_history_default"
    assert repo.history_ensure() >= 3
    assert _where(conn, schema, job_id).startswith("job_history_p")
    assert repo.history_ensure() == 0, "idempotent"


def test_prune_deletes_old_rows_of_the_default_partition(conn: Connection, schema: str, repo: Repository) -> None:
    job_id = _complete_one(repo, idempotency_key="d-1")
    conn.execute(f"UPDATE \"{schema}\".job_history SET completed_at = now() - interval '3 days' WHERE id = %s", (job_id,))
    assert repo.prune_completed(86400) == 1
    assert repo.get_job(job_id) is None
    assert repo.enqueue("t", {}, idempotency_key="d-1").created


@pytest.mark.parametrize("status", ["pending", "running", "failed", "cancelled"])
def test_readers_of_other_statuses_skip_job_history(conn: Connection, schema: str, repo: Repository, status: str) -> None:
    """job_history's CHECK (status = 'completed') lets the planner leave it out of a page of any
    other status, however big it grows."""
    repo.history_ensure()
    plan = conn.execute(f"EXPLAIN SELECT id FROM \"{schema}\".all_jobs WHERE status = '{status}' "
                        f"ORDER BY id DESC LIMIT 50").fetchall()
    text = "\n".join(str(r["QUERY PLAN"]) for r in plan)
    assert "job_history" not in text, text
    listing = conn.execute(f"EXPLAIN {repo._q['job_list']}", {  # the listing, through the browser's filter
        **JobFilter(status=status).params(), "before_id": None, "failed_since": None, "limit": 50},
        prepare=False).fetchall()
    text = "\n".join(str(r["QUERY PLAN"]) for r in listing)
    assert "job_history" not in text, text


def test_a_completion_deletes_the_message_receipt_with_its_job(conn: Connection, schema: str, repo: Repository) -> None:
    """sqs_receipts has no foreign key since 0009 (its cascade cost every completion a trigger):
    the completing statement deletes a completed message's first-receive record itself."""
    repo.enqueue("t", {})
    (job,) = repo.claim(WORKER, ("default",), 1, 30.0)
    repo.sqs_first_receive([job.id])
    assert conn.execute(f'SELECT count(*) AS n FROM "{schema}".sqs_receipts').fetchone()["n"] == 1  # type: ignore[index]
    assert repo.complete_many(WORKER, [(job.id, job.lock_token)]) == {job.id: True}
    assert conn.execute(f'SELECT count(*) AS n FROM "{schema}".sqs_receipts').fetchone()["n"] == 0  # type: ignore[index]


def column_differences(conn: Connection, schema: str) -> list[str]:
    """How ``job_history`` and the ``all_jobs`` view differ from ``jobs`` in their columns (names,
    types, order; from information_schema): every move copies whole rows (``INSERT … SELECT *``),
    so a column added to ``jobs`` must be added to ``job_history`` in the same migration, and the
    view recreated. Empty when they agree."""
    def columns(table: str) -> list[str]:
        rows = conn.execute("SELECT column_name, data_type, udt_name FROM information_schema.columns "
                            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                            (schema, table)).fetchall()
        assert rows, f"no table {table}"
        return [f"{r['column_name']} {r['data_type']} ({r['udt_name']})" for r in rows]

    jobs = columns("jobs")
    found = []
    for other in ("job_history", "all_jobs"):
        theirs = columns(other)
        if theirs != jobs:
            missing = [c for c in jobs if c not in theirs]
            extra = [c for c in theirs if c not in jobs]
            found.append(f"{other} differs from jobs: missing {missing}, extra {extra}"
                         + ("" if missing or extra else f", order {theirs}"))
    return found


def test_jobs_and_job_history_have_the_same_columns(conn: Connection, schema: str) -> None:
    """Fails when a migration adds (or changes) a column of one table and not the other."""
    assert column_differences(conn, schema) == []


def test_every_insert_into_job_history_names_every_column(conn: Connection, schema: str) -> None:
    """A statement that moves a job with a column list (job_complete_many) must list every column
    of jobs, or the moved job loses it (a flow key completed as NULL did, issue 38)."""
    columns = {r["column_name"] for r in conn.execute(  # type: ignore[index]
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = 'jobs'",
        (schema,)).fetchall()}
    listed = 0
    for name, sql in named_queries(schema).items():
        for m in re.finditer(r"INSERT INTO \S+\.job_history \(([^)]*)\)", sql):
            assert {c.strip() for c in m.group(1).split(",")} == columns, name
            listed += 1
    assert listed >= 1


def test_the_column_comparison_reports_a_column_added_to_jobs_only(conn: Connection, schema: str) -> None:
    conn.execute(f'ALTER TABLE "{schema}".jobs ADD COLUMN note text')
    diffs = column_differences(conn, schema)
    assert len(diffs) == 2 and all("missing ['note text (text)']" in d for d in diffs), diffs
    conn.execute(f'ALTER TABLE "{schema}".job_history ADD COLUMN note text')
    assert [d.split()[0] for d in column_differences(conn, schema)] == ["all_jobs"], "the view is not recreated yet"
    conn.execute(f'CREATE OR REPLACE VIEW "{schema}".all_jobs AS '
                 f'SELECT * FROM "{schema}".jobs UNION ALL SELECT * FROM "{schema}".job_history')
    assert column_differences(conn, schema) == []
    conn.execute(f'ALTER TABLE "{schema}".jobs ADD COLUMN a int, ADD COLUMN b int, ADD COLUMN c text')
    conn.execute(f'ALTER TABLE "{schema}".job_history ADD COLUMN b int, ADD COLUMN a int, ADD COLUMN c varchar(20)')
    (diff, _view) = column_differences(conn, schema)
    assert diff.startswith("job_history") and "missing ['c text (text)']" in diff, "a type is compared"
    conn.execute(f'ALTER TABLE "{schema}".job_history ALTER COLUMN c TYPE text')
    (diff, _view) = column_differences(conn, schema)
    assert diff.startswith("job_history") and ", order [" in diff, "so is the order"


def test_tenure_history_move_moves_every_legacy_row_and_reports_it(conn: Connection, schema: str, dsn: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _legacy_completed(conn, schema, 25, days_ago=3)
    assert cmd_history_move(argparse.Namespace(database_url=dsn, dsn=dsn, schema=schema, batch=10, pause=0.0)) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"moved 25 completed job\(s\) into job_history in 3 batch\(es\), \d+\.\d s(, [\d,]+/s)?\n",
                        out), out
    assert conn.execute(f"SELECT count(*) AS n FROM \"{schema}\".jobs").fetchone()["n"] == 0  # type: ignore[index]


def test_tenure_prune_drops_partitions_and_deletes_the_rest(conn: Connection, schema: str, dsn: str,
                                                            repo: Repository, capsys: pytest.CaptureFixture[str]) -> None:
    _legacy_completed(conn, schema, 5, days_ago=10)
    repo.history_move_batch(100)
    _legacy_completed(conn, schema, 3, days_ago=10)  # still in jobs: deleted row by row
    cancelled = repo.enqueue("t", {}).id
    conn.execute(f"UPDATE \"{schema}\".jobs SET status = 'cancelled', cancelled_at = now() - interval '10 days' "
                 f"WHERE id = %s", (cancelled,))
    assert cmd_prune(argparse.Namespace(database_url=dsn, dsn=dsn, schema=schema, older_than=5 * 86400.0,
                                        batch=2)) == 0
    assert capsys.readouterr().out == ("pruned 8 completed job(s) (1 history partition(s) dropped), 1 cancelled "
                                       "job(s), 0 stale worker row(s), 0 workflow(s) and 0 batch(es)\n")
    assert repo.get_job(cancelled) is None
