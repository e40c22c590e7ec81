"""The pure decision of what happens to an attempt (worker/outcomes.py), table-driven."""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest

from tenure.core.backoff import RetryPolicy
from tenure.core.errors import (
    AmbiguousError,
    EffectInDoubt,
    EffectUnrecorded,
    InvalidPayload,
    LeaseLost,
    PermanentError,
    RetryableError,
)
from tenure.core.repository import ClaimedJob
from tenure.worker.app import App
from tenure.worker.context import EffectDeferred, JobContext
from tenure.worker.outcomes import on_error, preflight

app = App(retry=RetryPolicy(base_delay=1.0, max_delay=4.0, max_attempts=3))


@app.task("t")
def t(ctx: JobContext) -> None:
    return None


def _validate(payload: Any) -> None:
    if not isinstance(payload, dict):
        raise ValueError("must be an object")


@app.task("v", validate=_validate)
def v(ctx: JobContext) -> None:
    return None


def _ctx(*, attempt: int = 1, max_attempts: int = 5, used_effect: bool = False, lost: bool = False,
         lost_locally: bool = False, task: str = "t", payload: Any = None) -> JobContext:
    job = ClaimedJob(id=1, queue="q", task=task, payload=payload if payload is not None else {}, payload_version=1,
                     attempt=attempt, max_attempts=max_attempts, lock_token=uuid.uuid4(), fence=1,
                     idempotency_key=None, correlation_id=None, checkpoint_step=None, checkpoint_data=None,
                     lease_expires_at=datetime.now(timezone.utc), wait_seconds=0.0)
    ctx = JobContext(job=job, worker_id="w", lease_seconds=60, _repo=lambda **_: None,
                     _on_stale=lambda *_: None, _heartbeat_now=lambda: None)
    ctx.used_effect = used_effect
    if lost:
        ctx.signal_lease_lost("test")
    if lost_locally:
        ctx.signal_lease_lost("local deadline passed", local=True)
    return ctx


CASES: list[tuple[str, BaseException, dict[str, Any], str, str]] = [
    # (case, exception, context, kind, error_code)
    ("retryable", RetryableError("x"), {}, "retry", "retryable"),
    ("plain exception", ValueError("x"), {}, "retry", "handler_error"),
    ("timeout", TimeoutError("x"), {}, "retry", "timeout"),
    ("connection", ConnectionError("x"), {}, "retry", "connection_error"),
    ("permanent", PermanentError("x", code="bad_card"), {}, "dead", "bad_card"),
    ("invalid payload", InvalidPayload("x"), {}, "dead", "invalid_payload"),
    ("ambiguous, unguarded", AmbiguousError("x"), {}, "dead", "ambiguous_unguarded"),
    ("ambiguous, guarded", AmbiguousError("x"), {"used_effect": True}, "retry", "ambiguous"),
    ("effect unrecorded", EffectUnrecorded("x"), {"used_effect": True}, "retry", "effect_unrecorded"),
    ("effect in doubt", EffectInDoubt("k"), {"used_effect": True}, "dead", "effect_in_doubt"),
    ("attempts exhausted by the task policy", RetryableError("x"), {"attempt": 3}, "dead", "retryable"),
    ("attempts exhausted by the job", RetryableError("x"), {"attempt": 2, "max_attempts": 2}, "dead", "retryable"),
    ("lease lost", LeaseLost("x"), {}, "drop", ""),
    ("any error after the lease is lost", ValueError("x"), {"lost": True}, "drop", ""),
    ("lease lost locally (deadline passed)", LeaseLost("x"), {"lost_locally": True}, "retry", "lease_lost"),
    ("any error after a local loss", ValueError("x"), {"lost_locally": True}, "retry", "lease_lost"),
    ("local loss, attempts exhausted", LeaseLost("x"), {"lost_locally": True, "attempt": 3}, "dead", "lease_lost"),
    ("effect deferred", EffectDeferred("k", 1.5), {}, "release", ""),
    ("interrupt", KeyboardInterrupt(), {}, "dead", "interrupted"),
]


@pytest.mark.parametrize("case, exc, ctx_args, kind, code", CASES, ids=[c[0] for c in CASES])
def test_on_error_decides(case: str, exc: BaseException, ctx_args: dict[str, Any], kind: str, code: str) -> None:
    outcome = on_error(app.tasks["t"], _ctx(**ctx_args), exc, rng=random.Random(1))
    assert (outcome.kind, outcome.error_code) == (kind, code)
    if kind == "retry":
        assert 0 <= outcome.delay <= 4.0 and outcome.error
    if kind == "release":
        assert outcome.event == "deferred" and outcome.delay == 1.5
    if kind in ("retry", "dead"):
        assert outcome.failure_code  # counted as a failure


def test_retry_after_wins_over_backoff_and_queue_policy_applies_without_task_override() -> None:
    assert on_error(app.tasks["t"], _ctx(), RetryableError("x", retry_after=42.0)).delay == 42.0
    plain = App()

    @plain.task("p")
    def p(ctx: JobContext) -> None:
        return None

    queue_policy = RetryPolicy(base_delay=0.0, max_delay=0.0, max_attempts=2)
    assert on_error(plain.tasks["p"], _ctx(attempt=2), ValueError("x"), queue_policy=queue_policy).kind == "dead"
    assert on_error(plain.tasks["p"], _ctx(attempt=1), ValueError("x"), queue_policy=queue_policy).delay == 0.0


@pytest.mark.parametrize("task, payload, code", [
    (None, {}, "unknown_task"),
    ("v", [1], "invalid_payload"),
    ("v", {"ok": 1}, None),
])
def test_preflight(task: str | None, payload: Any, code: str | None) -> None:
    ctx = _ctx(task=task or "missing", payload=payload)
    outcome = preflight(app.tasks.get(task) if task else None, ctx)
    assert (outcome.error_code if outcome else None) == code
    if outcome is not None:
        assert outcome.kind == "dead"
