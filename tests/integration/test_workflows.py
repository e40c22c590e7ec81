"""Workflows and batches against a real PostgreSQL (issue 39, docs/workflows.md): a step waits
until the write that completes its last dep releases it; a stale completion releases nothing; a
dead-lettered or cancelled dep cancels what waits for it (unless ignored), and a replay resumes
them; two deps completed by two transactions at once release their step once; outputs are
fenced; a running step adds steps; a batch's callbacks are enqueued once."""

from __future__ import annotations

import threading
import uuid

import pytest

import tenure
from tenure.core.db import Connection, connect
from tenure.core.errors import JobSpecError, PayloadError
from tenure.core.repository import ClaimedJob, Repository

pytestmark = pytest.mark.integration


def _status(repo: Repository, job: int) -> str:
    row = repo.get_job(job)
    assert row is not None
    return str(row["status"])


def _claim(repo: Repository, task: str | None = None, n: int = 10) -> list[ClaimedJob]:
    claimed = repo.claim("w", ["default"], n, 30)
    return [c for c in claimed if task is None or c.task == task]


def _complete(repo: Repository, jobs: list[ClaimedJob]) -> None:
    assert all(repo.complete_many("w", [(j.id, j.lock_token) for j in jobs]).values())


def _replay(repo: Repository, job: int) -> None:
    replayed, skipped, _ = repo.dlq_replay_batch(ids=[job], queue=None, error_code=None, after_id=0, batch=10,
                                                 validate=lambda row: None, reason="test")
    assert replayed == [job] and skipped == []


def _events(repo: Repository, job: int, event: str) -> list[dict[str, object]]:
    return [e for e in repo.job_events(job) if e["event"] == event]


def test_a_diamond_runs_in_dependency_order_and_each_step_is_released_once(conn: Connection, schema: str,
                                                                          repo: Repository) -> None:
    wf = tenure.Workflow("order-42")
    a = wf.add("charge", {"order": 42})
    b = wf.add("reserve", deps=[a])
    c = wf.add("email", deps=[a])
    wf.add("ship", deps=[b, c])
    wid = wf.enqueue(conn, schema=schema)
    ids = wf.step_ids
    assert [_status(repo, j) for j in ids] == ["pending", "waiting", "waiting", "waiting"]
    [stats] = repo.queue_stats("default")
    assert (stats.waiting, stats.ready) == (3, 1)  # waiting steps are not runnable
    [first] = _claim(repo)
    assert first.id == ids[0]
    # A stale completion (another token) releases nothing.
    assert repo.complete_many("w", [(first.id, uuid.uuid4())]) == {first.id: False}
    assert _status(repo, ids[1]) == "waiting"
    _complete(repo, [first])
    assert [_status(repo, j) for j in ids[1:]] == ["pending", "pending", "waiting"]
    middle = _claim(repo)
    assert sorted(j.id for j in middle) == ids[1:3]
    _complete(repo, middle[:1])
    assert _status(repo, ids[3]) == "waiting"
    _complete(repo, middle[1:])
    [last] = _claim(repo)
    assert last.id == ids[3]
    _complete(repo, [last])
    for job in ids[1:]:
        assert len(_events(repo, job, "released")) == 1
    shown = repo.workflow_show(wid)
    assert shown is not None and {s["status"] for s in shown["steps"]} == {"completed"}
    [listed] = [w for w in repo.workflow_list() if w["id"] == wid]
    assert listed["finished"] and listed["by_status"] == {"completed": 4}


def test_a_dead_dep_cancels_downstream_unless_ignored_and_a_replay_resumes(conn: Connection, schema: str,
                                                                         repo: Repository) -> None:
    wf = tenure.Workflow("fragile")
    a = wf.add("extract")
    b = wf.add("transform", deps=[a])
    c = wf.add("load", deps=[b])
    d = wf.add("cleanup", deps=[a], ignore_failed=True)
    wf.enqueue(conn, schema=schema)
    ids = {s.name: i for s, i in zip((a, b, c, d), wf.step_ids)}
    [job] = _claim(repo)
    assert repo.dead_letter("w", job.id, job.lock_token, error="boom", error_code="x")
    assert _status(repo, ids["transform"]) == "cancelled"
    assert _status(repo, ids["load"]) == "cancelled"  # transitively
    assert _status(repo, ids["cleanup"]) == "pending"  # it ignores a failed dep
    [cancel] = _events(repo, ids["transform"], "cancelled")
    assert cancel["reason"] == "dependency_failed"
    assert _events(repo, ids["load"], "cancelled")[0]["reason"] == "dependency_cancelled"
    # Replaying the dead step puts its dependents back to waiting; the workflow then completes.
    # Retrying a step its dead dep cancelled puts it back to waiting, not to pending: it never
    # runs before its deps.
    assert repo.retry_jobs([ids["transform"]], "test") == [ids["transform"]]
    assert _status(repo, ids["transform"]) == "waiting"
    _replay(repo, ids["extract"])
    assert _status(repo, ids["transform"]) == "waiting" and _status(repo, ids["load"]) == "waiting"
    for _ in range(4):
        claimed = _claim(repo)
        _complete(repo, claimed)
    assert {n: _status(repo, i) for n, i in ids.items()} == dict.fromkeys(ids, "completed")


def test_two_deps_completed_at_once_by_two_transactions_release_the_step_once(dsn: str, conn: Connection,
                                                                                schema: str, repo: Repository) -> None:
    for round_ in range(10):
        wf = tenure.Workflow(f"fan-in-{round_}")
        left, right = wf.add("left"), wf.add("right")
        wf.add("join", deps=[left, right])
        wf.enqueue(conn, schema=schema)
        claimed = _claim(repo, n=2)
        assert len(claimed) == 2
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def ack(job: ClaimedJob) -> None:
            try:
                with connect(dsn) as own:
                    barrier.wait()
                    Repository(own, schema).complete_many("w", [(job.id, job.lock_token)])
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=ack, args=(j,)) for j in claimed]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        join = wf.step_ids[2]
        assert _status(repo, join) == "pending", round_
        assert len(_events(repo, join, "released")) == 1
        _complete(repo, _claim(repo))


def test_outputs_are_fenced_and_reach_the_dependents(conn: Connection, schema: str, repo: Repository) -> None:
    wf = tenure.Workflow("outputs")
    a = wf.add("quote")
    wf.add("invoice", deps=[a])
    wf.enqueue(conn, schema=schema)
    [job] = _claim(repo)
    assert not repo.workflow_step_output_set(job.id, uuid.uuid4(), {"stale": True})
    assert repo.workflow_step_output_set(job.id, job.lock_token, {"amount": 12})
    with pytest.raises(PayloadError, match="output is"):
        repo.workflow_step_output_set(job.id, job.lock_token, "x" * 70_000)
    _complete(repo, [job])
    [child] = _claim(repo)
    assert repo.workflow_dep_outputs(child.id) == {"quote": {"amount": 12}}


def test_a_running_step_adds_steps_and_a_stale_one_cannot(conn: Connection, schema: str, repo: Repository) -> None:
    wf = tenure.Workflow("dynamic")
    wf.add("plan")
    wf.enqueue(conn, schema=schema)
    [job] = _claim(repo)
    spec = tenure.JobSpec("work", {"n": 1})
    assert repo.workflow_step_add(job.id, uuid.uuid4(), spec, name="work-1", deps=[job.id]) is None
    row = repo.workflow_step_add(job.id, job.lock_token, spec, name="work-1", deps=[job.id])
    assert row is not None and row["status"] == "waiting"
    with pytest.raises(JobSpecError, match="already has a step named"):
        repo.workflow_step_add(job.id, job.lock_token, spec, name="work-1", deps=[job.id])
    other = tenure.Workflow("other")
    other.add("elsewhere")
    other.enqueue(conn, schema=schema)
    with pytest.raises(JobSpecError, match="no step of workflow"):
        repo.workflow_step_add(job.id, job.lock_token, spec, name="work-2", deps=[other.step_ids[0]])
    _complete(repo, [job])
    assert _status(repo, int(row["id"])) == "pending"


def test_bad_workflows_are_refused_before_any_write(conn: Connection, schema: str, repo: Repository) -> None:
    wf = tenure.Workflow("bad")
    a = wf.add("a")
    with pytest.raises(JobSpecError, match="used twice"):
        wf.add("a")
    other = tenure.Workflow("other")
    with pytest.raises(JobSpecError, match="a dep must be a step of this workflow"):
        other.add("b", deps=[a])
    from tenure.core.repository.plans import plan_from_document
    cyclic = plan_from_document({"name": "loop", "steps": [{"task": "x", "deps": ["y"]}, {"task": "y", "deps": ["x"]}]})
    with pytest.raises(JobSpecError, match="cycle"):
        repo.workflow_enqueue(cyclic)
    assert repo.workflow_list() == []


def test_batch_callbacks_are_enqueued_once(conn: Connection, schema: str, repo: Repository) -> None:
    batch = tenure.Batch({"completed": "all_done", "exhausted": "some_dead", "finished": "ended"})
    for n in range(3):
        batch.add("resize", {"image": n}, queue="images")
    bid = batch.enqueue(conn, schema=schema)
    claimed = repo.claim("w", ["images"], 10, 30)
    assert len(claimed) == 3
    assert repo.dead_letter("w", claimed[0].id, claimed[0].lock_token, error="bad image", error_code="x")
    got = repo.batch_get(bid)
    assert got is not None and set(got["fired"]) == {"exhausted"}
    _complete(repo, claimed[1:])
    got = repo.batch_get(bid)
    assert got is not None and set(got["fired"]) == {"exhausted", "finished"}  # not completed: one died
    callbacks = _claim(repo)
    assert sorted(c.task for c in callbacks) == ["ended", "some_dead"]
    ended = next(c for c in callbacks if c.task == "ended")
    assert ended.payload == {"batch_id": bid, "event": "finished", "total": 3, "completed": 2, "failed": 1,
                             "cancelled": 0, "unfinished": 0}
    # A replay of the dead job, completed, fires `completed` then (finished is not fired twice).
    _replay(repo, claimed[0].id)
    [again] = repo.claim("w", ["images"], 10, 30)
    _complete(repo, [again])
    got = repo.batch_get(bid)
    assert got is not None and set(got["fired"]) == {"exhausted", "finished", "completed"}
    assert sorted(c.task for c in _claim(repo)) == ["all_done"]


def test_retention_deletes_a_workflow_and_a_batch_once_their_jobs_are_gone(conn: Connection, schema: str,
                                                                            repo: Repository) -> None:
    from tenure.reaper.history import Retention, RetentionConfig
    wf = tenure.Workflow("old")
    wf.add("only")
    wid = wf.enqueue(conn, schema=schema)
    batch = tenure.Batch({"finished": "done"})
    batch.add("only")
    bid = batch.enqueue(conn, schema=schema)
    conn.execute(f'UPDATE "{schema}".workflows SET created_at = now() - interval \'10 days\'')
    conn.execute(f'UPDATE "{schema}".batches SET created_at = now() - interval \'10 days\'')
    retention = Retention(RetentionConfig(older_than=5 * 86400.0))
    pruned = retention.run_once(repo)
    assert (pruned.workflows, pruned.batches) == (0, 0)  # their jobs are still there
    conn.execute(f'DELETE FROM "{schema}".jobs')  # as retention does, once they are old enough
    pruned = retention.run_once(repo)
    assert (pruned.workflows, pruned.batches) == (1, 1)
    assert repo.workflow_show(wid) is None and repo.batch_get(bid) is None


def test_cancelling_a_waiting_step_reports_it_and_cancels_what_waits_for_it(conn: Connection, schema: str,
                                                                           repo: Repository) -> None:
    from tenure import control
    wf = tenure.Workflow("cancelled")
    a = wf.add("a")
    b = wf.add("b", deps=[a])
    wf.add("c", deps=[b])
    wf.enqueue(conn, schema=schema)
    _, waiting, downstream = wf.step_ids
    report = control.cancel(conn, [waiting], schema=schema, requested_by="test")
    assert (report.cancelled, report.revoked, report.skipped) == ([waiting], [], {})
    assert _status(repo, downstream) == "cancelled"
    assert _events(repo, downstream, "cancelled")[0]["reason"] == "dependency_cancelled"
