"""What happens to an attempt, decided from the task, the exception and the retry policy:
complete, retry (with a full-jitter delay), dead-letter, release (no attempt used), rate_limited
(back-pressure from the handler: no attempt used, a rate limit paused) or drop (the lease is lost,
so nothing may be written). Pure: no database, no metrics, no clock; the acker writes the result
and the runtime counts it.
"""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass

from tenure.core.backoff import RetryPolicy, full_jitter_delay
from tenure.core.errors import AmbiguousError, EffectInDoubt, JobFailure, LeaseLost, PermanentError, classify_exception
from tenure.core.redaction import Redaction
from tenure.worker.app import Task
from tenure.worker.backpressure import RateLimited, event_reason
from tenure.worker.context import EffectDeferred, JobContext

KINDS = ("complete", "retry", "dead", "release", "rate_limited", "drop")


@dataclass
class Outcome:
    """One attempt's verdict, as the acker writes it."""

    ctx: JobContext
    kind: str
    """One of :data:`KINDS`."""
    delay: float = 0.0
    """Seconds before a retried, released or rate-limited job is available again."""
    error: str = ""
    error_code: str = ""
    event: str = "released"
    """The audit event of a release (``released``, ``deferred``)."""
    reason: str = ""
    failure_code: str = ""
    """The classified failure's code, when the handler failed (for the failure counter)."""
    rate_limit: str | None = None
    """The rate limit a ``rate_limited`` outcome pauses (None: only the job waits)."""
    runtime: float | None = None
    """The handler's wall time in seconds, for the runtime histogram (None: no handler ran to its
    end here, e.g. a job handed back by the drain)."""


def preflight(task: Task | None, ctx: JobContext) -> Outcome | None:
    """Dead-letter before running when no handler exists or the payload is invalid."""
    job = ctx.job
    if task is None:
        return Outcome(ctx, "dead", error=f"unknown task {job.task!r}: no handler registered in this app",
                       error_code="unknown_task")
    why = task.check_payload(job.payload)
    if why is not None:
        return Outcome(ctx, "dead", error=f"invalid payload for {job.task!r}: {why}", error_code="invalid_payload")
    return None


def lost(task: Task, ctx: JobContext, reason: str, *, queue_policy: RetryPolicy | None = None) -> Outcome:
    """The outcome of an attempt that ended after its lease was lost.

    A loss the database reported (heartbeat, checkpoint) is dropped: the token is no longer
    current, any write would be rejected, and the rejection is already recorded. A loss judged
    only here (the local deadline passed: a freeze, a slow or unreachable database) is written as
    a token CAS with code ``lease_lost``: if the database still holds this attempt's token, the job
    is handed back at once instead of waiting for the reaper; if not, the rejection is recorded.
    """
    if not ctx.lease_lost_locally:
        return Outcome(ctx, "drop", reason=reason)
    job, code = ctx.job, "lease_lost"
    if job.attempt >= min(job.max_attempts, task.retry_policy(queue_policy).max_attempts):
        return Outcome(ctx, "dead", error=f"attempts exhausted ({job.attempt}): {reason}", error_code=code,
                       failure_code=code)
    return Outcome(ctx, "retry", error=reason, error_code=code, failure_code=code)


def on_error(task: Task, ctx: JobContext, exc: BaseException, *, queue_policy: RetryPolicy | None = None,
             redaction: Redaction = Redaction(), rng: random.Random | None = None) -> Outcome:
    """The outcome of an attempt whose handler raised ``exc``."""
    job = ctx.job
    if isinstance(exc, EffectDeferred):
        return Outcome(ctx, "release", delay=exc.delay, event="deferred", reason=str(exc))
    if isinstance(exc, RateLimited):
        return Outcome(ctx, "rate_limited", delay=exc.delay, rate_limit=exc.limit,
                       reason=event_reason(exc.delay, exc.limit))
    if isinstance(exc, LeaseLost) or ctx.lease_lost.is_set():
        return lost(task, ctx, f"lease lost: {exc}", queue_policy=queue_policy)
    failure: JobFailure = classify_exception(exc, task.error_mappers) if isinstance(exc, Exception) \
        else PermanentError(f"{type(exc).__name__}", code="interrupted")
    text = redaction.error_text(f"{type(exc).__name__}: {exc}\n{''.join(traceback.format_exception(exc)[-3:])}")
    code = failure.code
    if isinstance(failure, EffectInDoubt):
        return Outcome(ctx, "dead", error=text, error_code=code, failure_code=code)
    if isinstance(failure, AmbiguousError) and not ctx.used_effect:
        return Outcome(ctx, "dead", error=text, error_code="ambiguous_unguarded", failure_code=code)
    if isinstance(failure, PermanentError):
        return Outcome(ctx, "dead", error=text, error_code=code, failure_code=code)
    policy = task.retry_policy(queue_policy)
    if job.attempt >= min(job.max_attempts, policy.max_attempts):
        return Outcome(ctx, "dead", error=f"attempts exhausted ({job.attempt}): {text}", error_code=code,
                       failure_code=code)
    retry_after = getattr(failure, "retry_after", None)
    delay = retry_after if retry_after is not None else full_jitter_delay(job.attempt, policy, rng)
    return Outcome(ctx, "retry", delay=delay, error=text, error_code=code, failure_code=code)
