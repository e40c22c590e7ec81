"""Acks that keep up (issue 40), as pure logic: unacknowledged work is bounded by the worker's
capacity (the claim loop waits while outcomes are unwritten), the acker writes bounded batches,
and a finished job's lease is renewed until its outcome is written."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from prometheus_client import CollectorRegistry

from support.workers import RenewingRepo
from tenure.core.repository import ClaimedJob, HeartbeatOutcome
from tenure.worker.acker import ACK_BATCH_MAX_DEFAULT, Acker
from tenure.worker.context import JobContext
from tenure.worker.heartbeat import HeartbeatConfig, Heartbeater
from tenure.worker.metrics import WorkerMetrics
from tenure.worker.outcomes import Outcome
from tenure.worker.slots import Slots


def _ctx(job_id: int) -> JobContext:
    job = ClaimedJob(id=job_id, queue="q", task="t", payload={}, payload_version=1, attempt=1, max_attempts=3,
                     lock_token=uuid.uuid4(), fence=job_id, idempotency_key=None, correlation_id=None,
                     checkpoint_step=None, checkpoint_data=None,
                     lease_expires_at=datetime.now(timezone.utc), wait_seconds=0.0)
    return JobContext(job=job, worker_id="w", lease_seconds=30, _repo=lambda **_: None,
                      _on_stale=lambda *_: None, _heartbeat_now=lambda: None)


def test_a_finished_job_keeps_its_slot_until_its_outcome_is_written() -> None:
    """Before issue 40 a slot was freed when the handler returned, so the claim loop claimed
    again while outcomes waited: 193,084 jobs running for 400 slots."""
    wakeups: list[int] = []
    slots = Slots(4, on_acked=lambda: wakeups.append(1))
    ctxs = [_ctx(i) for i in range(1, 5)]
    slots.take_many(ctxs)
    assert slots.free() == 0
    for ctx in ctxs[:3]:
        slots.finish(ctx)
    assert slots.in_flight == 1 and slots.unwritten == 3
    assert slots.free() == 0, "three outcomes unwritten and one job running fill four slots"
    slots.acked(ctxs[:2])
    assert slots.free() == 2 and slots.unwritten == 1 and wakeups == [1], "written: free again, claim loop woken"
    assert slots.processed == 2


def test_running_plus_unwritten_never_exceeds_capacity_whatever_the_order() -> None:
    slots = Slots(3)
    seen: list[int] = []
    ctxs = [_ctx(i) for i in range(1, 31)]
    waiting: list[JobContext] = []
    for ctx in ctxs:
        if slots.free() == 0:  # the claim loop waits; the acker writes what is owed
            slots.acked(waiting)
            waiting = []
        assert slots.free() > 0
        slots.take(ctx)
        slots.finish(ctx)
        waiting.append(ctx)
        seen.append(slots.in_flight + slots.unwritten)
    assert max(seen) <= 3


def test_lost_lease_frees_the_slot_and_its_late_outcome_still_counts_until_written() -> None:
    slots = Slots(2)
    a, b = _ctx(1), _ctx(2)
    slots.take_many([a, b])
    assert slots.lose(a, is_async=True)
    assert slots.free() == 1
    slots.finish(a)  # its handler returns later: the (refused) write is still owed
    assert slots.free() == 0 and a.job.id not in slots.snapshot().finished, "a lost lease is not renewed"
    slots.acked([a])
    assert slots.free() == 1


def test_snapshot_carries_finished_jobs_until_acknowledged() -> None:
    slots = Slots(2)
    a, b = _ctx(1), _ctx(2)
    slots.take_many([a, b])
    slots.finish(a)
    snap = slots.snapshot()
    assert set(snap.held) == {2} and set(snap.finished) == {1}
    slots.acked([a])
    assert slots.snapshot().finished == {}


def test_the_drain_keeps_released_jobs_leased_until_their_release_is_written() -> None:
    slots = Slots(2)
    a = _ctx(1)
    slots.take(a)
    assert slots.take_all() == [a]
    assert set(slots.snapshot().finished) == {1} and slots.busy()
    slots.acked([a])
    assert not slots.busy()


def test_the_heartbeat_renews_finished_jobs_whose_outcome_is_unwritten() -> None:
    slots = Slots(4)
    running, finished = _ctx(1), _ctx(2)
    slots.take_many([running, finished])
    slots.finish(finished)
    lost: list[Any] = []
    beat = Heartbeater(HeartbeatConfig(lease=3, interval=1), dsn="", schema="s", worker_id="w",
                       slots=slots, metrics=None, on_lost=lambda *a, **k: lost.append(a))
    repo = RenewingRepo()
    beat._repo = lambda: repo  # type: ignore[method-assign,assignment]
    before = finished.lease_deadline
    assert beat.run_once() == 0
    assert sorted(jid for jid, _ in repo.sent[0]) == [1, 2], "the finished job's lease is renewed too"
    assert finished.lease_deadline > before
    slots.acked([finished])
    beat.run_once()
    assert [jid for jid, _ in repo.sent[1]] == [1], "once written, its lease is no longer renewed"
    assert lost == []


def test_a_finished_job_past_its_deadline_is_renewed_not_reported_lost() -> None:
    """A slow database may delay renewals past the local deadline: a running handler is told
    its lease is lost, but a finished job has nobody to tell; it keeps being renewed, and its
    outcome's write decides."""
    slots = Slots(2)
    finished = _ctx(1)
    slots.take(finished)
    slots.finish(finished)
    finished.lease_deadline = 0.0
    lost: list[Any] = []
    beat = Heartbeater(HeartbeatConfig(lease=3, interval=1), dsn="", schema="s", worker_id="w",
                       slots=slots, metrics=None, on_lost=lambda *a, **k: lost.append(a))
    assert beat._until_next_deadline() == float("inf"), "a deadline already past does not make the loop spin"
    repo = RenewingRepo()
    beat._repo = lambda: repo  # type: ignore[method-assign,assignment]
    assert beat.run_once() == 0 and lost == []
    assert [jid for jid, _ in repo.sent[0]] == [1]


def test_busy_rows_are_neither_renewed_nor_lost() -> None:
    slots = Slots(2)
    ctx = _ctx(1)
    slots.take(ctx)
    before = ctx.lease_deadline

    class Busy(RenewingRepo):
        def heartbeat(self, worker_id: str, held: list[tuple[int, uuid.UUID]], *args: Any,
                      **kwargs: Any) -> list[HeartbeatOutcome]:
            return [HeartbeatOutcome(jid, "busy", None, None) for jid, _ in held]

    lost: list[Any] = []
    beat = Heartbeater(HeartbeatConfig(lease=3, interval=1), dsn="", schema="s", worker_id="w",
                       slots=slots, metrics=None, on_lost=lambda *a, **k: lost.append(a))
    busy = Busy()
    beat._repo = lambda: busy  # type: ignore[method-assign,assignment]
    assert beat.run_once() == 0 and lost == [] and ctx.lease_deadline == before


def test_the_acker_writes_bounded_batches_in_order() -> None:
    """Before issue 40 the acker drained its whole queue into one statement."""
    slots = Slots(10_000)
    metrics = WorkerMetrics(CollectorRegistry())
    acker = Acker(dsn="", schema="s", worker_id="w", slots=slots, metrics=metrics,
                  completed=lambda labels: metrics.completed.labels(*labels))
    outcomes = [Outcome(_ctx(i), "complete") for i in range(1, ACK_BATCH_MAX_DEFAULT * 2 + 8)]
    for o in outcomes:
        acker.put(o)
    acker._queue.put(None)
    sizes, stops = [], []
    while True:
        batch, stop = acker._next_batch()
        sizes.append(len(batch))
        stops.append(stop)
        if stop:
            break
    assert sizes == [ACK_BATCH_MAX_DEFAULT, ACK_BATCH_MAX_DEFAULT, 7] and stops == [False, False, True]


def test_ack_batch_default_is_bounded() -> None:
    assert 50 <= ACK_BATCH_MAX_DEFAULT <= 2000



def test_an_acker_that_dies_gives_up_its_outcomes_and_stops_the_worker() -> None:
    """A bug in the acknowledgement thread must not leave finished jobs renewed for ever by a
    worker that can write nothing: their leases are let go (the reaper recovers them), the
    slots owe nothing, and the worker is told to stop."""
    slots = Slots(2)
    metrics = WorkerMetrics(CollectorRegistry())
    acker = Acker(dsn="postgresql://127.0.0.1:1/none", schema="s", worker_id="w", slots=slots, metrics=metrics,
                  completed=lambda labels: metrics.completed.labels(*labels))
    stopped: list[int] = []
    acker.on_failure = lambda: stopped.append(1)

    def broken(batch: list[Outcome]) -> None:
        raise RuntimeError("a bug")

    acker._observe_runtimes = broken  # type: ignore[method-assign]
    ctx = _ctx(1)
    slots.take(ctx)
    slots.finish(ctx)
    acker.put(Outcome(ctx, "complete"))
    acker.run()
    assert acker.failure == "a bug" and stopped == [1]
    assert slots.unwritten == 0 and slots.snapshot().finished == {} and not slots.busy()
