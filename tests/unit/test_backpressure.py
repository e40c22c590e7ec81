"""Back-pressure from a handler (issue 38, item 4) as pure logic: ``ctx.rate_limited`` refuses bad
arguments and unknown limits before anything changes, unwinds the handler with ``RateLimited``,
which becomes the outcome ``rate_limited`` (whatever the lease says: the write is a token CAS),
and the acker writes it with the limit and counts it, or counts the refused write as stale."""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tenure.core.repository import ClaimedJob
from tenure.worker.acker import Acker
from tenure.worker.app import App
from tenure.worker.backpressure import RATE_LIMITED_DELAY_MAX, RateLimited
from tenure.worker.context import JobContext
from tenure.worker.metrics import WorkerMetrics
from tenure.worker.outcomes import KINDS, on_error
from tenure.worker.slots import Slots

app = App()


@app.task("t")
def t(ctx: JobContext) -> None:
    return None


class FakeRepo:
    """Knows the rate limits in ``known``; records every call; ``accept`` answers the CAS."""

    def __init__(self, known: set[str], accept: bool = True) -> None:
        self.known, self.accept = known, accept
        self.calls: list[tuple[str, Any]] = []

    def rate_limit_known(self, name: str) -> bool:
        self.calls.append(("rate_limit_known", name))
        return name in self.known

    def rate_limited(self, worker_id: str, job_id: int, token: uuid.UUID, **kw: Any) -> bool:
        self.calls.append(("rate_limited", (worker_id, job_id, token, kw)))
        return self.accept


def _ctx(repo: FakeRepo) -> JobContext:
    job = ClaimedJob(id=7, queue="q", task="t", payload={}, payload_version=1, attempt=1, max_attempts=1,
                     lock_token=uuid.uuid4(), fence=1, idempotency_key=None, correlation_id=None,
                     checkpoint_step=None, checkpoint_data=None,
                     lease_expires_at=datetime.now(timezone.utc), wait_seconds=0.0, flow_key="tenant:a")

    @contextmanager
    def borrow(fresh: bool = False) -> Iterator[FakeRepo]:
        yield repo

    return JobContext(job=job, worker_id="w", lease_seconds=60, _repo=borrow,  # type: ignore[arg-type]
                      _on_stale=lambda *_: None, _heartbeat_now=lambda: None)


BAD_RETRY_AFTER: list[Any] = [-1, -0.001, math.inf, -math.inf, math.nan, RATE_LIMITED_DELAY_MAX + 1, "30", None,
                              True, [1]]


@pytest.mark.parametrize("retry_after", BAD_RETRY_AFTER, ids=[repr(v) for v in BAD_RETRY_AFTER])
def test_bad_retry_after_raises_value_error_and_touches_nothing(retry_after: Any) -> None:
    repo = FakeRepo({"api"})
    with pytest.raises(ValueError, match="retry_after must be a finite number of seconds from 0 to 86400"):
        _ctx(repo).rate_limited(retry_after, limit="api")
    assert repo.calls == []


@pytest.mark.parametrize("limit", ["", 5, b"api"])
def test_a_limit_that_is_not_a_name_raises_value_error_and_touches_nothing(limit: Any) -> None:
    repo = FakeRepo({"api"})
    with pytest.raises(ValueError, match="limit must be the name of a rate limit"):
        _ctx(repo).rate_limited(1, limit=limit)
    assert repo.calls == []


def test_an_unknown_limit_raises_value_error_after_one_lookup_and_writes_nothing() -> None:
    repo = FakeRepo({"api"})
    with pytest.raises(ValueError, match="no rate limit named 'apj'"):
        _ctx(repo).rate_limited(1, limit="apj")
    assert repo.calls == [("rate_limit_known", "apj")]


@pytest.mark.parametrize("retry_after, limit", [(0, None), (2.5, "api"), (RATE_LIMITED_DELAY_MAX, "api")])
def test_rate_limited_unwinds_the_handler_with_its_delay_and_limit(retry_after: float, limit: str | None) -> None:
    repo = FakeRepo({"api"})
    with pytest.raises(RateLimited) as raised:
        _ctx(repo).rate_limited(retry_after, limit=limit)
    assert (raised.value.delay, raised.value.limit) == (float(retry_after), limit)
    assert [c[0] for c in repo.calls] == ([] if limit is None else ["rate_limit_known"]), "nothing written yet"


@pytest.mark.parametrize("lost", [False, True])
def test_on_error_turns_it_into_a_rate_limited_outcome_even_after_a_lost_lease(lost: bool) -> None:
    ctx = _ctx(FakeRepo(set()))
    if lost:
        ctx.signal_lease_lost("test")  # the token CAS decides, as for a deferral
    outcome = on_error(app.tasks["t"], ctx, RateLimited(30.0, "api"), rng=random.Random(1))
    assert outcome.kind == "rate_limited" and outcome.kind in KINDS
    assert (outcome.delay, outcome.rate_limit, outcome.failure_code) == (30.0, "api", "")
    assert outcome.reason == "retry after 30s, limit api"


@pytest.mark.parametrize("accept", [True, False])
def test_the_acker_writes_it_and_counts_it_or_counts_the_stale_write(accept: bool) -> None:
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    repo = FakeRepo(set(), accept=accept)
    ctx = _ctx(repo)
    slots = Slots(1)
    slots.take(ctx)
    slots.finish(ctx)
    acker = Acker(dsn="postgresql:///unused", schema="s", worker_id="w", slots=slots, metrics=metrics,
                  completed=lambda labels: metrics.completed.labels(*labels))
    outcome = on_error(app.tasks["t"], ctx, RateLimited(1.5, None))
    acker._write(repo, [outcome], [])  # type: ignore[arg-type]
    [(name, (worker, job_id, token, kw))] = repo.calls
    assert (name, worker, job_id, token) == ("rate_limited", "w", 7, ctx.lock_token)
    assert kw == {"delay": 1.5, "limit": None, "reason": "retry after 1.5s", "queue": "q"}
    labels = {"queue": "q", "task": "t"}
    assert registry.get_sample_value("tenure_jobs_rate_limited_total", labels) == (1.0 if accept else None)
    stale = registry.get_sample_value("tenure_stale_writes_rejected_total", {**labels, "operation": "rate_limited"})
    assert stale == (None if accept else 1.0)
    assert slots.unwritten == 0
