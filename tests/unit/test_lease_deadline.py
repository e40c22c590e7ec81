"""``ctx.lease_lost`` agrees with ``ctx.check_lease()``: set once the local deadline has passed
(issue 12, defect 2), whoever looks first, and the lease-lost callbacks (async cancel) run."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest

from support.workers import RenewingRepo
from tenure.core.errors import LeaseLost
from tenure.core.repository import ClaimedJob
from tenure.worker.context import JobContext
from tenure.worker.heartbeat import HeartbeatConfig, Heartbeater
from tenure.worker.slots import Slots


def _ctx(lease: float) -> JobContext:
    job = ClaimedJob(id=1, queue="q", task="t", payload={}, payload_version=1, attempt=1, max_attempts=3,
                     lock_token=uuid.uuid4(), fence=1, idempotency_key=None, correlation_id=None,
                     checkpoint_step=None, checkpoint_data=None,
                     lease_expires_at=datetime.now(timezone.utc), wait_seconds=0.0)
    return JobContext(job=job, worker_id="w", lease_seconds=lease, _repo=lambda **_: None,
                      _on_stale=lambda *_: None, _heartbeat_now=lambda: None)


def test_flag_is_set_and_callbacks_run_once_the_local_deadline_passed() -> None:
    ctx = _ctx(lease=0.05)
    cancelled: list[int] = []
    ctx._on_lost.append(lambda: cancelled.append(1))
    assert not ctx.lease_lost.is_set()
    time.sleep(0.1)  # a freeze: nobody (no heartbeat) reported anything
    assert ctx.lease_lost.is_set(), "check_lease() would raise, so the flag must say lost"
    assert cancelled == [1]
    assert ctx.lease_lost_reason is not None and "deadline" in ctx.lease_lost_reason
    with pytest.raises(LeaseLost):
        ctx.check_lease()
    assert ctx.lease_lost.is_set() and cancelled == [1], "signalled once"


def test_wait_returns_at_the_deadline_not_at_its_timeout() -> None:
    ctx = _ctx(lease=0.2)
    assert ctx.lease_lost.wait(30) is True


def test_wait_follows_a_renewed_deadline() -> None:
    """A lease renewed (like a heartbeat does) before each deadline is never reported lost."""
    ctx = _ctx(lease=1.0)
    stop = threading.Event()

    def renew() -> None:
        while not stop.is_set():
            ctx.lease_deadline = time.monotonic() + 1.0
            stop.wait(0.01)

    renewer = threading.Thread(target=renew)
    renewer.start()
    try:
        assert ctx.lease_lost.wait(2.5) is False, "renewed in time: not lost"
    finally:
        stop.set()
        renewer.join()


def test_heartbeat_signals_an_overdue_lease_without_asking_the_database() -> None:
    """After a freeze the heartbeat must not trust a lease whose deadline passed: lost at once
    (the statement still carries it, so the database's verdict is recorded as evidence)."""
    ctx = _ctx(lease=30)
    ctx.lease_deadline = time.monotonic() - 0.01
    lost: list[str] = []
    slots = Slots(4)
    slots.take(ctx)
    beat = Heartbeater(HeartbeatConfig(lease=3, interval=1), dsn="", schema="s", worker_id="w",
                       slots=slots, metrics=None, on_lost=lambda c, why, local=False: lost.append((why, local)))
    repo = RenewingRepo()
    beat._repo = lambda: repo  # type: ignore[method-assign]
    assert beat.run_once() == 1
    assert len(lost) == 1 and "deadline" in lost[0][0] and lost[0][1] is True, "a local judgement"
    assert ctx.lease_deadline < time.monotonic(), "the database's renewal of a lease given up is not trusted"


def test_contexts_from_the_maker_equal_constructed_ones_and_share_no_per_attempt_state() -> None:
    hooks: dict[str, Any] = {"worker_id": "w", "lease_seconds": 30.0, "_repo": lambda **_: None,
                             "_on_stale": lambda *_: None, "_heartbeat_now": lambda: None}
    job = _ctx(lease=30).job
    make = JobContext.maker(**hooks)
    now = time.monotonic()
    built, made, other = JobContext(job=job, claimed_at=now, **hooks), make(job, now), make(job, now)
    per_attempt = ("lease_lost", "_on_lost")
    assert {k: v for k, v in vars(made).items() if k not in per_attempt} == \
        {k: v for k, v in vars(built).items() if k not in per_attempt}
    assert made.lease_deadline == now + 30.0
    assert made.lease_lost is not other.lease_lost and made._on_lost is not other._on_lost
    made.signal_lease_lost("lost")
    assert made.lease_lost.is_set() and not other.lease_lost.is_set()
    assert made.lease_lost._ctx is made


def test_held_count_is_what_the_slots_hold_per_queue_and_task() -> None:
    """The in-flight gauge's value: counted from the held jobs, so a lost slot or a job taken
    again under the same id cannot leave it off by one."""
    from dataclasses import replace
    slots = Slots(4)
    a, b = _ctx(lease=30), _ctx(lease=30)
    b.job = replace(b.job, id=2)
    c = _ctx(lease=30)
    c.job = replace(c.job, id=3, task="other")
    slots.take_many([a, b, c])
    assert (slots.held_count("q", "t"), slots.held_count("q", "other"), slots.held_count("x", "t")) == (2, 1, 0)
    again = _ctx(lease=30)  # the same job claimed again while its old attempt is still held
    slots.take(again)
    assert slots.held_count("q", "t") == 2
    assert slots.lose(a, is_async=True) is False, "replaced: no longer held"
    slots.finish(again)
    slots.finish(b)
    assert slots.held_count("q", "t") == 0 and slots.held_count("q", "other") == 1
