"""The acknowledgement thread's fallback: a batch the database refuses is written one by one,
the refused outcome is given up (its lease will expire) and nothing else is lost or doubled."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry

from tenure.core.repository import Repository
from tenure.worker.acker import Acker
from tenure.worker.context import JobContext
from tenure.worker.metrics import WorkerMetrics
from tenure.worker.outcomes import Outcome
from tenure.worker.slots import Slots

pytestmark = pytest.mark.integration


def test_refused_batch_falls_back_to_one_by_one(dsn: str, schema: str, repo: Repository) -> None:
    ids = [repo.enqueue("t", {"i": i}).id for i in range(3)]
    jobs = {j.id: j for j in repo.claim("w1", ["default"], 3, 60)}
    ctxs = [JobContext(job=jobs[i], worker_id="w1", lease_seconds=60, _repo=lambda **_: None,
                       _on_stale=lambda *_: None, _heartbeat_now=lambda: None) for i in ids]
    slots = Slots(3)
    metrics = WorkerMetrics(CollectorRegistry())
    acker = Acker(dsn=dsn, schema=schema, worker_id="w1", slots=slots, metrics=metrics,
                  completed=lambda labels: metrics.completed.labels(*labels))
    batch = [Outcome(ctxs[0], "complete"),
             # PostgreSQL text cannot hold NUL: the database (driver) refuses this row.
             Outcome(ctxs[1], "dead", error="boom\x00", error_code="permanent"),
             Outcome(ctxs[2], "retry", delay=0.0, error="later", error_code="retryable")]
    slots.owe_acks(len(batch))
    assert acker.write(repo, batch) == []
    rows = {i: repo.get_job(i) for i in ids}
    assert rows[ids[0]]["status"] == "completed"  # type: ignore[index]
    assert rows[ids[1]]["status"] == "running", "given up: its lease expires, the reaper recovers it"  # type: ignore[index]
    assert rows[ids[2]]["status"] == "pending" and rows[ids[2]]["last_error_code"] == "retryable"  # type: ignore[index]
    events = [e["event"] for e in repo.job_events(ids[0])]
    assert events.count("completed") == 1 and "stale_completion_rejected" not in events, \
        "what the batch had already written is not written again"
    slots.wait_acked(time.monotonic() + 1)
    assert not slots.busy() and slots.processed == 2, "every outcome is accounted for; two were written"


def test_two_attempts_of_one_job_in_one_batch(repo: Repository) -> None:
    """A batch can hold a stale attempt and the current attempt of the same job (its lease was
    lost, then this worker claimed it again): the current one is accepted, the stale one is
    rejected and recorded, whatever their order in the batch."""
    job_id = repo.enqueue("t").id
    [first] = repo.claim("w1", ["default"], 1, 60)
    assert repo.release("w1", job_id, first.lock_token)  # stands in for a lost lease and a reap
    [second] = repo.claim("w1", ["default"], 1, 60)
    assert second.id == job_id and second.lock_token != first.lock_token
    assert repo.complete_many("w1", [(job_id, first.lock_token), (job_id, second.lock_token)]) == {job_id: True}
    assert repo.get_job(job_id)["status"] == "completed"  # type: ignore[index]
    events = [(e["event"], e["lock_token"]) for e in repo.job_events(job_id)]
    assert ("completed", second.lock_token) in events
    assert ("stale_completion_rejected", first.lock_token) in events
