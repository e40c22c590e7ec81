"""tenure: a PostgreSQL-backed job queue that ends zombie jobs.

Public API: :class:`App` (task registry), :class:`JobContext` (what a handler receives), the
error classes, and :func:`enqueue` for enqueueing inside your own transaction (outbox, R17).
"""

from __future__ import annotations

from typing import Any

import psycopg

from tenure.control import CancelReport, cancel
from tenure.core.errors import AmbiguousError, ConfigError, InvalidPayload, LeaseLost, PermanentError, RetryableError
from tenure.core.repository import EnqueueResult, JobSpec, Repository
from tenure.core.version import __version__
from tenure.worker.app import App
from tenure.worker.context import JobContext


def enqueue(conn: psycopg.Connection[Any], task: str, payload: Any = None, *, schema: str = "tenure",
            queue: str = "default", idempotency_key: str | None = None, delay: float = 0.0,
            max_attempts: int = 5, correlation_id: str | None = None, priority: int = 0) -> EnqueueResult:
    """Enqueue on the caller's connection, inside the caller's transaction if one is open.

    The job (and its NOTIFY) become visible only when that transaction commits, so a job can
    never refer to a business change that rolled back (transactional outbox, R17).
    """
    result = Repository(conn, schema).enqueue(task, payload, queue=queue, idempotency_key=idempotency_key,
                                              delay=delay, max_attempts=max_attempts,
                                              correlation_id=correlation_id, priority=priority)
    if idempotency_key is not None:
        from tenure.observability.producer_metrics import count_enqueue_dedup
        count_enqueue_dedup(queue, task, hit=not result.created)
    return result


__all__ = ["AmbiguousError", "App", "CancelReport", "ConfigError", "EnqueueResult", "InvalidPayload", "JobContext",
           "JobSpec", "LeaseLost", "PermanentError", "RetryableError", "cancel", "enqueue", "__version__"]
