"""The surfaces of flow keys against a real PostgreSQL (issue 38, item 1): ``App.enqueue``
derives a job's key from its payload with the task's ``flow_key`` callable (an explicit key wins,
a failing callable writes nothing), the handler sees it as ``ctx.flow_key``, and the job
browser's filter (``JobFilter(flow_key=)``, ``tenure jobs list --flow-key``) matches exactly, in
the hot table and in history, through the keys' own indexes."""

from __future__ import annotations

import contextlib
import re
from typing import Any

import pytest

from tenure import App, control
from tenure.core.db import Connection
from tenure.core.errors import ConfigError, JobSpecError
from tenure.core.repository import JobFilter, JobSpec, Repository
from tenure.worker.context import JobContext

pytestmark = pytest.mark.integration


def _app() -> App:
    app = App()

    @app.task("bill", queue="billing", payload_version=2, max_attempts=7,
              flow_key=lambda p: f"tenant:{p['tenant']}" if p.get("tenant") else None)
    def bill(ctx: Any) -> None: ...

    @app.task("broken", flow_key=lambda p: p["nope"])
    def broken(ctx: Any) -> None: ...

    return app


def _ids(repo: Repository, flt: JobFilter) -> list[int]:
    return [int(r["id"]) for r in repo.job_browse(flt, limit=100)]


def test_app_enqueue_derives_the_key_in_the_tasks_queue(conn: Connection, schema: str, repo: Repository) -> None:
    app = _app()
    derived = app.enqueue(conn, "bill", {"tenant": "acme"}, schema=schema)
    explicit = app.enqueue(conn, "bill", {"tenant": "acme"}, schema=schema, flow_key="vip", queue="other",
                           max_attempts=2, priority=5)
    unkeyed = app.enqueue(conn, "bill", {}, schema=schema)
    rows = {i: repo.get_job(i) or {} for i in (derived.id, explicit.id, unkeyed.id)}
    assert {i: (r["queue_name"], r["flow_key"], r["payload_version"], r["max_attempts"], r["priority"])
            for i, r in rows.items()} == {derived.id: ("billing", "tenant:acme", 2, 7, 0),
                                          explicit.id: ("other", "vip", 2, 2, 5),
                                          unkeyed.id: ("billing", None, 2, 7, 0)}
    again = app.enqueue(conn, "bill", {"tenant": "acme"}, schema=schema, idempotency_key="k")
    assert app.enqueue(conn, "bill", {"tenant": "b"}, schema=schema, idempotency_key="k") == \
        type(again)(again.id, False)

    # A failing callable, a bad derived key or an unknown task: refused, nothing written.
    before = len(repo.job_list(limit=100))
    with pytest.raises(JobSpecError, match="task 'broken': its flow_key callable raised KeyError"):
        app.enqueue(conn, "broken", {}, schema=schema)
    with pytest.raises(JobSpecError, match="task 'bill'.*at most 200 bytes"):
        app.enqueue(conn, "bill", {"tenant": "x" * 200}, schema=schema)
    with pytest.raises(JobSpecError, match="flow key must not be empty"):
        app.enqueue(conn, "bill", {"tenant": "acme"}, schema=schema, flow_key="")
    with pytest.raises(ConfigError, match="unknown task 'nope'"):
        app.enqueue(conn, "nope", {}, schema=schema)
    assert len(repo.job_list(limit=100)) == before


def test_the_handler_context_carries_the_key(conn: Connection, schema: str, repo: Repository) -> None:
    _app().enqueue(conn, "bill", {"tenant": "acme"}, schema=schema)
    repo.enqueue("bill", {}, queue="billing")
    claimed = repo.claim("w", ["billing"], 10, 30.0)

    def ctx(job: Any) -> JobContext:
        return JobContext(job=job, worker_id="w", lease_seconds=30.0, _repo=lambda **_: contextlib.nullcontext(repo),
                          _on_stale=lambda c, what: None, _heartbeat_now=lambda: None)

    assert sorted((ctx(j).flow_key for j in claimed), key=str) == [None, "tenant:acme"]
    with pytest.raises(AttributeError):
        ctx(claimed[0]).flow_key = "other"  # type: ignore[misc]


def test_the_filter_matches_the_key_exactly_in_jobs_and_history(conn: Connection, schema: str,
                                                                 repo: Repository) -> None:
    repo.enqueue_many([JobSpec("t", {"n": i}, flow_key=k)
                       for i, k in enumerate(("acme", "acme", "acme-2", "ACME", None, "acme"))])
    ids = [int(r["id"]) for r in reversed(repo.job_list(limit=100))]
    acme = [ids[0], ids[1], ids[5]]
    repo.cancel([ids[1]], "tester")
    # Two completed acme rows and one of another key, moved into job_history as history does.
    old = [int(r["id"]) for r in conn.execute(
        f"INSERT INTO \"{schema}\".jobs (task, status, completed_at, flow_key) "
        f"SELECT 'old', 'completed', now(), k FROM unnest(ARRAY['acme', 'other', 'acme']) k RETURNING id").fetchall()]
    assert repo.history_move_batch(100)[0] == 3
    in_history = conn.execute(f'SELECT id FROM "{schema}".job_history WHERE flow_key = %s ORDER BY id',
                              ("acme",)).fetchall()
    assert [r["id"] for r in in_history] == [old[0], old[2]]

    assert _ids(repo, JobFilter(flow_key="acme")) == sorted(acme + [old[0], old[2]], reverse=True)
    assert _ids(repo, JobFilter(flow_key="acme", status="completed")) == [old[2], old[0]]
    assert _ids(repo, JobFilter(flow_key="acme", status="cancelled")) == [ids[1]]
    assert _ids(repo, JobFilter(flow_key="ACME")) == [ids[3]]
    assert _ids(repo, JobFilter(flow_key="acm")) == []
    assert _ids(repo, JobFilter(flow_key="acme", queue="elsewhere")) == []
    assert repo.job_count(JobFilter(flow_key="acme")).count == 5
    assert repo.job_browse_ids(JobFilter(flow_key="acme"), ["pending"]) == [ids[0], ids[5]]
    listed = repo.job_list(flow_key="acme", status="pending")
    assert [(r["id"], r["flow_key"]) for r in listed] == [(ids[5], "acme"), (ids[0], "acme")]
    assert [r["flow_key"] for r in repo.job_browse(JobFilter(id=ids[2]))] == ["acme-2"]
    # `tenure jobs list` goes through control.list_jobs, which refuses a key no job can have.
    rows, cursor = control.list_jobs(conn, schema=schema, flow_key="acme", limit=2)
    assert [r["id"] for r in rows] == [old[2], old[0]] and cursor == old[0]
    with pytest.raises(JobSpecError, match="flow key must not be empty"):
        control.list_jobs(conn, schema=schema, flow_key="")


def test_the_filter_reads_the_flow_key_indexes(conn: Connection, schema: str, repo: Repository) -> None:
    repo.enqueue_many([JobSpec("t", flow_key=f"k{i % 50}") for i in range(500)])
    conn.execute(f"INSERT INTO \"{schema}\".jobs (task, status, completed_at, flow_key) "
                 f"SELECT 'old', 'completed', now(), 'k' || (g % 50) FROM generate_series(1, 200) g")
    repo.history_move_batch(1000)
    conn.execute(f'ANALYZE "{schema}".jobs')
    conn.execute(f'ANALYZE "{schema}".job_history')
    conn.execute("SET enable_seqscan = off")  # tables this small are cheaper to scan than to probe
    try:
        plan = "\n".join(str(next(iter(r.values()))) for r in conn.execute(
            "EXPLAIN " + repo._q["job_browse"], {**JobFilter(flow_key="k7").params(), "before_id": None,
                                                 "limit": 50}, prepare=False).fetchall())
    finally:
        conn.execute("RESET enable_seqscan")
    assert "jobs_flow_key_id_idx" in plan and re.search(r"job_history_p\d+_flow_key_id_idx", plan), plan
    assert "Seq Scan on jobs" not in plan and "Seq Scan on job_history_p" not in plan, plan
